"""A trained gnnsys model as PyG's own model: ``GraphSAGE``, ``GCN`` or ``GAT`` with its weights.

gnnsys's layers already use PyG's parameter names and arithmetic (``SAGELayer`` is
``SAGEConv``, ``GCNLayer`` is ``GCNConv``, ``GATLayer`` is ``GATConv``), so a gnnsys state dict
is a ``torch_geometric.nn.models`` state dict with ``layers.`` renamed ``convs.``:

=====================  =======================================  ==========================
gnnsys                 PyG model                                 what differs
=====================  =======================================  ==========================
``sage`` (SAGE)        ``GraphSAGE(F, H, L, C, dropout)``        nothing
``gcn`` (GCN)          ``GCN(F, H, L, C, dropout)``              see self loops below
``gat`` (GAT)          ``GAT(F, H, L, C, dropout, heads=K)``     the last conv has one head
=====================  =======================================  ==========================

``GAT``: gnnsys's last layer has one head, PyG's ``GAT`` gives its last conv ``K`` averaged
heads; the spec records ``last_conv = {"heads": 1, "concat": false}`` and :func:`build_pyg`
replaces that conv with ``GATConv(H, C, heads=1, concat=False)``. Self loops: gnnsys adds one
self loop per node, as PyG's ``GCNConv``/``GATConv`` do on a graph without self loops (PyG keeps
at most one, so on a graph that already has self loops the two differ; gnnsys's datasets have
none). ReLU between layers and dropout are PyG's defaults too. Inference on a whole graph then
gives the logits of gnnsys's exact evaluation (tested to 1e-5).

A typed run's ``RelationalSAGE`` (one ``SAGEConv`` per relation, summed per destination type) is
``to_hetero(GraphSAGE((-1, -1), H, L, C), metadata, aggr="sum")`` over the store's node and
edge types; the learned rows of its featureless types (held per rank in the checkpoint) are
assembled into one ``[N_t, D]`` table per type, which the user passes in ``x_dict``
(:attr:`PygExport.embeddings`). ``RelationalGAT`` and ``RGCN`` have no export (refused, named).

A link-prediction run exports its encoder this way (``out_channels`` is the embedding width)
and its decoder (``dot`` or ``mlp``, ``gnnsys.models.link``) beside it.

The export is two files: ``model.pt`` (``torch.save`` of the state dict: tensors only, read
back with ``weights_only=True``) and ``model.json`` (:data:`FORMAT` version, the PyG class and
its arguments, the decoder, the source run, and the xxh3-128 of ``model.pt``).
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import xxhash
from torch import Tensor, nn

from gnnsys.models.registry import REGISTRY

__all__ = [
    "FORMAT",
    "PYG_MODELS",
    "PygExport",
    "build_pyg",
    "encode_pyg",
    "load_pyg",
    "pyg_spec",
    "pyg_state",
    "typed_pyg_spec",
]

FORMAT = 1
"""Version of ``model.json``."""

PYG_MODELS = {n: k.pyg_class for n, k in REGISTRY.items() if k.pyg_class is not None}
"""gnnsys model name -> the ``torch_geometric.nn.models`` class it exports to."""

MODEL_FILE, SPEC_FILE = "model.pt", "model.json"


def _weight(state: Mapping[str, Tensor], layer: int, name: str) -> Tensor:
    """``layers.{layer}.{the weight that fixes its widths}`` of a gnnsys state dict."""
    key = {"sage": "lin_l.weight", "gcn": "lin.weight", "gat": "lin.weight"}[name]
    return state[f"layers.{layer}.{key}"]


def pyg_spec(name: str, state: Mapping[str, Tensor], *, dropout: float) -> dict[str, Any]:
    """The PyG class and constructor arguments of a gnnsys model's state dict.

    Args:
        name: gnnsys model name (``sage``, ``gcn``, ``gat``).
        state: The model's state dict (``layers.*``).
        dropout: The model's dropout (PyG's ``dropout``; no effect in ``eval()``).

    Raises:
        ValueError: A model PyG has no class for, or a state dict without ``layers.0``.
    """
    if name not in PYG_MODELS:
        raise ValueError(
            f"model {name!r} has no PyG model to export to; exportable: {sorted(PYG_MODELS)}"
        )
    num_layers = len({k.split(".")[1] for k in state if k.startswith("layers.")})
    if num_layers == 0:
        raise ValueError("the state dict has no layers.* entries; is it a gnnsys BlockModel's?")
    first, last = _weight(state, 0, name), _weight(state, num_layers - 1, name)
    kwargs: dict[str, Any] = {
        "in_channels": int(first.shape[1]),
        "hidden_channels": int(first.shape[0]) if num_layers > 1 else int(last.shape[0]),
        "num_layers": num_layers,
        "out_channels": int(state[f"layers.{num_layers - 1}.bias"].shape[0])
        if name == "gat"
        else int(last.shape[0]),
        "dropout": float(dropout),
    }
    spec: dict[str, Any] = {"format": FORMAT, "pyg_model": PYG_MODELS[name], "kwargs": kwargs}
    if name == "gat":
        kwargs["heads"] = int(state["layers.0.att_src"].shape[1]) if num_layers > 1 else 1
        spec["last_conv"] = {"heads": 1, "concat": False}
    return spec


def typed_pyg_spec(
    name: str,
    state: Mapping[str, Tensor],
    *,
    dropout: float,
    metadata: tuple[list[str], list[tuple[str, str, str]]],
) -> dict[str, Any]:
    """The spec of a typed ``RelationalSAGE``: ``to_hetero(GraphSAGE((-1, -1), ...), aggr="sum")``.

    ``RelationalSAGELayer`` is one ``SAGEConv`` per relation summed per destination type, which is
    what ``to_hetero`` makes of a ``GraphSAGE`` with ``aggr="sum"`` (:func:`pyg_state` renames
    the relation keys to ``to_hetero``'s).

    Args:
        name: The typed model (``NodeTypesConfig.model``).
        state: Its state dict (``layers.i.convs.<key>.*``).
        dropout: Its dropout.
        metadata: ``(node types, edge types)``, PyG's ``HeteroData.metadata()``.

    Raises:
        ValueError: ``gat`` or ``rgcn`` (no ``to_hetero`` equivalent here), or no layers.
    """
    if name != "sage":
        raise ValueError(
            f"heterogeneous model {name!r} has no to_hetero export; exportable: sage "
            "(RelationalSAGE = to_hetero(GraphSAGE, aggr='sum'))"
        )
    lin = sorted(k for k in state if k.startswith("layers.") and k.endswith(".lin_l.weight"))
    if not lin:
        raise ValueError("the state dict has no layers.*.lin_l.weight; is it a RelationalSAGE's?")
    num_layers = len({k.split(".")[1] for k in lin})
    first = state[next(k for k in lin if k.startswith("layers.0."))]
    last = state[next(k for k in lin if k.startswith(f"layers.{num_layers - 1}."))]
    kwargs: dict[str, Any] = {
        "in_channels": [-1, -1],  # lazy: each relation's (source, destination) widths
        "hidden_channels": int(first.shape[0]) if num_layers > 1 else int(last.shape[0]),
        "num_layers": num_layers,
        "out_channels": int(last.shape[0]),
        "dropout": float(dropout),
    }
    node_types, edge_types = metadata
    return {
        "format": FORMAT,
        "pyg_model": "GraphSAGE",
        "kwargs": kwargs,
        "to_hetero": {"metadata": [list(node_types), [list(et) for et in edge_types]]},
    }


def pyg_state(state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """A gnnsys model's state dict under PyG's names.

    ``layers.i.*`` -> ``convs.i.*``; typed ``layers.i.convs.<src___rel___dst>.*`` ->
    ``convs.i.src__rel__dst.*`` (``to_hetero``'s per-relation copies of conv ``i``).
    """
    out = {}
    for key, value in state.items():
        if not key.startswith("layers."):
            continue
        layer, _, rest = key.removeprefix("layers.").partition(".")
        if rest.startswith("convs.<"):  # <src___rel___dst>.lin_l.weight -> src__rel__dst.lin_l...
            relation, _, rest = rest.removeprefix("convs.<").partition(">")
            rest = relation.replace("___", "__") + rest
        out[f"convs.{layer}.{rest}"] = value.detach().cpu().contiguous()
    return out


def build_pyg(spec: Mapping[str, Any]) -> nn.Module:
    """An untrained PyG model as ``spec`` (``pyg_spec``) describes it.

    Raises:
        ValueError: A spec of another format version or an unknown PyG class.
    """
    import torch_geometric.nn.models as pyg_models
    from torch_geometric.nn import GATConv

    if spec.get("format") != FORMAT:
        raise ValueError(f"model.json format {spec.get('format')!r}; this gnnsys reads {FORMAT}")
    cls = spec.get("pyg_model")
    kwargs = dict(spec["kwargs"])
    if cls not in PYG_MODELS.values():  # a PyG --model run (gnnsys.models.pyg_user)
        from gnnsys.models.pyg_user import build_plain

        plain: nn.Module = build_plain(str(cls), kwargs)
        return plain
    typed = spec.get("to_hetero")
    if typed is not None:  # a typed run: one conv per relation, summed per destination type
        from torch_geometric.nn import to_hetero

        base = getattr(pyg_models, str(cls))(**{**kwargs, "in_channels": (-1, -1)})
        node_types, edge_types = typed["metadata"]
        metadata = (list(node_types), [tuple(et) for et in edge_types])
        out: nn.Module = to_hetero(base, metadata, aggr="sum")
        return out
    model: nn.Module = getattr(pyg_models, str(cls))(**kwargs)
    last = spec.get("last_conv")
    if last is not None:  # GAT: gnnsys's last layer has one head (module docstring)
        width = kwargs["hidden_channels"] if kwargs["num_layers"] > 1 else kwargs["in_channels"]
        conv = GATConv(width, kwargs["out_channels"], dropout=kwargs["dropout"], **last)
        model.convs[-1] = conv  # type: ignore[operator]
    return model


@dataclass(frozen=True)
class PygExport:
    """What :func:`load_pyg` returns.

    Attributes:
        model: The PyG model with the run's weights, in ``eval()`` mode.
        decoder: A link run's decoder (``gnnsys.models.link``), else ``None``.
        spec: ``model.json``.
        embeddings: A typed run's learned rows of its featureless node types (``[N_t, D]``,
            row = type-local id): their ``x_dict`` entries.
    """

    model: nn.Module
    decoder: nn.Module | None
    spec: dict[str, Any]
    embeddings: dict[str, Tensor]


def encode_pyg(spec: dict[str, Any], tensors: dict[str, Tensor]) -> dict[str, bytes]:
    """The bytes of ``model.pt`` and ``model.json`` (which records ``model.pt``'s checksum).

    The caller writes them, ``model.pt`` first, each atomically: ``model.json`` then always
    names a file that is already whole (``gnnsys export-model``).
    """
    buffer = io.BytesIO()
    torch.save(tensors, buffer)
    data = buffer.getvalue()
    spec = {**spec, "model_file": MODEL_FILE, "xxh3_128": xxhash.xxh3_128(data).hexdigest()}
    return {MODEL_FILE: data, SPEC_FILE: (json.dumps(spec, indent=2) + "\n").encode()}


def load_pyg(directory: str | os.PathLike[str]) -> PygExport:
    """The PyG model (and decoder) of an export directory (``gnnsys export-model``).

    Raises:
        ValueError: A missing file, a checksum mismatch, or a spec this gnnsys cannot read.
    """
    from gnnsys.models.link import build_decoder

    directory = Path(directory)
    spec_path = directory / SPEC_FILE
    if not spec_path.is_file():
        raise ValueError(f"{spec_path} is missing; export a run with gnnsys export-model")
    spec = json.loads(spec_path.read_text())
    data = (directory / spec.get("model_file", MODEL_FILE)).read_bytes()
    if xxhash.xxh3_128(data).hexdigest() != spec.get("xxh3_128"):
        raise ValueError(f"{directory / MODEL_FILE}: checksum mismatch (corrupt or replaced)")
    tensors = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    model = build_pyg(spec)
    prefixes = ("convs.", "norms.", "lin.", "jk.")  # norms, lin, jk: a PyG --model run's
    model.load_state_dict({k: v for k, v in tensors.items() if k.startswith(prefixes)})
    decoder = None
    if spec.get("decoder") is not None:
        decoder = build_decoder(spec["decoder"], int(spec["kwargs"]["out_channels"]))
        decoder.load_state_dict(
            {k.removeprefix("decoder."): v for k, v in tensors.items() if k.startswith("decoder.")}
        )
        decoder.eval()
    embeddings = {
        k.removeprefix("embedding."): v for k, v in tensors.items() if k.startswith("embedding.")
    }
    return PygExport(model=model.eval(), decoder=decoder, spec=spec, embeddings=embeddings)
