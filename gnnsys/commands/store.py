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
    """Verify ``args.dir`` (a store of either kind); returns the exit code."""
    from gnnsys.errors import PartitionStoreError
    from gnnsys.store import FORMAT_VERSION, verify

    try:
        manifest = verify(args.dir)
    except PartitionStoreError as err:
        print(f"gnnsys store verify: {err}", file=sys.stderr)
        return 1
    graph = f"{manifest.dataset}, {manifest.num_nodes:,} nodes"
    edges = f"{manifest.num_edges:,} edges"
    if manifest.kind == "typed":  # the types and relations are worth naming
        types = ", ".join(f"{t.name} {t.num_nodes:,}" for t in manifest.node_types)
        graph = f"heterogeneous {graph} ({types})"
        edges += f" in {len(manifest.relations)} relations"
    print(
        f"{args.dir}: OK ({len(manifest.files)} files checked): {graph}, {edges}, "
        f"{manifest.num_parts} parts ({manifest.strategy}, seed {manifest.seed}), "
        f"{manifest.num_hops}-hop halo, format {FORMAT_VERSION}"
    )
    for p, entry in enumerate(manifest.parts):
        owned = ", ".join(
            f"{t} {n:,} owned + {entry.num_halo[t]:,} halo" for t, n in entry.num_owned.items()
        )
        print(f"  part {p}: {owned}; {sum(entry.num_edges.values()):,} in-edges")
    return 0
