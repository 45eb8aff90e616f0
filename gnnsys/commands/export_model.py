"""``gnnsys export-model RUN_DIR --format pyg --out DIR``: a trained run as PyG's own model.

Reads the run's newest intact checkpoint (checksummed) and its identity, and writes
``DIR/model.pt`` + ``DIR/model.json`` (``gnnsys.models.pyg``). Load it with
``gnnsys.models.pyg.load_pyg(DIR).model``: a ``torch_geometric.nn.models.GraphSAGE``/``GCN``/
``GAT`` with the run's weights, or for a typed ``RelationalSAGE`` run ``to_hetero(GraphSAGE)``
over the store's node and edge types, with the learned rows of featureless types in
``load_pyg(DIR).embeddings``.
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
    from gnnsys.models.pyg import SPEC_FILE, encode_pyg, pyg_state
    from gnnsys.store.diskio import atomic_write

    ckpt, fields = _checkpoint(Path(args.run_dir))
    out = Path(args.out)
    if (out / SPEC_FILE).exists() and not args.overwrite:
        raise ValueError(f"{out / SPEC_FILE} exists; pass --overwrite or choose another --out")
    state = ckpt.model_state
    link = any(k.startswith("link.") for k in fields)  # a link run's identity has link.*
    if link:  # LinkModel: encoder.* + decoder.*
        state = {k.removeprefix("encoder."): v for k, v in state.items()}
    spec = _spec(Path(args.run_dir), fields, state)
    spec["decoder"] = fields.get("link.decoder") if link else None
    spec["run"] = {
        "run_dir": str(Path(args.run_dir).resolve()),
        "epoch": ckpt.epoch,
        "dataset": fields.get("run.dataset"),
        "model": spec.get("model", fields["model.name"]),
    }
    from gnnsys.models.pyg_user import is_user_model, user_model_state

    user = is_user_model(str(fields["model.name"]))
    tensors = user_model_state(state) if user else pyg_state(state)
    tensors |= {k: v for k, v in state.items() if k.startswith("decoder.")}
    tensors |= {f"embedding.{t}": rows for t, rows in _embeddings(ckpt.rng_by_rank).items()}
    for name, data in encode_pyg(spec, tensors).items():  # model.pt first (encode_pyg)
        atomic_write(out / name, data)
    kwargs = ", ".join(f"{k}={v}" for k, v in spec["kwargs"].items())
    wrap = "to_hetero(" if "to_hetero" in spec else ""
    print(
        f"{wrap}{spec['pyg_model']}({kwargs}){')' if wrap else ''} from epoch {ckpt.epoch} -> "
        f"{out}/model.pt, model.json"
    )
    return 0


def _spec(run_dir: Path, fields: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    """The PyG model of the run: a ``torch_geometric.nn.models`` class, or its ``to_hetero``.

    The graph's kind is a real parameter here: PyG's own API exports a typed model as
    ``to_hetero`` of a homogeneous one, over the store's node and edge types.
    """
    from gnnsys.config import RunConfig
    from gnnsys.models.pyg import pyg_spec, typed_pyg_spec
    from gnnsys.models.pyg_user import is_user_model

    dropout = float(fields["model.dropout"])
    typed_model = fields.get("node_types.model")
    if is_user_model(str(fields["model.name"])):
        return _user_spec(run_dir, RunConfig.from_run_dir(run_dir))
    if typed_model is None:
        return pyg_spec(fields["model.name"], state, dropout=dropout)
    from gnnsys.store import read_store_manifest

    config = RunConfig.from_run_dir(run_dir)
    store = Path(config.data.store) if config.data.store else run_dir / "store"
    manifest: Any = read_store_manifest(store)
    metadata = (
        [t.name for t in manifest.node_types],
        [tuple(r.edge_type) for r in manifest.relations],
    )
    spec = typed_pyg_spec(typed_model, state, dropout=dropout, metadata=metadata)
    spec["model"] = f"hetero {typed_model}"
    return spec


def _user_spec(run_dir: Path, config: Any) -> dict[str, Any]:
    """A PyG ``--model`` run: its class (or factory) and the arguments the ranks built it with."""
    from gnnsys.models.pyg import FORMAT
    from gnnsys.models.pyg_user import model_kwargs
    from gnnsys.store.info import store_info

    store = Path(config.data.store) if config.data.store else run_dir / "store"
    info = store_info(store)
    out = info.num_classes if config.link is None else config.model.hidden  # run.py's rule
    kwargs = {
        "in_channels": int(info.num_features), "hidden_channels": int(config.model.hidden),
        "num_layers": len(config.sampler.fanouts), "out_channels": int(out),
        "dropout": float(config.model.dropout), **model_kwargs(config.model.args),
    }  # fmt: skip
    return {"format": FORMAT, "pyg_model": config.model.name, "kwargs": kwargs}


def _embeddings(rng_by_rank: list[dict[str, Any]]) -> dict[str, Any]:
    """A typed run's learned rows per featureless type, assembled from every rank's share.

    Raises:
        ValueError: The ranks' ids do not cover ``0 .. N_t - 1`` exactly once.
    """
    from gnnsys.train.embedding import assembled

    return {t: rows["weight"] for t, (rows, _) in assembled(rng_by_rank).items()}


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
    return ckpt, fields
