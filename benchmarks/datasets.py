"""Dataset load time and peak memory, one subprocess per case so each peak RSS is its own.

Prints one JSON line per case:
    {"bench": "datasets", "dataset": ..., "load_s": ..., "peak_rss_gib": ...,
     "import_rss_gib": ..., "graph_gib": ..., "build_over_graph": ..., ...}
``build_over_graph`` = (peak RSS - RSS after importing gnnsys) / bytes of the final arrays: the
"peak memory <= 2x the final arrays" claim of synthetic:rmat. The products-size case takes
/tmp/gnnsys-heavy.lock so it never overlaps another engineer's heavy run; do not wrap this
script in `flock` on the same file, or the inner lock waits on the outer one forever.

Usage: python benchmarks/datasets.py [--only NAME ...] [--no-products] [--root DIR]
"""

from __future__ import annotations

import argparse
import fcntl
import json
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

GIB = 2**30
HEAVY_LOCK = "/tmp/gnnsys-heavy.lock"
PRODUCTS = dict(num_nodes=2_449_029, num_edges=64_000_000, num_features=100)  # ~62 M after dedup
CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("cora", "planetoid:cora", {}),
    ("facebook", "musae:facebook", {}),
    ("rmat-1M", "synthetic:rmat", dict(num_nodes=1_000_000, avg_degree=20, num_features=100)),
    ("rmat-1M-nofeat", "synthetic:rmat", dict(num_nodes=1_000_000, avg_degree=20, num_features=0)),
    ("rmat-products", "synthetic:rmat", PRODUCTS),
]


def rss_gib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024 / GIB
    return float("nan")


def child(dataset: str, params: dict[str, Any], root: str | None) -> dict[str, Any]:
    from gnnsys.datasets import load

    import_rss = rss_gib()
    start = time.perf_counter()
    graph = load(dataset, root=root, **params)
    load_s = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB
    graph_gib = graph.nbytes / GIB
    return {
        "bench": "datasets",
        "dataset": dataset,
        "params": params,
        "num_nodes": graph.num_nodes,
        "num_edges": graph.num_edges,
        "num_features": graph.num_features,
        "load_s": round(load_s, 2),
        "peak_rss_gib": round(peak, 3),
        "import_rss_gib": round(import_rss, 3),
        "graph_gib": round(graph_gib, 3),
        "build_over_graph": round((peak - import_rss) / graph_gib, 2),
    }


@contextmanager
def heavy_lock(needed: bool) -> Iterator[None]:
    if not needed:
        yield
        return
    with open(HEAVY_LOCK, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def run_case(label: str, dataset: str, params: dict[str, Any], root: str | None) -> None:
    cmd = [sys.executable, __file__, "--child", dataset, "--params", json.dumps(params)]
    if root:
        cmd += ["--root", root]
    with heavy_lock(label == "rmat-products"):
        proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        reason = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed"
        print(json.dumps({"bench": "datasets", "case": label, "skipped": reason}), flush=True)
        return
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    print(json.dumps({"case": label, **row}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="case labels to run")
    parser.add_argument("--no-products", action="store_true", help="skip the 2.4M-node case")
    parser.add_argument("--root", help="data root (default: $GNNSYS_DATA, ../shared/datasets)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--params", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, json.loads(args.params), args.root)))
        return
    for label, dataset, params in CASES:
        if args.only and label not in args.only:
            continue
        if args.no_products and label == "rmat-products":
            continue
        run_case(label, dataset, params, args.root)


if __name__ == "__main__":
    main()
