"""``gnnsys predict`` and ``gnnsys embed``: a trained run's outputs for every node, as Parquet.

Both run the sharded exact inference of the run's checkpoint on its workers
(``gnnsys.train.control.infer``) and write one Parquet part per rank plus a manifest
(``gnnsys.outputs``; read it back with ``gnnsys.outputs.open(DIR)``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

_EXAMPLES = """\
examples:
  gnnsys train planetoid:cora --parts 2 --out runs/cora
  gnnsys predict runs/cora --out runs/cora/pred
  gnnsys embed runs/cora --out runs/cora/emb --layer 1
  gnnsys embed runs/cora --out runs/cora/emb4 --store parts/cora4   # another partition
  python -c "import gnnsys.outputs as o; print(o.open('runs/cora/pred').read().to_pandas())"
"""

_HELP = {
    "predict": (
        "write every node's predicted class and class probabilities",
        "Load RUN_DIR's checkpoint and store, compute every node's logits with the sharded exact "
        "inference on the workers (no process holds the whole graph), and write DIR/part-*.parquet "
        "(id, [node_type], pred, probs) plus DIR/manifest.json.",
    ),
    "embed": (
        "write every node's embedding (a layer's outputs)",
        "Load RUN_DIR's checkpoint and store, compute layer L's outputs for every node with the "
        "sharded exact inference on the workers, and write DIR/part-*.parquet (id, [node_type], "
        "embedding) plus DIR/manifest.json.",
    ),
}


def add_parser(sub: Any) -> None:
    """Register ``predict`` and ``embed``."""
    for kind, (short, description) in _HELP.items():
        p: argparse.ArgumentParser = sub.add_parser(
            kind,
            help=short,
            description=description,
            epilog=_EXAMPLES,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.add_argument("run_dir", help="a gnnsys train run directory")
        p.add_argument("--out", required=True, help="outputs directory to create")
        if kind == "embed":
            p.add_argument(
                "--layer",
                type=int,
                help="the layer whose outputs are written, 1..L (default: the last hidden "
                "layer, L-1; the last layer for link runs and one-layer models)",
            )
            p.add_argument(
                "--node-types",
                help="heterogeneous runs: comma list of node types to write (default: all)",
            )
        p.add_argument(
            "--nodes",
            help="only these node ids: a .npy file of ints, or a text file with one id per line "
            "(heterogeneous runs: ids of the labelled type, or of the first --node-types)",
        )
        p.add_argument(
            "--store",
            help="run on this store, another partition of the run's graph (default: the run's)",
        )
        p.add_argument(
            "--executor",
            choices=("local", "ray"),
            default="local",
            help="local (default): ranks as threads of this process; ray: one actor per rank",
        )
        p.add_argument("--overwrite", action="store_true", help="replace a non-empty --out")
        p.set_defaults(func=run, kind=kind)


def read_nodes(path: str) -> np.ndarray:
    """Ids from a ``.npy`` file (no pickle) or a text file with one id per line.

    Raises:
        ValueError: The file is missing, not integers, or not one-dimensional.
    """
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"--nodes {path}: no such file")
    try:
        if file.suffix == ".npy":
            ids = np.load(file, allow_pickle=False)
        else:
            ids = np.loadtxt(file, dtype=np.int64, ndmin=1)
    except ValueError as err:
        raise ValueError(f"--nodes {path}: not a list of integer ids ({err})") from err
    if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(
            f"--nodes {path}: expected a 1-D array of integers, got {ids.dtype}{ids.shape}"
        )
    out: np.ndarray = ids.astype(np.int64)
    return out


def run(args: argparse.Namespace) -> int:
    """Write the outputs; prints the directory, rows and time."""
    from gnnsys.config import RunConfig
    from gnnsys.train.control.infer import infer

    types = getattr(args, "node_types", None)
    result = infer(
        args.run_dir,
        args.out,
        RunConfig.from_run_dir(args.run_dir),
        kind=args.kind,
        layer=getattr(args, "layer", None),
        store=args.store,
        node_types=tuple(t.strip() for t in types.split(",") if t.strip()) if types else None,
        nodes=read_nodes(args.nodes) if args.nodes else None,
        executor=args.executor,
        overwrite=args.overwrite,
    )
    m = result.manifest
    print(
        f"{args.kind}: {m['num_rows']:,} rows (layer {m['layer']} of {m['num_layers']}) in "
        f"{m['parts']} parts -> {result.out} ({result.seconds:.1f} s)",
        file=sys.stdout,
    )
    return 0
