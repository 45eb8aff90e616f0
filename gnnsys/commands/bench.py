"""``gnnsys bench KIND ...``: benchmark verbs, one ``bench_<kind>.py`` module each."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
from typing import Any

import gnnsys.commands


def add_parser(sub: Any) -> None:
    """Register ``bench`` and every discovered ``bench_*`` sub-verb."""
    parser: argparse.ArgumentParser = sub.add_parser(
        "bench",
        help="benchmark partitioning strategies or communication settings",
        description="Benchmarks that write DIR/results.jsonl, DIR/results.md and plots.",
    )
    kinds = parser.add_subparsers(dest="bench_kind", metavar="KIND", required=True)
    for info in sorted(pkgutil.iter_modules(gnnsys.commands.__path__), key=lambda m: m.name):
        if info.name.startswith("bench_"):
            importlib.import_module(f"gnnsys.commands.{info.name}").add_parser(kinds)
