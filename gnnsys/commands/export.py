"""``gnnsys export DATASET --format parquet --out DIR``: write a dataset as Parquet tables.

The directory has the layout ``parquet:DIR`` reads (``gnnsys.datasets.parquet``), so
``gnnsys info parquet:DIR`` or ``gnnsys partition parquet:DIR ...`` take it back. ``synthetic:rmat``
is drawn and written chunk by chunk (``write_rmat_parquet``): the graph is never held, so 2**24
nodes fit in a small process, and loading the directory gives exactly the graph
``load("synthetic:rmat", ...)`` gives for the same ``-D`` options. Any other dataset is loaded,
then written (``write_parquet``).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

FORMATS = ("parquet",)


def add_parser(sub: Any) -> None:
    """Register the ``export`` verb."""
    from gnnsys.commands.partition import add_dataset_args

    p: argparse.ArgumentParser = sub.add_parser(
        "export",
        help="write a dataset as a Parquet graph directory (parquet:DIR)",
        description="Write DATASET to DIR as Parquet tables: edges/*.parquet (src, dst), "
        "nodes/*.parquet (id, x, y, split) and gnnsys.json; load it back as parquet:DIR. "
        "synthetic:rmat is written chunk by chunk without building the graph in memory.",
    )
    add_dataset_args(p)
    p.add_argument("--format", default="parquet", choices=FORMATS, help="output format")
    p.add_argument("--out", required=True, help="directory to create")
    p.add_argument("--num-nodes", type=int, help="nodes of a synthetic dataset (= -D num_nodes=)")
    p.add_argument(
        "--rows-per-group",
        type=int,
        default=1 << 20,
        metavar="N",
        help="rows per Parquet row group (default 2**20; node groups stay under 64 MiB)",
    )
    p.add_argument("--rows-per-file", type=int, default=1 << 24, metavar="N", help="rows per file")
    p.add_argument(
        "--overwrite", action="store_true", help="replace DIR (a Parquet graph) if it exists"
    )
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.set_defaults(func=run)


def _check_args(args: argparse.Namespace) -> None:
    """Refuse bad sizes and an unusable ``--out`` before any (possibly long) work."""
    from gnnsys.commands._preflight import check_out

    for flag, value in (
        ("--rows-per-group", args.rows_per_group),
        ("--rows-per-file", args.rows_per_file),
        ("--num-nodes", args.num_nodes),
    ):
        if value is not None and value < 1:
            raise ValueError(f"{flag} {value}: must be an integer >= 1")
    out = Path(args.out)
    if out.exists() and not args.overwrite:
        raise ValueError(f"--out {out} already exists; choose another directory or --overwrite")
    check_out(out)


def _export(args: argparse.Namespace, progress: Callable[[int, int], None]) -> Path:
    from gnnsys.datasets.by_name import load_graph
    from gnnsys.options import parse_kv

    params = parse_kv(args.dataset_param)
    if args.num_nodes is not None:
        params["num_nodes"] = args.num_nodes
    sizes = {"rows_per_group": args.rows_per_group, "rows_per_file": args.rows_per_file}
    try:
        if args.dataset == "synthetic:rmat":
            from gnnsys.datasets.rmat import write_rmat_parquet

            return write_rmat_parquet(
                args.out, overwrite=args.overwrite, progress=progress, **sizes, **params
            )
        graph = load_graph(args.dataset, args.root, params)
    except TypeError as err:  # an unknown -D option: report it like any other bad value
        if "keyword argument" not in str(err):
            raise
        raise ValueError(f"{args.dataset} does not take that -D option: {err}") from err
    from gnnsys.datasets.parquet import write_parquet

    return write_parquet(graph, args.out, overwrite=args.overwrite, progress=progress, **sizes)


def run(args: argparse.Namespace) -> int:
    """Export, then print what was written."""
    from tqdm import tqdm

    from gnnsys.datasets.parquet import open_parquet

    _check_args(args)
    start = time.perf_counter()
    with tqdm(desc="export", unit_scale=True, disable=None) as bar:

        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        out = _export(args, progress)
    pg = open_parquet(out)
    files = [p for folder in ("edges", "nodes") for p in sorted((out / folder).glob("*.parquet"))]
    summary = {
        "dataset": args.dataset,
        "name": pg.name,
        "out": str(out),
        "num_nodes": pg.num_nodes,
        "edge_rows": pg.num_edge_rows,
        "num_features": pg.num_features,
        "files": len(files),
        "row_groups": len(pg.edge_groups) + len(pg.node_groups),
        "bytes": sum(p.stat().st_size for p in files),
        "seconds": round(time.perf_counter() - start, 3),
    }
    if args.json:
        print(json.dumps(summary))
    else:
        width = max(map(len, summary))
        for key, value in summary.items():
            print(f"{key:>{width}}: {value}")
    return 0
