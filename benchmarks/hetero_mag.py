"""``synthetic:mag`` build time and peak memory, and typed-sampler throughput on it.

One subprocess per scale, so each peak RSS is its own. Prints one JSON line per scale:
    {"bench": "hetero_mag", "scale": ..., "nodes": ..., "edges": ..., "build_s": ...,
     "peak_rss_gib": ..., "import_rss_gib": ..., "graph_gib": ..., "load_avg_1m": ...,
     "sample_seeds_per_s": ..., "sample_edges_per_s": ...}
Sampling: 20 batches of 1024 paper seeds, fanouts [15, 10] on every relation (reverse
relations added, as PyG's ToUndirected), one thread. ``--modes`` adds one line per extended
mode on the same graph (``ExtendedSampler``; ``temporal``: papers' ``year`` as node time,
which makes trees disjoint too, with rows in time order as the loader sorts them):
    {"bench": "hetero_mag_sampler", "scale": ..., "mode": "disjoint" | "temporal",
     "sample_seeds_per_s": ..., "sample_edges_per_s": ..., "plain_seeds_per_s": ...,
     "load_avg_1m": ...}
and the PyG-style loaders on it, features joined (``node_loader``: 1024 paper seeds per batch;
``link_loader``: 1024 ``writes`` links plus 1024 binary negatives), 10 batches after one warm-up:
    {"bench": "hetero_mag_loader", "scale": ..., "mode": "node_loader" | "link_loader",
     "seeds_per_s": ..., "edges_per_s": ..., "ms_per_batch": ..., "load_avg_1m": ...}

Usage: python benchmarks/hetero_mag.py [--scales 0.1 0.52 1.0]
           [--modes disjoint temporal node_loader link_loader]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from typing import Any

GIB = 2**30


def _rate(sample: Any, order: Any) -> tuple[int, int]:
    """``(seeds/s, edges/s)`` of 20 batches of 1024 seeds."""
    edges, start = 0, time.perf_counter()
    for i in range(20):
        sub = sample(order[i * 1024 : (i + 1) * 1024], input_type="paper", seed=i)
        edges += sum(sum(n) for n in sub.num_sampled_edges.values())
    sample_s = time.perf_counter() - start
    return round(20 * 1024 / sample_s), round(edges / sample_s)


def run_extended(graph: Any, scale: float, mode: str, order: Any, plain: int) -> dict[str, Any]:
    import torch

    from gnnsys.sampler.candidates import time_sorted
    from gnnsys.sampler.extended import ExtendedSampler
    from gnnsys.sampler.neighbor import csr_sources

    fanouts = {et: (15, 10) for et in graph.edge_types}
    config = ExtendedSampler.Config(fanouts=fanouts, disjoint=mode == "disjoint")
    year = torch.from_numpy(graph.nodes["paper"].attrs["year"])
    sources = csr_sources(graph)
    if mode == "temporal":  # as the loader does: rows from papers in time order (sort_csc)
        sources = {
            et: time_sorted(s, src_time=year) if et[0] == "paper" else s
            for et, s in sources.items()
        }
    sampler = ExtendedSampler(
        config,
        sources=sources,
        num_nodes={t: s.num_nodes for t, s in graph.nodes.items()},
        node_time={"paper": year} if mode == "temporal" else None,
    )
    seeds_per_s, edges_per_s = _rate(sampler.sample, order)
    return {
        "bench": "hetero_mag_sampler",
        "scale": scale,
        "mode": mode,
        "sample_seeds_per_s": seeds_per_s,
        "sample_edges_per_s": edges_per_s,
        "plain_seeds_per_s": plain,
        "load_avg_1m": os.getloadavg()[0],
    }


def run_loader(graph: Any, scale: float, mode: str) -> dict[str, Any]:
    """Batches/s of ``NeighborLoader`` or ``LinkNeighborLoader`` on ``graph`` (one thread)."""
    from gnnsys.loader import LinkNeighborLoader, NeighborLoader

    if mode == "link_loader":
        loader: Any = LinkNeighborLoader(
            graph, [15, 10], edge_label_index=("author", "writes", "paper"), batch_size=1024,
            shuffle=True, neg_sampling_ratio=1.0, seed=0,
        )  # fmt: skip
    else:
        loader = NeighborLoader(
            graph, [15, 10], input_nodes="paper", batch_size=1024, shuffle=True, seed=0
        )
    batches = iter(loader)
    next(batches)  # warm-up: first-touch of the graph's pages
    edges, start = 0, time.perf_counter()
    for _ in range(10):
        batch = next(batches)
        edges += sum(batch[et].num_edges for et in batch.edge_types)
    seconds = time.perf_counter() - start
    return {
        "bench": "hetero_mag_loader",
        "scale": scale,
        "mode": mode,
        "seeds_per_s": round(10 * 1024 / seconds),
        "edges_per_s": round(edges / seconds),
        "ms_per_batch": round(seconds / 10 * 1000, 1),
        "load_avg_1m": os.getloadavg()[0],
    }


def run_one(scale: float, modes: list[str]) -> dict[str, float]:
    import torch

    from gnnsys.datasets.mag import synthetic_mag
    from gnnsys.sampler.neighbor import RelationalSampler, csr_sources

    import_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB
    start = time.perf_counter()
    graph = synthetic_mag(scale, reverse=True)
    build_s = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB
    config = RelationalSampler.Config(fanouts={et: (15, 10) for et in graph.edge_types})
    sampler = RelationalSampler(config, sources=csr_sources(graph), node_types=graph.node_types)
    order = torch.randperm(graph.num_nodes("paper"), generator=torch.Generator().manual_seed(0))
    seeds_per_s, edges_per_s = _rate(sampler.sample, order)
    torch.set_num_threads(1)
    for mode in modes:
        if mode.endswith("_loader"):
            print(json.dumps(run_loader(graph, scale, mode)), flush=True)
        else:
            print(json.dumps(run_extended(graph, scale, mode, order, seeds_per_s)), flush=True)
    return {
        "bench": "hetero_mag",
        "scale": scale,
        "nodes": graph.num_nodes(),
        "edges": graph.num_edges,
        "build_s": round(build_s, 2),
        "peak_rss_gib": round(peak, 3),
        "import_rss_gib": round(import_rss, 3),
        "graph_gib": round(graph.nbytes / GIB, 3),
        "load_avg_1m": os.getloadavg()[0],
        "sample_seeds_per_s": seeds_per_s,
        "sample_edges_per_s": edges_per_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", type=float, nargs="+", default=[0.1, 0.52])
    parser.add_argument(
        "--modes", nargs="*", default=[],
        choices=["disjoint", "temporal", "node_loader", "link_loader"],
        help="also time ExtendedSampler (disjoint, temporal) or the loaders on each graph",
    )  # fmt: skip
    parser.add_argument("--one", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(run_one(args.one, args.modes)), flush=True)
        return
    for scale in args.scales:
        command = [sys.executable, __file__, "--one", str(scale), "--modes", *args.modes]
        subprocess.run(command, check=True)


if __name__ == "__main__":
    main()
