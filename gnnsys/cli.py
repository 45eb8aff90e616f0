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
import re
import sys
import traceback
from collections.abc import Sequence

import gnnsys.commands
from gnnsys.errors import (
    DiskError,
    GnnsysError,
    ProcessDiedError,
    RemoteCallTimeoutError,
    WorkerFailedError,
)

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
    for verb in sub.choices.values():  # -v also after the verb: `gnnsys train ... -v`
        verb.add_argument(
            "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="log at DEBUG"
        )
    return parser


_INT_LIST = re.compile(r"^-\d+(,-?\d+)*$")


def _join_negative_lists(argv: Sequence[str]) -> list[str]:
    """``--fanouts -1,-1`` as ``--fanouts=-1,-1``: argparse reads ``-1,-1`` as an option.

    PyG users write ``-1`` for "all neighbours"; argparse only accepts a lone negative number
    as a value, so a comma list starting with one is joined to the flag before it.
    """
    out: list[str] = []
    for arg in argv:
        if out and out[-1].startswith("--") and "=" not in out[-1] and _INT_LIST.match(arg):
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gnnsys`` script and ``python -m gnnsys``; returns the exit code.

    Exit codes: 0 success, 1 a failed run (workers failed, a store failed ``verify``, a write
    failed on the file system: full disk, read-only, no permission, a vanished directory; a
    child process was killed) or an internal error, 2 a bad input (flag value, file, store,
    checkpoint), 130 Ctrl-C. A bad input or a disk error prints one line naming the value or
    path and the fix; ``-v`` adds the traceback.
    """
    parser = build_parser()
    args = parser.parse_args(_join_negative_lists(sys.argv[1:] if argv is None else argv))
    level = os.environ.get("GNNSYS_LOG", "DEBUG" if args.verbose else "INFO")
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.verb is None:
        parser.print_help()
        return 2
    try:
        return int(args.func(args))
    except _FAILED_RUN as err:  # a failed run, not bad input
        return _report(args, err, 1, "")
    except _BAD_INPUT as err:
        return _report(args, err, 2, "")
    except KeyboardInterrupt:
        print("gnnsys: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 -- the process boundary: one line, not a traceback
        return _report(args, err, 1, "internal error, please report it; ")


_FAILED_RUN: tuple[type[BaseException], ...] = (
    WorkerFailedError,
    RemoteCallTimeoutError,
    DiskError,
    ProcessDiedError,
)
"""Errors of a run that failed on its way (the inputs were fine): exit code 1, one line."""

_BAD_INPUT: tuple[type[BaseException], ...] = (GnnsysError, ValueError, TypeError, OSError)
"""Errors that mean a bad input: a flag value, a missing, unreadable or corrupt file."""


def _report(args: argparse.Namespace, err: BaseException, code: int, prefix: str) -> int:
    """Print ``err`` as one line (with the traceback under ``-v``) and return ``code``."""
    if args.verbose:
        traceback.print_exception(err)
    text = str(err) if isinstance(err, GnnsysError | ValueError) else f"{type(err).__name__}: {err}"
    hint = "" if args.verbose else " (-v shows the traceback)" if prefix else ""
    print(f"gnnsys {args.verb}: error: {prefix}{text}{hint}", file=sys.stderr)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
