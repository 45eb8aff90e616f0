#!/usr/bin/env python3
"""Partitioner speed and quality on a 1M-node R-MAT graph, measured side by side in one run.

Claims checked (issue 3), each printed as one JSON line:
  1. METIS through gnnsys <= 1.2x the wall time of calling pymetis directly on the same CSR,
     with the same cut (same seed -> same partition).
  2. Fennel's cut <= 1.5x METIS's, at >= 5x METIS's speed.

Graph: ``--graph FILE.npz`` (``indptr``/``indices``, e.g. from
../shared/baselines/make_rmat.py --scale 20 --edge-factor 10), else ``synthetic:rmat`` when
gnnsys has it, else a seeded R-MAT generated here. Wrap in ``flock /tmp/gnnsys-heavy.lock``.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from gnnsys.datasets.by_name import load_graph
from gnnsys.partitioners import partition
from gnnsys.partitioners.measure import Measured
from gnnsys.partitioners.metrics import edge_cut
from gnnsys.types import Graph, coo_to_csr


def rmat_graph(scale: int, edge_factor: int, seed: int) -> Graph:
    """Seeded symmetric R-MAT (a, b, c = 0.57, 0.19, 0.19), ids permuted, no loops/duplicates."""
    try:  # synthetic:rmat (planted communities) when gnnsys has it
        from gnnsys.datasets.rmat import rmat

        n = 1 << scale
        return rmat(num_nodes=n, avg_degree=2.0 * edge_factor, num_features=0, seed=seed)
    except ImportError:
        pass
    rng = np.random.default_rng(seed)
    n, m = 1 << scale, edge_factor * (1 << scale)
    src = np.zeros(m, dtype=np.int64)
    dst = np.zeros(m, dtype=np.int64)
    for bit in range(scale):
        r = rng.random(m)
        src |= (r >= 0.76).astype(np.int64) << bit
        dst |= (((r >= 0.57) & (r < 0.76)) | (r >= 0.95)).astype(np.int64) << bit
    perm = rng.permutation(n)
    indptr, indices = coo_to_csr(perm[src], perm[dst], n, symmetric=True, self_loops=False)
    return Graph(indptr=indptr, indices=indices, num_nodes=n, name=f"rmat-s{scale}")


def pymetis_direct(graph: Graph, num_parts: int, seed: int) -> tuple[np.ndarray, Measured]:
    """What a user would write: pymetis on the graph's own CSR (int64 copy of the indices)."""
    import pymetis

    with Measured() as m:
        adjacency = pymetis.CSRAdjacency(graph.indptr, graph.indices.astype(np.int64))
        result = pymetis.part_graph(num_parts, adjacency, options=pymetis.Options(seed=seed))
        part_N = np.asarray(result.vertex_part, dtype=np.int32)
    return part_N, m


def emit(**row: object) -> None:
    print(json.dumps(row), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--graph", help=".npz CSR file (default: generate R-MAT)")
    p.add_argument("--scale", type=int, default=20)
    p.add_argument("--edge-factor", type=int, default=10)
    p.add_argument("--parts", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--streaming",
        default="fennel,ldg,fennel:passes=3",
        help="streaming variants, METHOD[:key=value...] comma list",
    )
    args = p.parse_args()
    t0 = time.perf_counter()
    graph = (
        load_graph(args.graph, None, {})
        if args.graph
        else rmat_graph(args.scale, args.edge_factor, args.seed)
    )
    emit(
        bench="partition",
        graph=graph.name,
        num_nodes=graph.num_nodes,
        num_edges=graph.num_edges,
        load_seconds=round(time.perf_counter() - t0, 2),
    )
    n_edges, P = graph.num_edges, args.parts

    direct_part, direct = pymetis_direct(graph, P, args.seed)
    direct_cut = edge_cut(graph, direct_part)
    emit(
        method="pymetis_direct",
        parts=P,
        seconds=round(direct.seconds, 2),
        edge_cut_fraction=round(direct_cut / n_edges, 4),
        peak_rss_bytes=direct.peak_rss_bytes,
    )

    with Measured() as ours:
        metis = partition(graph, "metis", P, seed=args.seed)
    metis_cut = edge_cut(graph, metis.part_N)
    emit(
        method="metis",
        parts=P,
        seconds=round(ours.seconds, 2),
        edge_cut_fraction=round(metis_cut / n_edges, 4),
        peak_rss_bytes=ours.peak_rss_bytes,
        time_ratio_vs_pymetis=round(ours.seconds / direct.seconds, 3),
        same_partition=bool(np.array_equal(metis.part_N, direct_part)),
        same_cut=metis_cut == direct_cut,
        target_time_ratio="<= 1.2",
    )

    for spec in args.streaming.split(","):
        method, *opts = spec.split(":")
        cfg = {k: json.loads(v) for k, v in (o.split("=") for o in opts)}
        with Measured() as m:
            a = partition(graph, method, P, seed=args.seed, **cfg)
        cut = edge_cut(graph, a.part_N)
        emit(
            method=method,
            options=cfg,
            parts=P,
            seconds=round(m.seconds, 2),
            edge_cut_fraction=round(cut / n_edges, 4),
            peak_rss_bytes=m.peak_rss_bytes,
            node_balance=round(float(np.bincount(a.part_N).max() * P / graph.num_nodes), 4),
            cut_ratio_vs_metis=round(cut / metis_cut, 3),
            speedup_vs_metis=round(ours.seconds / m.seconds, 2),
            target="cut_ratio <= 1.5 and speedup >= 5",
        )


if __name__ == "__main__":
    main()
