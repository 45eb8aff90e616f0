"""``gnnsys store verify DIR``: check a partition directory's manifest and every checksum."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def add_parser(sub: Any) -> None:
    """Register ``store`` with its ``verify`` action."""
    store: argparse.ArgumentParser = sub.add_parser(
        "store", help="inspect partition directories written by `gnnsys partition`"
    )
    actions = store.add_subparsers(dest="store_action", metavar="ACTION", required=True)
    verify = actions.add_parser(
        "verify",
        help="check every file's shape, dtype and sha256",
        description="Exit 0 and print a summary when DIR is intact; exit 1 and print the "
        "PartitionStoreError (which file, and the fix) otherwise.",
    )
    verify.add_argument("dir", help="partition directory")
    verify.set_defaults(func=run_verify)


def run_verify(args: argparse.Namespace) -> int:
    """Verify ``args.dir``; returns the exit code."""
    from gnnsys.errors import PartitionStoreError
    from gnnsys.store import is_hetero_store, verify

    if is_hetero_store(args.dir):
        return _verify_hetero(args)
    try:
        manifest = verify(args.dir)
    except PartitionStoreError as err:
        print(f"gnnsys store verify: {err}", file=sys.stderr)
        return 1
    print(
        f"{args.dir}: OK ({len(manifest.files)} files checked): {manifest.dataset}, "
        f"{manifest.num_nodes:,} nodes, {manifest.num_edges:,} edges, {manifest.num_parts} parts "
        f"({manifest.strategy}, seed {manifest.seed}), {manifest.num_hops}-hop halo, "
        f"format {manifest.format_version}"
    )
    for p, entry in enumerate(manifest.parts):
        print(
            f"  part {p}: {entry.num_owned:,} owned, {entry.num_edges:,} in-edges, "
            f"{entry.num_halo:,} halo"
        )
    return 0


def _verify_hetero(args: argparse.Namespace) -> int:
    """``run_verify`` for a heterogeneous store: per-type and per-relation summary."""
    from gnnsys.errors import PartitionStoreError
    from gnnsys.store import verify_hetero

    try:
        manifest = verify_hetero(args.dir)
    except PartitionStoreError as err:
        print(f"gnnsys store verify: {err}", file=sys.stderr)
        return 1
    types = ", ".join(f"{t.name} {t.num_nodes:,}" for t in manifest.node_types)
    print(
        f"{args.dir}: OK ({len(manifest.files)} files checked): heterogeneous {manifest.dataset}, "
        f"{manifest.num_nodes:,} nodes ({types}), {manifest.num_edges:,} edges in "
        f"{len(manifest.relations)} relations, {manifest.num_parts} parts ({manifest.strategy}, "
        f"seed {manifest.seed}), {manifest.num_hops}-hop halo"
    )
    for p, entry in enumerate(manifest.parts):
        owned = ", ".join(
            f"{t} {n:,}+{entry.num_halo[t]:,} halo" for t, n in entry.num_owned.items()
        )
        print(f"  part {p}: {owned}; {sum(entry.num_edges.values()):,} in-edges")
    return 0
