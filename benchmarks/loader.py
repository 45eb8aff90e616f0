"""LinkNeighborLoader vs NeighborLoader throughput on synthetic:rmat (1M nodes, ~20M edges).

Prints JSON lines: one per (loader, round) measurement, then one summary with the median and
best-of-rounds figures and the LinkNeighborLoader / NeighborLoader ratios. Rounds alternate the
loaders (and which one goes first), so load from other processes on the shared cores hits both
alike; every line records the 1-minute load average.

What is timed: whole batches as the loaders yield them (sampling, relabelling, PyG bookkeeping,
``Data`` assembly), on one thread (``num_workers=0``), no node features (the graph has none, so
the figures are sampler + loader cost, not feature-copy bandwidth). Both loaders use the same
fanouts and the same CSR:

* ``node``: ``NeighborLoader``, ``batch_size`` seed nodes per batch;
* ``link``: ``LinkNeighborLoader``, ``batch_size`` seed links per batch (up to ``2 x`` as many
  seed nodes, their endpoints);
* ``link_neg``: the same with binary negatives (``neg_sampling_ratio=1``: ``4 x`` seed nodes).

Reported per batch stream: ``seeds_per_s`` (seed nodes, or seed links), ``sampled_edges_per_s``
(edges in the batches' ``edge_index``) and ``batches_per_s``. The summary's ratios are link over
node for each figure.

Usage::

    python benchmarks/loader.py [--graph /tmp/gnnsys-synthetic-rmat.npz] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gnnsys.loader import LinkNeighborLoader, NeighborLoader
from gnnsys.types import Graph

KINDS = ("node", "link", "link_neg")


def load_graph(path: Path) -> Graph:
    """The rmat CSR as a gnnsys ``Graph`` (written from ``synthetic:rmat`` if missing)."""
    if not path.exists():
        from gnnsys.datasets.synthetic import GENERATORS

        graph = GENERATORS["rmat"](num_nodes=1 << 20, avg_degree=20.0, num_features=0, seed=0)
        np.savez(path, indptr=graph.indptr, indices=graph.indices.astype(np.int64))
    z = np.load(path)
    indptr = z["indptr"].astype(np.int64)
    return Graph(indptr=indptr, indices=z["indices"].astype(np.int32), num_nodes=len(indptr) - 1)


def make_loaders(graph: Graph, args: argparse.Namespace) -> dict[str, Callable[[], Any]]:
    """One factory per kind; each returns a fresh epoch iterator."""
    fanouts = [int(f) for f in args.fanouts.split(",")]
    gen = torch.Generator().manual_seed(args.seed)
    span = args.batch_size * (args.batches + args.warmup)
    seeds = torch.randperm(graph.num_nodes, generator=gen)[:span]
    pos = torch.randint(int(graph.indptr[-1]), (span,), generator=gen)
    dst = torch.from_numpy(np.searchsorted(graph.indptr, pos.numpy(), side="right") - 1)
    links = torch.stack([torch.from_numpy(graph.indices[pos.numpy()].astype(np.int64)), dst])
    common = {"batch_size": args.batch_size, "seed": args.seed}
    loaders: dict[str, Any] = {
        "node": NeighborLoader(graph, fanouts, input_nodes=seeds, **common),
        "link": LinkNeighborLoader(graph, fanouts, edge_label_index=links, **common),
        "link_neg": LinkNeighborLoader(
            graph, fanouts, edge_label_index=links, neg_sampling_ratio=1.0, **common
        ),
    }
    return {kind: loader.__iter__ for kind, loader in loaders.items()}


def measure(kind: str, epoch: Callable[[], Iterator[Any]], args: argparse.Namespace) -> dict:
    """Time ``args.batches`` batches after ``args.warmup`` untimed ones."""
    batches = epoch()
    for _ in range(args.warmup):
        next(batches)
    edges = seeds = 0
    start = time.perf_counter()
    for _ in range(args.batches):
        batch = next(batches)
        edges += int(batch.edge_index.shape[1])
        seeds += int(batch.input_id.numel())
    seconds = time.perf_counter() - start
    return {
        "loader": kind,
        "batch_size": args.batch_size,
        "fanouts": args.fanouts,
        "batches": args.batches,
        "seconds": seconds,
        "batches_per_s": args.batches / seconds,
        "seeds_per_s": seeds / seconds,
        "sampled_edges_per_s": edges / seconds,
        "load_avg_1m": os.getloadavg()[0],
    }


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and best per kind, and link/node ratios (of the medians)."""
    out: dict[str, Any] = {"summary": True, "rounds": len(rows) // len(KINDS)}
    keys = ("batches_per_s", "seeds_per_s", "sampled_edges_per_s")
    for kind in KINDS:
        mine = [r for r in rows if r["loader"] == kind]
        for key in keys:
            out[f"{kind}_{key}_median"] = statistics.median(r[key] for r in mine)
            out[f"{kind}_{key}_best"] = max(r[key] for r in mine)
    for kind in KINDS[1:]:
        for key in keys:
            out[f"ratio_{kind}_over_node_{key}"] = (
                out[f"{kind}_{key}_median"] / out[f"node_{key}_median"]
            )
    out["load_avg_1m"] = [r["load_avg_1m"] for r in rows]
    return out


def main() -> None:
    """Parse arguments, alternate rounds, print JSON lines."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--graph", type=Path, default=Path("/tmp/gnnsys-synthetic-rmat.npz"))
    parser.add_argument("--fanouts", default="15,10")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    graph = load_graph(args.graph)
    factories = make_loaders(graph, args)
    rows = []
    for round_index in range(args.rounds):
        order = KINDS if round_index % 2 == 0 else KINDS[::-1]
        for kind in order:
            row = measure(kind, factories[kind], args) | {"round": round_index}
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(json.dumps(summarize(rows)), flush=True)


if __name__ == "__main__":
    main()
