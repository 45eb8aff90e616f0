"""``gnnsys datasets`` and ``gnnsys info DATASET``."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any


def add_parser(sub: Any) -> None:
    """Register ``datasets`` (list names) and ``info`` (load one and print its sizes)."""
    listing = sub.add_parser("datasets", help="list the dataset names gnnsys can load")
    listing.set_defaults(func=run_list)
    info = sub.add_parser(
        "info",
        help="load a dataset and print its sizes",
        description="Load DATASET and print nodes, edges (directed, as PyG counts them), "
        "features, classes, split sizes and memory footprint.",
    )
    info.add_argument("dataset", help="dataset name, e.g. synthetic:sbm or planetoid:cora")
    info.add_argument(
        "--root",
        help="data directory laid out like shared/datasets "
        "(default: $GNNSYS_DATA, then ../shared/datasets)",
    )
    info.add_argument("--json", action="store_true", help="print one JSON object")
    info.add_argument(
        "--param",
        "-p",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="loader parameter, repeatable, e.g. -p num_nodes=1000000 -p seed=1 "
        "(values parse as JSON when they can, else stay strings)",
    )
    info.set_defaults(func=run_info)


def run_list(args: argparse.Namespace) -> int:
    """Print every known dataset name with its description."""
    from gnnsys.datasets import KNOWN_NAMES

    width = max(map(len, KNOWN_NAMES))
    for name, description in KNOWN_NAMES.items():
        print(f"{name:<{width}}  {description}")
    print("ogb:<name>".ljust(width) + "  an OGB node-property dataset already on disk under --root")
    return 0


def graph_summary(graph: Any) -> dict[str, Any]:
    """The sizes ``gnnsys info --json`` prints for a loaded graph."""

    def count(mask: Any) -> int:
        return 0 if mask is None else int(mask.sum())

    return {
        "name": graph.name,
        "num_nodes": graph.num_nodes,
        "num_edges": graph.num_edges,
        "num_features": graph.num_features,
        "num_classes": graph.num_classes,
        "num_train": count(graph.train_mask),
        "num_val": count(graph.val_mask),
        "num_test": count(graph.test_mask),
        "bytes": graph.nbytes,
    }


def run_info(args: argparse.Namespace) -> int:
    """Load the dataset and print its summary."""
    from gnnsys.datasets import load
    from gnnsys.options import parse_kv

    start = time.perf_counter()
    try:
        graph = load(args.dataset, root=args.root, **parse_kv(args.param))
    except TypeError as err:  # an unknown --param: report it like any other bad value
        if "unexpected keyword argument" not in str(err):
            raise
        raise ValueError(f"{args.dataset} does not take that --param: {err}") from err
    summary = graph_summary(graph)
    summary["load_seconds"] = round(time.perf_counter() - start, 3)
    if args.json:
        print(json.dumps(summary))
    else:
        for key, value in summary.items():
            print(f"{key:>14}: {value}")
    return 0
