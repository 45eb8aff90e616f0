"""The ``gnnsys`` command line: one argparse verb per module in ``gnnsys/commands/``.

Each verb module defines ``add_parser(subparsers)``, which registers the verb and sets
``func(args) -> int`` as its handler. Verbs are discovered, so adding one touches no shared file.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import pkgutil
import sys
from collections.abc import Sequence

import gnnsys.commands

__all__ = ["build_parser", "main"]


def _version() -> str:
    from gnnsys import __version__

    return __version__


def build_parser() -> argparse.ArgumentParser:
    """The full parser with every discovered verb registered."""
    parser = argparse.ArgumentParser(
        prog="gnnsys",
        description="Distributed GNN training on Ray: partition a graph, train across workers "
        "with cached, compressed halo features, and benchmark partitioning strategies.",
    )
    parser.add_argument("--version", action="version", version=f"gnnsys {_version()}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    for info in sorted(pkgutil.iter_modules(gnnsys.commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_") or info.name.startswith("bench_"):
            continue
        module = importlib.import_module(f"gnnsys.commands.{info.name}")
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gnnsys`` script and ``python -m gnnsys``; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    level = os.environ.get("GNNSYS_LOG", "DEBUG" if args.verbose else "INFO")
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.verb is None:
        parser.print_help()
        return 2
    try:
        return int(args.func(args))
    except (ValueError, FileNotFoundError) as err:
        print(f"gnnsys {args.verb}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gnnsys: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
