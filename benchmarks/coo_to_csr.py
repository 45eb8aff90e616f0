"""``coo_to_csr`` dedupe: ``np.unique`` (before) vs sort + neighbour compare (after).

Builds the homogenised ``synthetic:mag`` edge list (about 1 M nodes at ``--scale 0.52``) and a
uniform random COO of the same size, and times both dedupe paths on each, checking that the
outputs are bit-identical. Prints one JSON line per input:
    {"bench": "coo_to_csr", "input": ..., "nodes": ..., "keys": ..., "unique_s": ...,
     "sort_s": ..., "identical": true, "numpy": ..., "load_avg_1m": ...}

Usage: python benchmarks/coo_to_csr.py [--scale 0.52]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np


def _by_unique(key: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.unique(key)
    return out


def _by_sort(key: np.ndarray) -> np.ndarray:
    key = np.sort(key)
    keep = np.empty(key.shape[0], dtype=bool)
    keep[0] = True
    np.not_equal(key[1:], key[:-1], out=keep[1:])
    out: np.ndarray = key[keep]
    return out


def time_both(name: str, src: np.ndarray, dst: np.ndarray, n: int) -> dict[str, object]:
    """Time both dedupes of the symmetrised keys (what METIS's ``coo_to_csr`` call sorts)."""
    from gnnsys.types import coo_to_csr

    both_src, both_dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    key = both_dst.astype(np.int64) * n + both_src
    start = time.perf_counter()
    before = _by_unique(key)
    unique_s = time.perf_counter() - start
    start = time.perf_counter()
    after = _by_sort(key)
    sort_s = time.perf_counter() - start
    start = time.perf_counter()
    coo_to_csr(src, dst, n, symmetric=True)
    call_s = time.perf_counter() - start
    return {
        "bench": "coo_to_csr",
        "input": name,
        "nodes": n,
        "keys": int(key.shape[0]),
        "distinct": int(after.shape[0]),
        "unique_s": round(unique_s, 3),
        "sort_s": round(sort_s, 3),
        "coo_to_csr_s": round(call_s, 3),
        "identical": bool(before.dtype == after.dtype and np.array_equal(before, after)),
        "numpy": np.__version__,
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    """Parse ``--scale`` and print the two JSON lines."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scale", type=float, default=0.52)
    args = parser.parse_args()
    from gnnsys.datasets.mag import synthetic_mag

    graph = synthetic_mag(args.scale)
    offsets = graph.node_offsets()
    src = np.concatenate(
        [r.indices.astype(np.int64) + offsets[s] for (s, _, _), r in graph.relations.items()]
    )
    dst = np.concatenate(
        [r.dst_of_edges() + offsets[d] for (_, _, d), r in graph.relations.items()]
    )
    n = graph.num_nodes()
    print(json.dumps(time_both(f"synthetic:mag scale={args.scale}", src, dst, n)), flush=True)
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, n, src.shape[0]), rng.integers(0, n, src.shape[0])
    print(json.dumps(time_both("uniform random", src, dst, n)), flush=True)


if __name__ == "__main__":
    main()
