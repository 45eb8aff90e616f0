"""``synthetic:mag`` build time and peak memory, and typed-sampler throughput on it.

One subprocess per scale, so each peak RSS is its own. Prints one JSON line per scale:
    {"bench": "hetero_mag", "scale": ..., "nodes": ..., "edges": ..., "build_s": ...,
     "peak_rss_gib": ..., "import_rss_gib": ..., "graph_gib": ..., "load_avg_1m": ...,
     "sample_seeds_per_s": ..., "sample_edges_per_s": ...}
Sampling: 20 batches of 1024 paper seeds, fanouts [15, 10] on every relation (reverse
relations added, as PyG's ToUndirected), one thread.

Usage: python benchmarks/hetero_mag.py [--scales 0.1 0.52 1.0]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

GIB = 2**30


def run_one(scale: float) -> dict[str, float]:
    import torch

    from gnnsys.datasets.mag import synthetic_mag
    from gnnsys.sampler.hetero import HeteroNeighborSampler, csr_sources

    import_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB
    start = time.perf_counter()
    graph = synthetic_mag(scale, reverse=True)
    build_s = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB
    config = HeteroNeighborSampler.Config(fanouts={et: (15, 10) for et in graph.edge_types})
    sampler = HeteroNeighborSampler(config, sources=csr_sources(graph), node_types=graph.node_types)
    order = torch.randperm(graph.num_nodes("paper"), generator=torch.Generator().manual_seed(0))
    edges, start = 0, time.perf_counter()
    for i in range(20):
        sub = sampler.sample(order[i * 1024 : (i + 1) * 1024], input_type="paper", seed=i)
        edges += sum(sum(n) for n in sub.num_sampled_edges.values())
    sample_s = time.perf_counter() - start
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
        "sample_seeds_per_s": round(20 * 1024 / sample_s),
        "sample_edges_per_s": round(edges / sample_s),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", type=float, nargs="+", default=[0.1, 0.52])
    parser.add_argument("--one", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(run_one(args.one)), flush=True)
        return
    for scale in args.scales:
        subprocess.run([sys.executable, __file__, "--one", str(scale)], check=True)


if __name__ == "__main__":
    main()
