"""``gnnsys partition`` and ``gnnsys bench partition`` on heterogeneous datasets.

``partition.run`` and ``bench_partition.run`` hand a heterogeneous dataset (``synthetic:mag``, or
any ``ogb:`` folder in OGB's heterogeneous layout: ``datasets.is_heterogeneous``) to
``run_partition`` / ``run_bench`` here. Both assign every node type at once (``partition_hetero``);
the partition command writes a heterogeneous store (``gnnsys.store.hetero_layout``), the bench
reports per strategy its time, peak RSS, balance per node type, edge cut per relation, halo per
node type, the k-hop remote-fetch bound per type and, with the typed sampler, the **simulated
remote fetches per epoch per type** (each part's train seeds of the labelled type, batched and
sampled with ``HeteroNeighborSampler``, counting sampled nodes another part owns).
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from gnnsys.commands.partition import Measured, parse_kv, partitioner_options, stage_costs

logger = logging.getLogger(__name__)

DEFAULT_METHODS = "random,hash,metis,ldg,fennel"


def is_hetero(name: str, root: str | None = None) -> bool:
    """Whether dataset ``name`` is heterogeneous (decided from its files: ``is_heterogeneous``)."""
    from gnnsys.datasets import is_heterogeneous

    return is_heterogeneous(name, root)


def load(args: argparse.Namespace) -> Any:
    """``load_hetero(args.dataset, root=args.root, **-D params)``."""
    from gnnsys.datasets import load_hetero

    return load_hetero(args.dataset, root=args.root, **parse_kv(args.dataset_param))


def run_partition(args: argparse.Namespace) -> int:
    """Load, assign every type, write the heterogeneous store, print the summary."""
    from tqdm import tqdm

    from gnnsys.partitioners import compute_hetero_metrics, partition_hetero
    from gnnsys.store import write_hetero_partitions

    cfg = partitioner_options(args.method, args.balance, args.option)
    with Measured() as load_m:
        graph = load(args)
    logger.info("loaded %s: %d nodes, %d edges", graph.name, graph.num_nodes(), graph.num_edges)
    with Measured() as assign_m:
        assignment = partition_hetero(graph, args.method, args.parts, args.seed, **cfg)
    with Measured() as write_m, tqdm(total=args.parts, desc="writing parts", unit="part") as bar:
        manifest = write_hetero_partitions(
            graph,
            assignment,
            args.out,
            num_hops=args.hops,
            overwrite=args.overwrite,
            progress=lambda _: bar.update(1),
        )
    metrics = compute_hetero_metrics(graph, assignment, num_hops=args.hops)
    summary = {
        "dataset": graph.name,
        "method": args.method,
        "parts": args.parts,
        "num_nodes": graph.num_nodes(),
        "num_edges": graph.num_edges,
        "per_type_balance": assignment.params["per_type_balance"],
        **_type_columns(metrics),
        **_relation_columns(metrics),
        "edge_cut_fraction": round(metrics.edge_cut_fraction, 6),
        **stage_costs(load_m, assign_m, write_m),
        "files": len(manifest.files),
        "out": str(args.out),
    }
    if args.json:
        print(json.dumps(summary))
    else:
        _print_parts(manifest)
        width = max(map(len, summary))
        for key, value in summary.items():
            print(f"{key:>{width}}: {value}")
    return 0


def _type_columns(metrics: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for t, m in metrics.node_types.items():
        out[f"balance[{t}]"] = round(m.imbalance, 4)
        out[f"halo[{t}]"] = sum(m.halo_per_part)
    return out


def _relation_columns(metrics: Any) -> dict[str, Any]:
    return {f"cut[{k}]": round(c.edge_cut_fraction, 4) for k, c in metrics.relations.items()}


def _print_parts(manifest: Any) -> None:
    """One line per part and node type: owned and halo nodes."""
    print(f"{'part':>5} {'type':>16} {'owned':>12} {'halo':>12}")
    for p, entry in enumerate(manifest.parts):
        for t in entry.num_owned:
            print(f"{p:>5} {t:>16} {entry.num_owned[t]:>12,} {entry.num_halo[t]:>12,}")


def simulate_remote_fetches(
    graph: Any,
    part_N: np.ndarray,
    num_parts: int,
    fanouts: tuple[int, ...],
    batch_size: int,
    seed: int,
) -> dict[str, int]:
    """Remote sampled nodes per type, over one epoch of every part's train-seed batches.

    Seeds are the owned train nodes of every type with a train mask (``paper`` in ogbn-mag);
    every relation gets ``fanouts``.
    """
    import torch

    from gnnsys.sampler import batch_seed
    from gnnsys.sampler.hetero import HeteroNeighborSampler, csr_sources

    config = HeteroNeighborSampler.Config(fanouts={et: fanouts for et in graph.edge_types})
    sampler = HeteroNeighborSampler(config, sources=csr_sources(graph), node_types=graph.node_types)
    offsets = graph.node_offsets()
    rng = np.random.default_rng(seed)
    total = dict.fromkeys(graph.node_types, 0)
    for input_type, node_set in graph.nodes.items():
        if node_set.train_mask is None:
            continue
        owner = part_N[offsets[input_type] : offsets[input_type] + node_set.num_nodes]
        for part in range(num_parts):
            seeds = rng.permutation(np.flatnonzero((owner == part) & node_set.train_mask))
            for b, lo in enumerate(range(0, seeds.shape[0], batch_size)):
                batch = torch.from_numpy(seeds[lo : lo + batch_size].astype(np.int64))
                sub = sampler.sample(
                    batch, input_type=input_type, seed=batch_seed(seed, 0, part * 1_000_003 + b)
                )
                for t, n_id in sub.n_id.items():
                    gid = n_id.numpy().astype(np.int64) + offsets[t]
                    total[t] += int(np.count_nonzero(part_N[gid] != part))
    return total


def bench_one(
    graph: Any,
    homo: Any,
    directed: Any,
    method: str,
    num_parts: int,
    args: argparse.Namespace,
    fanouts: tuple[int, ...],
) -> dict[str, Any]:
    """Assign, measure and score one ``(method, parts)`` row."""
    from gnnsys.partitioners import compute_hetero_metrics, partition_hetero

    with Measured() as m:
        assignment = partition_hetero(graph, method, num_parts, args.seed, homogeneous=homo)
    metrics = compute_hetero_metrics(graph, assignment, len(fanouts), directed=directed)
    row: dict[str, Any] = {
        "dataset": graph.name,
        "num_nodes": graph.num_nodes(),
        "num_edges": graph.num_edges,
        "method": method,
        "parts": num_parts,
        "per_type_balance": assignment.params["per_type_balance"],
        "seconds": round(m.seconds, 4),
        "peak_rss_bytes": m.peak_rss_bytes,
        "edge_cut_fraction": round(metrics.edge_cut_fraction, 6),
        "node_types": {
            t: {
                "nodes_per_part": list(tm.nodes_per_part),
                "imbalance": round(tm.imbalance, 4),
                "halo_per_part": list(tm.halo_per_part),
                "halo_factor": round(tm.halo_factor, 4),
                "remote_fetch_upper_bound": tm.remote_fetch_upper_bound,
            }
            for t, tm in metrics.node_types.items()
        },
        "relations": {
            k: {
                "edge_cut": c.edge_cut,
                "edge_cut_fraction": round(c.edge_cut_fraction, 4),
                "comm_volume": c.comm_volume,
            }
            for k, c in metrics.relations.items()
        },
        "fanouts": list(fanouts),
        "batch_size": args.batch_size,
    }
    if args.no_sample:
        row["remote_fetches_source"] = "khop_halo_upper_bound"
        return row
    row["remote_fetches_per_epoch"] = simulate_remote_fetches(
        graph, assignment.part_N, num_parts, fanouts, args.batch_size, args.seed
    )
    row["remote_fetches_source"] = "simulated_sampling"
    return row


def run_bench(args: argparse.Namespace) -> int:
    """Every ``parts x method`` row on a heterogeneous dataset: JSONL, markdown table."""
    from gnnsys.partitioners import HETERO_METHODS, partition_graph

    parts = [int(p) for p in args.parts.split(",")]
    fanouts = tuple(int(f) for f in args.fanouts.split(","))
    methods = [m.strip() for m in (args.methods or DEFAULT_METHODS).split(",") if m.strip()]
    unknown = [m for m in methods if m not in HETERO_METHODS]
    if unknown:
        raise ValueError(
            f"methods {unknown} do not take heterogeneous graphs; choose from {HETERO_METHODS}"
        )
    graph = load(args)
    homo = partition_graph(graph)  # shared by every row; not timed (the store's input step)
    directed = graph.to_homogeneous()[0]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    with open(out / "results.jsonl", "w") as jsonl:
        for num_parts in parts:
            for method in methods:
                row = bench_one(graph, homo, directed, method, num_parts, args, fanouts)
                rows.append(row)
                jsonl.write(json.dumps(row) + "\n")
                jsonl.flush()
                print(json.dumps(row))
    (out / "results.md").write_text(markdown_table(rows))
    return 0


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """Two tables: per type (balance, halo, remote) and per relation (cut, comm volume)."""
    if not rows:
        return ""
    types, rels = list(rows[0]["node_types"]), list(rows[0]["relations"])
    head = ["P", "method", "s", "peak RSS MiB", "cut"]
    lines = [
        "| " + " | ".join(head + [f"bal {t}" for t in types] + [f"halo {t}" for t in types]) + " |",
        "|" + "---|" * (len(head) + 2 * len(types)),
    ]
    for r in rows:
        cells = [
            r["parts"],
            r["method"],
            r["seconds"],
            round(r["peak_rss_bytes"] / 2**20),
            r["edge_cut_fraction"],
        ]
        cells += [r["node_types"][t]["imbalance"] for t in types]
        cells += [sum(r["node_types"][t]["halo_per_part"]) for t in types]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    lines += [
        "",
        "| P | method | " + " | ".join(f"cut {k}" for k in rels) + " |",
        "|" + "---|" * (2 + len(rels)),
    ]
    for r in rows:
        cells = [r["parts"], r["method"], *(r["relations"][k]["edge_cut_fraction"] for k in rels)]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    if "remote_fetches_per_epoch" in rows[0]:
        lines += [
            "",
            "| P | method | " + " | ".join(f"remote {t}" for t in types) + " |",
            "|" + "---|" * (2 + len(types)),
        ]
        for r in rows:
            cells = [r["parts"], r["method"], *(r["remote_fetches_per_epoch"][t] for t in types)]
            lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"
