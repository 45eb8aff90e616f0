"""``gnnsys bench partition DATASET``: compare strategies on the numbers that decide training.

For every ``parts x method`` it records cut, balance, halo, communication volume, wall time
and peak RSS of the partitioner, and the **simulated remote-feature fetches per epoch**: each
part batches its own train seeds (``--batch-size``), samples them with gnnsys's
``NeighborSampler`` (``--fanouts``), and counts the sampled input nodes another part owns,
summed over batches and parts. Without the sampler it falls back to the k-hop halo of the train
seeds, an upper bound on distinct remote nodes, and says so in ``remote_fetches_source``.

Writes ``DIR/results.jsonl`` (one object per row), ``DIR/results.md`` and PNG plots.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from gnnsys.commands.partition import add_dataset_args
from gnnsys.datasets.by_name import load_graph
from gnnsys.options import parse_kv
from gnnsys.partitioners.measure import Measured
from gnnsys.sampler.remote_fetches import simulate_remote_fetches

logger = logging.getLogger(__name__)

DEFAULT_METHODS = "random,hash,range,metis,ldg,fennel"
PLOTS = {
    "edge_cut_fraction": "cut.png",
    "halo_factor": "halo.png",
    "seconds": "time.png",
    "remote_fetches_per_epoch": "remote.png",
}


def add_parser(kinds: Any) -> None:
    """Register ``bench partition``."""
    p: argparse.ArgumentParser = kinds.add_parser(
        "partition",
        help="compare partitioning strategies (cut, balance, halo, remote fetches, time, RSS)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_dataset_args(p)
    p.add_argument("--parts", default="2,4,8,16", help="comma list of P (default 2,4,8,16)")
    p.add_argument(
        "--methods",
        help=f"default {DEFAULT_METHODS} (heterogeneous datasets: random,hash,metis,ldg,fennel)",
    )
    p.add_argument("--fanouts", default="15,10,5", help="sampler fanouts, seed hop first")
    p.add_argument("--batch-size", type=int, default=1024, help="seeds per batch")
    p.add_argument("--seed", type=int, default=0, help="seed of partitioners and sampler")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument(
        "--no-sample",
        action="store_true",
        help="skip the sampled remote-fetch simulation (report the k-hop halo upper bound)",
    )
    p.set_defaults(func=run)


def fanouts_of(args: argparse.Namespace) -> tuple[int, ...]:
    """``--fanouts`` as a tuple (every relation's, for a typed graph)."""
    return tuple(int(f) for f in args.fanouts.split(","))


def available(methods: list[str]) -> list[str]:
    """Drop optional methods whose package is missing (with a warning naming the extra)."""
    from gnnsys.partitioners import PARTITIONERS, external

    missing = {"kahip": not external.HAS_KAHIP, "mtkahypar": not external.HAS_MTKAHYPAR}
    for method in methods:
        if method not in PARTITIONERS:
            raise ValueError(f"unknown method {method!r}; choose from {sorted(PARTITIONERS)}")
    for method in [m for m in methods if missing.get(m)]:
        logger.warning("skipping %s: pip install 'gnnsys[bench]' to enable it", method)
    return [m for m in methods if not missing.get(m)]


def warm_up(methods: list[str]) -> None:
    """Run each method once on a 4-node path so imports (pymetis, scipy) are not timed."""
    from gnnsys.partitioners import make_partitioner
    from gnnsys.types import Graph

    path = Graph.from_edge_index(np.array([[0, 1, 2], [1, 2, 3]]), 4, symmetric=True)
    for method in methods:
        make_partitioner(method).assign(path, 2)


def run(args: argparse.Namespace) -> int:
    """Run every row, then write the JSONL, the markdown table and the plots."""
    from gnnsys.commands import _partition_types
    from gnnsys.datasets import is_heterogeneous

    # the kind, read from the files:
    bench = (
        _partition_types.PerTypeBench()
        if is_heterogeneous(args.dataset, args.root)
        else GraphBench()
    )
    parts = [int(p) for p in args.parts.split(",")]
    names = (args.methods or bench.default_methods).split(",")
    methods = bench.methods([m.strip() for m in names if m.strip()])
    graph = bench.load(args)
    warm_up(methods)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    with open(out / "results.jsonl", "w") as jsonl:
        for num_parts in parts:
            for method in methods:
                row = bench.row(graph, method, num_parts, args)
                rows.append(row)
                jsonl.write(json.dumps(row) + "\n")
                jsonl.flush()
                print(json.dumps(row))
    (out / "results.md").write_text(bench.markdown(rows))
    bench.plots(rows, out)
    return 0


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """The rows as a markdown table (one line per method x parts)."""
    cols = [
        ("parts", "P"),
        ("method", "method"),
        ("edge_cut_fraction", "cut"),
        ("node_balance", "node bal"),
        ("edge_balance", "edge bal"),
        ("train_balance", "train bal"),
        ("halo_factor", "halo factor"),
        ("comm_volume", "comm vol"),
        ("remote_fetches_per_epoch", "remote fetches/epoch"),
        ("seconds", "seconds"),
        ("peak_rss_bytes", "peak RSS MiB"),
    ]
    lines = ["| " + " | ".join(h for _, h in cols) + " |", "|" + "---|" * len(cols)]
    for row in rows:
        cells = []
        for key, _ in cols:
            value = row[key]
            if key == "peak_rss_bytes":
                value = f"{value / 2**20:.0f}"
            cells.append(str(value))
        lines.append("| " + " | ".join(cells) + " |")
    source = rows[0]["remote_fetches_source"] if rows else ""
    return "\n".join(lines) + f"\n\nremote fetches: {source}\n"


def write_plots(rows: list[dict[str, Any]], out: Path) -> None:
    """One PNG per metric against parts, one line per method (skipped without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.warning("matplotlib missing: no plots (pip install 'gnnsys[bench]')")
        return
    methods = sorted({r["method"] for r in rows})
    for key, name in PLOTS.items():
        fig, ax = plt.subplots(figsize=(5, 3.5))
        for method in methods:
            pts = sorted((r["parts"], r[key]) for r in rows if r["method"] == method)
            ax.plot([p for p, _ in pts], [v for _, v in pts], marker="o", label=method)
        ax.set_xlabel("parts")
        ax.set_ylabel(key)
        ax.set_xscale("log", base=2)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / name, dpi=100)
        plt.close(fig)


class GraphBench:
    """``run``'s steps for a ``Graph`` (the typed ones: ``_partition_types.PerTypeBench``)."""

    default_methods = DEFAULT_METHODS
    methods = staticmethod(available)
    markdown = staticmethod(markdown_table)
    plots = staticmethod(write_plots)

    @staticmethod
    def load(args: argparse.Namespace) -> Any:
        """The graph (a registry name or an ``.npz`` CSR)."""
        return load_graph(args.dataset, args.root, parse_kv(args.dataset_param))

    def row(
        self, graph: Any, method: str, num_parts: int, args: argparse.Namespace
    ) -> dict[str, Any]:
        """Assign, measure and score one ``(method, parts)`` row."""
        from gnnsys.partitioners import compute_metrics, make_partitioner
        from gnnsys.sampler import CSRNeighborSource, NeighborSampler
        from gnnsys.types import ONE_TYPE

        fanouts = fanouts_of(args)
        with Measured() as m:
            assignment = make_partitioner(method).assign(graph, num_parts, seed=args.seed)
        metrics = compute_metrics(graph, assignment, num_hops=len(fanouts))
        row: dict[str, Any] = {
            "dataset": graph.name,
            "method": method,
            "parts": num_parts,
            "edge_cut": metrics.edge_cut,
            "edge_cut_fraction": round(metrics.edge_cut_fraction, 6),
            "node_balance": round(metrics.node_balance, 4),
            "edge_balance": round(metrics.edge_balance, 4),
            "train_balance": None
            if metrics.train_balance is None
            else round(metrics.train_balance, 4),
            "comm_volume": metrics.comm_volume,
            "halo_factor": round(metrics.halo_factor, 4),
            "remote_fetch_upper_bound": metrics.remote_fetch_upper_bound,
            "seconds": round(m.seconds, 4),
            "peak_rss_bytes": m.peak_rss_bytes,
            "fanouts": list(fanouts),
            "batch_size": args.batch_size,
        }
        if args.no_sample:
            row["remote_fetches_per_epoch"] = metrics.remote_fetch_upper_bound
            row["remote_fetches_source"] = "khop_halo_upper_bound"
            return row
        config = NeighborSampler.Config(fanouts=fanouts)
        sampler = NeighborSampler(config, source=CSRNeighborSource.from_graph(graph))
        train = np.ones(graph.num_nodes, bool) if graph.train_mask is None else graph.train_mask
        row["remote_fetches_per_epoch"] = simulate_remote_fetches(
            sampler.engine,
            {ONE_TYPE: assignment.part_N},
            {ONE_TYPE: train},
            num_parts,
            args.batch_size,
            args.seed,
        )[ONE_TYPE]
        row["remote_fetches_source"] = "simulated_sampling"
        return row
