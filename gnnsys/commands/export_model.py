"""``gnnsys export-model RUN_DIR --format pyg --out DIR``: a trained run as PyG's own model.

Reads the run's newest intact checkpoint (checksummed) and its identity, and writes
``DIR/model.pt`` + ``DIR/model.json`` (``gnnsys.models.pyg``). Load it with
``gnnsys.models.pyg.load_pyg(DIR).model``: a ``torch_geometric.nn.models.GraphSAGE``/``GCN``/
``GAT`` with the run's weights.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

FORMATS = ("pyg",)

_EXAMPLES = """\
examples:
  gnnsys train planetoid:cora --parts 2 --out runs/cora
  gnnsys export-model runs/cora --out runs/cora/pyg
  python -c "from gnnsys.models.pyg import load_pyg; print(load_pyg('runs/cora/pyg').model)"
"""


def add_parser(sub: Any) -> None:
    """Register ``export-model``."""
    p: argparse.ArgumentParser = sub.add_parser(
        "export-model",
        help="write a trained run's model as a PyG model (state_dict + JSON spec)",
        description="Write RUN_DIR's checkpointed model (its last trained epoch) as PyG's own "
        "GraphSAGE, GCN or GAT: DIR/model.pt (state_dict) and DIR/model.json (class, "
        "arguments, checksum). Load it with gnnsys.models.pyg.load_pyg(DIR).",
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("run_dir", help="a gnnsys train run directory (checkpoint.pt, run.json)")
    p.add_argument("--format", default="pyg", choices=FORMATS, help="pyg (default)")
    p.add_argument("--out", required=True, help="directory to write model.pt and model.json")
    p.add_argument("--overwrite", action="store_true", help="replace an existing export in --out")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Export; prints the PyG class and the files written."""
    from gnnsys.models.pyg import SPEC_FILE, encode_pyg, pyg_spec, pyg_state
    from gnnsys.store.diskio import atomic_write

    ckpt, fields = _checkpoint(Path(args.run_dir))
    out = Path(args.out)
    if (out / SPEC_FILE).exists() and not args.overwrite:
        raise ValueError(f"{out / SPEC_FILE} exists; pass --overwrite or choose another --out")
    state = ckpt.model_state
    link = fields["link"] is not None
    if link:  # LinkModel: encoder.* + decoder.*
        state = {k.removeprefix("encoder."): v for k, v in state.items()}
    spec = pyg_spec(fields["model.name"], state, dropout=float(fields["model.dropout"]))
    spec["decoder"] = fields.get("link.decoder") if link else None
    spec["run"] = {
        "run_dir": str(Path(args.run_dir).resolve()),
        "epoch": ckpt.epoch,
        "dataset": fields.get("run.dataset"),
        "model": fields["model.name"],
    }
    tensors = pyg_state(state)
    tensors |= {k: v for k, v in state.items() if k.startswith("decoder.")}
    for name, data in encode_pyg(spec, tensors).items():  # model.pt first (encode_pyg)
        atomic_write(out / name, data)
    kwargs = ", ".join(f"{k}={v}" for k, v in spec["kwargs"].items())
    print(f"{spec['pyg_model']}({kwargs}) from epoch {ckpt.epoch} -> {out}/model.pt, model.json")
    return 0


def _checkpoint(run_dir: Path) -> tuple[Any, dict[str, Any]]:
    """The run's checkpoint and its identity fields (JSON-decoded), checked."""
    from gnnsys.train.control.checkpoint import load_checkpoint, read_identity

    if not run_dir.is_dir():
        raise ValueError(f"run directory {run_dir} does not exist")
    ckpt = load_checkpoint(run_dir)
    if ckpt is None:
        raise ValueError(f"{run_dir} has no checkpoint.pt; train (or resume) the run first")
    identity = ckpt.identity or read_identity(run_dir)
    if identity is None:
        raise ValueError(f"{run_dir} has neither a checkpoint identity nor run.json")
    fields = {k: json.loads(v) for k, v in identity.as_dict().items()}
    if fields.get("hetero") is not None or any(k.startswith("hetero.") for k in fields):
        raise ValueError(
            f"{run_dir} is a heterogeneous run; export-model writes homogeneous PyG models "
            "(GraphSAGE, GCN, GAT) only so far"
        )
    fields["link"] = "link" if any(k.startswith("link.") for k in fields) else None
    return ckpt, fields
