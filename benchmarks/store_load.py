"""What a checked load of a store costs: every part's shard, and a full ``verify``, warm.

For the store at STORE (either kind) it times, best of ``--rounds``, with the per-process
checksum and semantic caches emptied before each:

* ``load_s``: every part read with its checks (``read_shard(verify=True)``; a homogeneous
  store also as ``load_shard``, what its trainers and owners call);
* ``verify_s``: ``verify`` (every sha256 and xxh3, every shard, every edge id);
* ``peak_rss_mb``: the process's peak resident memory after both.

One JSON line. ``--label`` tags it, so that runs of two checkouts can be told apart in one
file (run each checkout's copy from outside the checkout: ``cd /tmp && PYTHONPATH=TREE python
TREE/benchmarks/store_load.py STORE``).

Usage::

    python benchmarks/store_load.py /tmp/parts/rmat2 [--rounds 3] [--label new]
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import gnnsys.store as store
from gnnsys.store import integrity


def _readers() -> tuple:  # type: ignore[type-arg]
    """The shard reader and full check of this checkout (before one reader served both kinds,
    a typed store had ``read_hetero_shard`` and ``verify_hetero``)."""
    read = getattr(store, "read_shard", None) or store.read_hetero_shard  # type: ignore[attr-defined]
    full = store.verify if hasattr(store, "read_shard") else None
    return read, full


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("store", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    read, full = _readers()
    typed = store.is_hetero_store(args.store)
    if full is None:  # the earlier checkout: one full check per kind
        full = store.verify_hetero if typed else store.verify  # type: ignore[attr-defined]
    num_parts = store.read_store_manifest(args.store).num_parts
    load = read if typed else store.load_shard
    best = {"load_s": float("inf"), "verify_s": float("inf")}
    for _ in range(args.rounds):
        integrity.clear_caches()
        start = time.perf_counter()
        for part in range(num_parts):
            load(args.store, part)
        best["load_s"] = min(best["load_s"], time.perf_counter() - start)
        integrity.clear_caches()
        start = time.perf_counter()
        full(args.store)
        best["verify_s"] = min(best["verify_s"], time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    row = {
        "bench": "store_load",
        "label": args.label,
        "store": str(args.store),
        "kind": "typed" if typed else "homogeneous",
        "parts": num_parts,
        **{k: round(v, 3) for k, v in best.items()},
        "peak_rss_mb": round(peak, 1),
    }
    print(json.dumps(row))


if __name__ == "__main__":
    main()
