"""``gnnsys partition DATASET --parts P --method NAME --out DIR``: split a graph and store it.

The library it calls: ``gnnsys.datasets.by_name.load_graph`` (a registry name or an ``.npz``
CSR file), ``gnnsys.options.parse_kv`` (``KEY=VALUE``) and ``gnnsys.partitioners.measure``
(``Measured``: wall time + peak RSS; ``GraphSource``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gnnsys.datasets.by_name import load_graph
from gnnsys.options import parse_kv
from gnnsys.partitioners.measure import GraphSource, Measured, stage_costs

logger = logging.getLogger(__name__)


def add_parser(sub: Any) -> None:
    """Register the ``partition`` verb."""
    from gnnsys.partitioners import PARTITIONERS

    p: argparse.ArgumentParser = sub.add_parser(
        "partition",
        help="split a graph into parts and write a partition directory",
        description="Assign every node to a part, then write DIR (manifest.json, node_to_part, "
        "one folder per part with its CSR, k-hop halo and features). Prints a summary table.",
    )
    add_dataset_args(p)
    p.add_argument("--parts", type=int, required=True, help="number of parts P")
    p.add_argument("--method", default="metis", choices=sorted(PARTITIONERS), help="strategy")
    p.add_argument("--out", required=True, help="partition directory to create")
    p.add_argument("--seed", type=int, default=0, help="seed of the partitioner (default 0)")
    p.add_argument(
        "--balance",
        help="metis only: comma list of quantities to balance, from nodes,train,edges",
    )
    p.add_argument("--hops", type=int, default=2, help="k of the k-hop halo (GNN layers)")
    p.add_argument(
        "-O",
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="partitioner option, e.g. -O passes=3 -O order=degree (see docs/partitioning.md)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace DIR if it exists")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.add_argument(
        "--memory-budget",
        metavar="SIZE",
        help="out of core (parquet:DIR datasets): build the graph on disk with Ray Data and "
        "partition it without any process holding it, using about SIZE bytes in all (e.g. 6G); "
        "see docs/out_of_core.md",
    )
    p.add_argument(
        "--work-dir",
        metavar="DIR",
        help="with --memory-budget: keep the on-disk graph in DIR and reuse it when its tables "
        "have not changed (default: a temporary directory beside --out, removed at the end)",
    )
    p.add_argument(
        "--address", help="with --memory-budget: Ray cluster to join (default: a private one)"
    )
    p.set_defaults(func=run)


def add_dataset_args(p: argparse.ArgumentParser) -> None:
    """``DATASET``, ``--root`` and ``-D KEY=VALUE`` (shared with ``bench partition``)."""
    p.add_argument(
        "dataset",
        help="dataset name (e.g. planetoid:cora, synthetic:rmat) or a .npz file holding a CSR "
        "(indptr, indices; optional x, y, train_mask, val_mask, test_mask)",
    )
    p.add_argument("--root", help="data directory laid out like shared/datasets")
    p.add_argument(
        "-D",
        "--dataset-param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="dataset option, e.g. -D num_nodes=2400000 for synthetic graphs",
    )


def partitioner_options(method: str, balance: str | None, options: list[str]) -> dict[str, Any]:
    """The ``Config`` keyword arguments for ``method`` from ``--balance`` and ``-O`` flags."""
    cfg = parse_kv(options)
    if balance:
        if method != "metis":
            raise ValueError(f"--balance applies to --method metis only, not {method!r}")
        cfg["balance"] = tuple(b.strip() for b in balance.split(",") if b.strip())
    return cfg


def _check_args(args: argparse.Namespace) -> None:
    """Refuse bad ``--parts``/``--hops``/``--seed`` and an unusable ``--out`` before any work."""
    from gnnsys.commands._preflight import check_out

    for flag, value, low in (("--parts", args.parts, 1), ("--hops", args.hops, 1)):
        if value is not None and value < low:
            raise ValueError(f"{flag} {value}: must be an integer >= {low}")
    if args.seed is not None and args.seed < 0:
        raise ValueError(f"--seed {args.seed}: must be an integer >= 0")
    out = Path(args.out)
    if out.exists() and not args.overwrite:
        raise ValueError(f"--out {out} already exists; choose another directory or --overwrite")
    check_out(out)


def run(args: argparse.Namespace) -> int:
    """Load, assign, write, and print the summary (one flow for both kinds of graph)."""
    from tqdm import tqdm

    _check_args(args)  # before the (possibly long) load
    kind = graph_kind(args)
    cfg = partitioner_options(args.method, args.balance, args.option)
    with kind.source(args) as source:
        graph, load_m, extra = source.graph, source.load, source.extra
        logger.info("loaded %s: %d nodes, %d edges", graph.name, *kind.size(graph))
        with Measured() as assign_m:
            assignment = kind.assign(graph, args, cfg)
        with (
            Measured() as write_m,
            tqdm(total=args.parts, desc="writing parts", unit="part") as bar,
        ):
            manifest = kind.write(graph, assignment, args, source, lambda _: bar.update(1))
        summary = {
            **kind.summary(args, graph, assignment, manifest),
            **stage_costs(load_m, assign_m, write_m),
            "files": len(manifest.files),
            "out": str(args.out),
        } | extra
        if extra and args.json:  # out of core: when each stage ran (the benchmark's samples)
            stages = zip(
                ("construction", "partition", "store"), (load_m, assign_m, write_m), strict=True
            )
            summary["stage_windows"] = {k: (m.started_at, m.ended_at) for k, m in stages}
    if args.json:
        print(json.dumps(summary))
    else:
        kind.print_parts(manifest)
        width = max(map(len, summary))
        for key, value in summary.items():
            print(f"{key:>{width}}: {value}")
    return 0


def graph_kind(args: argparse.Namespace) -> Any:
    """The steps of ``run`` for the dataset's kind, read from its files."""
    from gnnsys.commands import _partition_types
    from gnnsys.datasets import is_heterogeneous

    if is_heterogeneous(args.dataset, args.root):
        return _partition_types.PerTypeSteps()
    return GraphSteps()


@contextlib.contextmanager
def _graph_of(args: argparse.Namespace) -> Iterator[GraphSource]:
    """The graph to partition, loaded into memory, or built on disk out of core.

    With ``--memory-budget`` it is built on disk and memory-mapped
    (``gnnsys.commands._out_of_core``).
    """
    if getattr(args, "memory_budget", None):
        from gnnsys.commands._out_of_core import disk_graph

        with disk_graph(args) as found:
            yield found
        return
    with Measured() as load_m:
        graph = load_graph(args.dataset, args.root, parse_kv(args.dataset_param))
    yield GraphSource(graph, load_m)


def _summary(
    args: argparse.Namespace, graph: Any, assignment: Any, manifest: Any
) -> dict[str, Any]:
    """The summary fields of a partition of a ``Graph``."""
    from gnnsys.partitioners.metrics import balance, edge_cut, part_loads

    loads = part_loads(graph, assignment.part_N, args.parts)
    cut = edge_cut(graph, assignment.part_N)
    return {
        "dataset": graph.name,
        "method": args.method,
        "parts": args.parts,
        "num_nodes": graph.num_nodes,
        "num_edges": graph.num_edges,
        "edge_cut": cut,
        "edge_cut_fraction": round(cut / max(graph.num_edges, 1), 6),
        "node_balance": round(balance(loads["nodes"]), 4),
        "edge_balance": round(balance(loads["edges"]), 4),
        "train_balance": round(balance(loads["train"]), 4) if "train" in loads else None,
        "halo_factor": round(sum(p.num_halo for p in manifest.parts) / graph.num_nodes, 4),
    }


class GraphSteps:
    """``run``'s steps for a ``Graph`` (the typed ones: ``_partition_types.PerTypeSteps``)."""

    source = staticmethod(_graph_of)  # in memory, or built on disk out of core
    summary = staticmethod(_summary)  # cut and balance

    @staticmethod
    def size(graph: Any) -> tuple[int, int]:
        """Nodes and edges."""
        return graph.num_nodes, graph.num_edges

    @staticmethod
    def assign(graph: Any, args: argparse.Namespace, cfg: dict[str, Any]) -> Any:
        """The ``Assignment`` of ``--method``."""
        from gnnsys.partitioners import make_partitioner

        return make_partitioner(args.method, **cfg).assign(graph, args.parts, seed=args.seed)

    @staticmethod
    def write(
        graph: Any, assignment: Any, args: argparse.Namespace, source: GraphSource, progress: Any
    ) -> Any:
        """Write the store; its manifest."""
        from gnnsys.store import read_manifest, write_partitions

        write_partitions(
            graph,
            assignment,
            args.out,
            num_hops=args.hops,
            overwrite=args.overwrite,
            progress=progress,
            parts_writer=source.parts_writer,
        )
        return read_manifest(args.out)

    @staticmethod
    def print_parts(manifest: Any) -> None:
        """Per-part sizes."""
        print(f"{'part':>6} {'owned':>12} {'in-edges':>14} {'halo':>12}")
        for p, entry in enumerate(manifest.parts):
            print(f"{p:>6} {entry.num_owned:>12,} {entry.num_edges:>14,} {entry.num_halo:>12,}")
