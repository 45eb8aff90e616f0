"""What ``store.pages.ReadAhead`` costs an in-memory run: draws over a cached, file-mapped CSR.

The sampler's reads go through ``ReadAhead.take``; where every page is resident its checks back
off to one in 64 calls. This times the same draws with the read-ahead objects live and with
plain ones (gathers only), in alternating rounds, and prints one JSON line.

Usage::

    python benchmarks/read_ahead.py [--nodes 1000000] [--rounds 6]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from gnnsys.sampler.csr_source import CSRNeighborSource
from gnnsys.store.pages import ReadAhead


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=1_000_000)
    p.add_argument("--degree", type=int, default=20)
    p.add_argument("--rounds", type=int, default=6)
    args = p.parse_args()
    n, deg = args.nodes, args.degree
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        np.save(Path(tmp) / "ip.npy", np.arange(0, (n + 1) * deg, deg, dtype=np.int64))
        np.save(Path(tmp) / "ix.npy", rng.integers(0, n, n * deg).astype(np.int32))
        indptr = np.load(Path(tmp) / "ip.npy", mmap_mode="r", allow_pickle=False)
        indices = np.load(Path(tmp) / "ix.npy", mmap_mode="r", allow_pickle=False)
        source = CSRNeighborSource(indptr, indices)
        live = source._ahead
        plain = {k: ReadAhead(np.asarray(v.array)) for k, v in live.items()}  # views: no map
        dst = [torch.from_numpy(rng.integers(0, n, 15_000)) for _ in range(50)]

        def run() -> float:
            start = time.perf_counter()
            for i, d in enumerate(dst):
                source.sample_neighbors(d, 10, seed=i, hop=0)
            return time.perf_counter() - start

        run()  # every page resident
        times: dict[str, list[float]] = {"read_ahead": [], "plain": []}
        for _ in range(args.rounds):
            for name, aheads in (("read_ahead", live), ("plain", plain)):
                source._ahead = aheads
                times[name].append(run())
    med = {k: float(np.median(v)) for k, v in times.items()}
    print(json.dumps({
        "bench": "read_ahead", "nodes": n, "degree": deg, "draws": 50, "dst_per_draw": 15_000,
        "fanout": 10, "seconds": times, "median": med,
        "overhead": med["read_ahead"] / med["plain"] - 1,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
