"""The typed steps of ``gnnsys partition`` and ``gnnsys bench partition``.

``partition.run`` and ``bench_partition.run`` are one flow for both kinds of graph; a
heterogeneous dataset (``synthetic:mag``, or any ``ogb:`` folder in OGB's heterogeneous
layout: ``datasets.is_heterogeneous``) gets these steps where the kind really differs: every
node type is assigned at once (``partition_hetero``), the store is the typed one
(``gnnsys.store.manifest``), and the figures are per node type (balance, halo, k-hop
remote-fetch bound, simulated remote fetches) and per relation (edge cut, communication volume).
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from typing import Any

from gnnsys.options import parse_kv
from gnnsys.partitioners.measure import GraphSource, Measured

__all__ = ["PerTypeBench", "PerTypeSteps"]


def load(args: argparse.Namespace) -> Any:
    """``load_hetero(args.dataset, root=args.root, **-D params)``."""
    from gnnsys.datasets import load_hetero

    return load_hetero(args.dataset, root=args.root, **parse_kv(args.dataset_param))


class PerTypeSteps:
    """``partition.run``'s steps for a ``HeteroGraph`` (see ``partition.GraphSteps``)."""

    @staticmethod
    @contextlib.contextmanager
    def source(args: argparse.Namespace) -> Iterator[GraphSource]:
        """The graph, loaded into memory (out-of-core builds take ``parquet:DIR`` only)."""
        if getattr(args, "memory_budget", None):
            raise ValueError(
                f"--memory-budget builds a parquet:DIR dataset on disk; {args.dataset} is "
                "heterogeneous and is partitioned in memory: drop --memory-budget"
            )
        with Measured() as load_m:
            graph = load(args)
        yield GraphSource(graph, load_m)

    @staticmethod
    def size(graph: Any) -> tuple[int, int]:
        """Nodes (all types) and edges (all relations)."""
        return graph.num_nodes(), graph.num_edges

    @staticmethod
    def assign(graph: Any, args: argparse.Namespace, cfg: dict[str, Any]) -> Any:
        """One ``Assignment`` over every type's global ids."""
        from gnnsys.partitioners import partition_hetero

        return partition_hetero(graph, args.method, args.parts, args.seed, **cfg)

    @staticmethod
    def write(
        graph: Any, assignment: Any, args: argparse.Namespace, source: GraphSource, progress: Any
    ) -> Any:
        """Write the typed store; its manifest."""
        from gnnsys.store import write_partitions

        return write_partitions(
            graph,
            assignment,
            args.out,
            num_hops=args.hops,
            overwrite=args.overwrite,
            progress=progress,
        )

    @staticmethod
    def summary(
        args: argparse.Namespace, graph: Any, assignment: Any, manifest: Any
    ) -> dict[str, Any]:
        """Balance and halo per type, cut per relation and in all."""
        from gnnsys.partitioners import compute_per_type_metrics

        metrics = compute_per_type_metrics(graph, assignment, num_hops=args.hops)
        return {
            "dataset": graph.name,
            "method": args.method,
            "parts": args.parts,
            "num_nodes": graph.num_nodes(),
            "num_edges": graph.num_edges,
            "per_type_balance": assignment.params["per_type_balance"],
            **{
                f"{key}[{t}]": value
                for t, m in metrics.node_types.items()
                for key, value in (
                    ("balance", round(m.imbalance, 4)),
                    ("halo", sum(m.halo_per_part)),
                )
            },
            **{f"cut[{k}]": round(c.edge_cut_fraction, 4) for k, c in metrics.relations.items()},
            "edge_cut_fraction": round(metrics.edge_cut_fraction, 6),
        }

    @staticmethod
    def print_parts(manifest: Any) -> None:
        """One line per part and node type: owned and halo nodes."""
        print(f"{'part':>5} {'type':>16} {'owned':>12} {'halo':>12}")
        for p, entry in enumerate(manifest.parts):
            for t in entry.num_owned:
                print(f"{p:>5} {t:>16} {entry.num_owned[t]:>12,} {entry.num_halo[t]:>12,}")


def _type_row(tm: Any) -> dict[str, Any]:
    return {
        "nodes_per_part": list(tm.nodes_per_part),
        "imbalance": round(tm.imbalance, 4),
        "halo_per_part": list(tm.halo_per_part),
        "halo_factor": round(tm.halo_factor, 4),
        "remote_fetch_upper_bound": tm.remote_fetch_upper_bound,
    }


def _simulate(
    graph: Any, part_N: Any, num_parts: int, fanouts: tuple[int, ...], args: argparse.Namespace
) -> dict[str, int]:
    """``simulate_remote_fetches`` with the typed sampler, every relation at ``fanouts``."""
    from gnnsys.sampler.neighbor import RelationalSampler, csr_sources
    from gnnsys.sampler.remote_fetches import simulate_remote_fetches

    config = RelationalSampler.Config(fanouts={et: fanouts for et in graph.edge_types})
    sampler = RelationalSampler(config, sources=csr_sources(graph), node_types=graph.node_types)
    offsets = graph.node_offsets()
    owner_of = {t: part_N[offsets[t] : offsets[t] + s.num_nodes] for t, s in graph.nodes.items()}
    train_of = {t: s.train_mask for t, s in graph.nodes.items()}
    return simulate_remote_fetches(
        sampler.engine, owner_of, train_of, num_parts, args.batch_size, args.seed
    )


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


class PerTypeBench:
    """``bench_partition.run``'s steps for a ``HeteroGraph`` (see ``bench_partition.GraphBench``).

    Each row reports its time, peak RSS, balance per node type, edge cut per relation, halo per
    node type, the k-hop remote-fetch bound per type and the **simulated remote fetches per
    epoch per type** (each part's train seeds of every type with a train mask, batched and
    sampled with ``RelationalSampler``, counting sampled nodes another part owns).
    """

    default_methods = "random,hash,metis,ldg,fennel"
    load = staticmethod(load)
    markdown = staticmethod(markdown_table)  # per type, per relation, remote fetches per type

    @staticmethod
    def plots(rows: list[dict[str, Any]], out: Any) -> None:
        """None: the figures are per type and relation (the markdown tables)."""

    def __init__(self) -> None:
        self._inputs: tuple[Any, Any, Any] | None = None

    @staticmethod
    def methods(names: list[str]) -> list[str]:
        """``names``, each a strategy that takes typed graphs.

        Raises:
            ValueError: A strategy that does not.
        """
        from gnnsys.partitioners import PER_TYPE_METHODS

        unknown = [m for m in names if m not in PER_TYPE_METHODS]
        if unknown:
            raise ValueError(
                f"methods {unknown} do not take heterogeneous graphs; choose from "
                f"{PER_TYPE_METHODS}"
            )
        return names

    def _graphs(self, graph: Any) -> tuple[Any, Any]:
        """The partitioner's input and the directed homogenised graph (made once, not timed)."""
        from gnnsys.partitioners import partition_graph

        if self._inputs is None or self._inputs[0] is not graph:
            self._inputs = (graph, partition_graph(graph), graph.to_homogeneous()[0])
        return self._inputs[1], self._inputs[2]

    def row(
        self, graph: Any, method: str, num_parts: int, args: argparse.Namespace
    ) -> dict[str, Any]:
        """Assign, measure and score one ``(method, parts)`` row."""
        from gnnsys.partitioners import compute_per_type_metrics, partition_hetero

        fanouts = tuple(int(f) for f in args.fanouts.split(","))  # every relation's
        homo, directed = self._graphs(graph)
        with Measured() as m:
            assignment = partition_hetero(graph, method, num_parts, args.seed, homogeneous=homo)
        metrics = compute_per_type_metrics(graph, assignment, len(fanouts), directed=directed)
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
            "node_types": {t: _type_row(tm) for t, tm in metrics.node_types.items()},
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
        row["remote_fetches_per_epoch"] = _simulate(
            graph, assignment.part_N, num_parts, fanouts, args
        )
        row["remote_fetches_source"] = "simulated_sampling"
        return row
