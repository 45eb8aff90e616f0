"""Load-time cost of store verification (checksums + semantic checks) per shard.

For each part of STORE it times, best of ``--rounds``:

* ``plain``: ``load_shard(verify=False)`` (shape/dtype checks only, what loads cost before);
* ``hash``: xxh3_128 of every file ``load_shard`` maps (``integrity.check_file``);
* ``semantic``: the semantic checks (index ranges, lid->gid, masks, labels, finite x);
* ``verified``: ``load_shard(verify=True)`` with an empty per-process cache (hash + semantic).

and for the whole store ``book`` (``load_book``) and ``edge_ids``, the cross-shard check
``load_partition`` adds (warm).

``--cold`` first evicts the store's files from the page cache (``posix_fadvise DONTNEED`` on
each file: only these files, nothing else on the machine), so ``hash`` includes the disk read.
Prints one JSON line per part and a total.

Usage::

    python benchmarks/store_verify.py /work/stores/products-p4 [--cold] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from gnnsys.store import integrity, load_book, load_shard, read_manifest, read_shard
from gnnsys.store.layout import NODE_TO_PART, SHARD_ARRAYS, SHARD_DATA, shard_file


def evict(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def timed(fn) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure_part(root: Path, part: int, cold: bool, rounds: int) -> dict[str, float]:
    manifest = read_manifest(root)
    rels = [shard_file(part, k) for k in (*SHARD_ARRAYS, *SHARD_DATA)]
    rels = [r for r in rels if r in manifest.files] + [NODE_TO_PART]
    best: dict[str, float] = {}

    def keep(key: str, seconds: float) -> None:
        best[key] = min(best.get(key, float("inf")), seconds)

    for _ in range(rounds):
        if cold:
            for rel in rels:
                evict(root / rel)
        integrity.clear_caches()
        keep(
            "hash", timed(lambda: [integrity.check_file(root / r, manifest.files[r]) for r in rels])
        )
        keep("plain", timed(lambda: load_shard(root, part, verify=False)))
        integrity.clear_caches()
        if cold:
            for rel in rels:
                evict(root / rel)
        keep("verified", timed(lambda: load_shard(root, part, verify=True)))
        keep("verified_cached", timed(lambda: load_shard(root, part, verify=True)))
    best["semantic"] = max(best["verified"] - best["hash"] - best["plain"], 0.0)
    best["bytes"] = float(sum((root / r).stat().st_size for r in rels))
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("store", type=Path)
    parser.add_argument("--cold", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    manifest = read_manifest(args.store)
    total: dict[str, float] = {}
    for part in range(manifest.num_parts):
        row = measure_part(args.store, part, args.cold, args.rounds)
        print(
            json.dumps(
                {"part": part, "cold": args.cold, **{k: round(v, 3) for k, v in row.items()}}
            )
        )
        for key, value in row.items():
            total[key] = total.get(key, 0.0) + value
    integrity.clear_caches()
    book_s = timed(lambda: load_book(args.store))
    shards = [read_shard(args.store, p, verify=False) for p in range(manifest.num_parts)]
    one = manifest.typed()
    edges_s = min(
        timed(lambda: integrity.check_edge_ids(args.store, one, shards)) for _ in range(2)
    )
    total["edge_ids"] = edges_s
    print(
        json.dumps(
            {
                "part": "all",
                "cold": args.cold,
                "book": round(book_s, 3),
                **{k: round(v, 3) for k, v in total.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
