"""``inference(model, store, out)``: a user's PyG model over every node, sharded by rank.

Every rank of the user's ``torch.distributed`` group computes the outputs of the nodes its part
owns and writes them as one Parquet part; rank 0 then publishes the directory with a manifest,
in the format of ``gnnsys predict`` / ``gnnsys embed`` (:mod:`gnnsys.outputs`), so
``gnnsys.outputs.open(out)`` reads it. Two methods:

* ``layerwise`` (exact, the default for a model with PyG's ``BasicGNN`` layer interface,
  ``num_layers`` and ``inference_per_layer``): layer ``l`` runs for every owned node, with *all*
  its in-neighbours, before layer ``l + 1`` starts, as ``BasicGNN.inference`` does in one
  process. Layer ``l - 1``'s rows of halo nodes come from their owner: each rank writes its
  owned rows of the layer into the staging directory, the ranks meet at a bounded barrier, and
  each reads the halo rows it needs from the owners' files (memory-mapped; one machine or a
  shared file system, as the loaders' owner reads). Layer 0 reads features through the
  loader's halo path (cache, codec). The 1-hop subgraphs are sampled once (fanout ``-1``
  draws nothing at random) and reused by every layer.
  On a typed store a ``to_hetero(BasicGNN)`` model runs the same way, every node type at each
  layer (:mod:`gnnsys.distributed.to_hetero`); featureless types take ``embeddings``.
* ``sampled`` (any model, e.g. your own ``MessagePassing`` stack):
  ``model(x, edge_index)`` (``model(x_dict, edge_index_dict)[type]`` on a typed store) on
  ``DistNeighborLoader`` batches of every owned node with ``num_neighbors``.

Nothing is half-written: the parts go to a staging directory beside ``out`` that becomes ``out``
only when every rank has written its part (``gnnsys.outputs.publish``); a failure removes it.
Every collective waits at most ``timeout_s``.

Shape legend: ``M`` nodes a rank owns, ``N`` sampled nodes of a batch, ``H`` layer width.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from gnnsys.distributed.layer_files import barrier, owner_rows, save_rows
from gnnsys.distributed.loader import DistNeighborLoader, _group
from gnnsys.distributed.metrics import DEFAULT_TIMEOUT_S
from gnnsys.distributed.pyg_format import pyg_format

__all__ = ["inference"]

METHODS = ("auto", "layerwise", "sampled")
LAYERS = ".layers"


def _num_layers(model: Any) -> int | None:
    """``num_layers`` (a ``to_hetero`` model keeps only ``convs``, one entry per layer)."""
    layers = getattr(model, "num_layers", None)
    if isinstance(layers, int):
        return layers
    convs = getattr(model, "convs", None)
    return len(convs) if isinstance(convs, torch.nn.ModuleList) else None


def _method(model: Any, method: str, num_neighbors: Any, form: Any, plan: Any = None) -> str:
    """The method to run, after the checks that name a bad setting and its fix."""
    if method not in METHODS:
        raise ValueError(f"method={method!r}; choose one of {METHODS}")
    layers = _num_layers(model)
    if num_neighbors is not None and isinstance(layers, int) and len(num_neighbors) != layers:
        raise ValueError(
            f"the model has {layers} layers but num_neighbors={list(num_neighbors)} has "
            f"{len(num_neighbors)} hops; pass one fanout per layer ({layers}), or None for "
            "exact layer-wise inference"
        )
    exact = form.exact(model, plan)
    if method == "auto":
        method = "layerwise" if exact else "sampled"
    if method == "layerwise":
        if not exact:
            raise TypeError(form.not_layerwise(model))
    elif num_neighbors is None:
        raise ValueError(
            f"method='sampled' needs num_neighbors (one fanout per layer, -1: all) for "
            f"{type(model).__name__}"
        )
    return method


@torch.no_grad()
def inference(
    model: torch.nn.Module,
    store: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    kind: str = "predict",
    method: str = "auto",
    num_neighbors: list[int] | None = None,
    input_type: str | None = None,
    batch_size: int = 1024,
    codec: Any = "fp32",
    timeout_s: float = DEFAULT_TIMEOUT_S,
    overwrite: bool = False,
    embeddings: dict[str, Any] | None = None,
) -> Path:
    """Write ``model``'s output for every node of ``store`` to ``out``; every rank calls it.

    Args:
        model: The trained model (the same weights on every rank; it is put in eval mode).
        store: The partition store, one part per rank.
        out: The outputs directory (``gnnsys.outputs.open`` reads it).
        kind: ``predict`` (outputs are logits: ``pred`` and ``probs`` columns) or ``embed``
            (the outputs as an ``embedding`` column).
        method: ``auto`` (``layerwise`` for a ``BasicGNN`` on a homogeneous store or a
            ``to_hetero(BasicGNN)`` on a typed one, else ``sampled``), ``layerwise`` or
            ``sampled`` (module docstring).
        num_neighbors: Fanouts of ``sampled`` inference, one per layer.
        input_type: Typed stores: the node type whose outputs are written.
        batch_size: Nodes per batch.
        codec: How layer-0 halo rows travel (the model receives float32 rows).
        timeout_s: Seconds any collective waits before it raises.
        overwrite: Replace a non-empty ``out``.
        embeddings: Typed stores: a featureless type's layer-0 rows, ``{type: nn.Embedding |
            [N_t, F] tensor}`` indexed by type-local id (as PyG's MAG examples train them).

    Returns:
        ``out``, published.

    Raises:
        ValueError: ``out`` is not empty (without ``overwrite``), the model's layer count
            differs from ``num_neighbors``, a bad ``kind`` or ``method``.
        TypeError: ``method='layerwise'`` on a model without the layer interface.
        TimeoutError: A rank did not reach a barrier within ``timeout_s``.
    """
    from gnnsys.outputs import KINDS
    from gnnsys.store.info import store_info

    rank, world = _group("inference")
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r}; choose one of {KINDS}")
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise ValueError(f"{out} exists and is not empty; pass overwrite=True or another out")
    info = store_info(Path(store))
    form = pyg_format(info)  # PyG's batch kind of the store
    plan = form.plan(model, info)
    method = _method(model, method, num_neighbors, form, plan)
    staging = _staging(out, rank, overwrite, timeout_s)
    model.eval()
    try:
        fanouts = [-1] if method == "layerwise" else list(num_neighbors or [])
        loader = _all_owned(store, info, fanouts, input_type, batch_size, codec, timeout_s)
        if method == "layerwise" and plan is not None:
            rows = _typed_layerwise(model, plan, loader, staging / LAYERS, embeddings, codec)
        elif method == "layerwise":
            rows = _layerwise(model, loader, staging / LAYERS, timeout_s)
        else:
            rows = _sampled(model, loader, embeddings or {})
        _write(kind, loader, rows, staging, model, timeout_s)
        if rank == 0:
            _publish(out, staging, kind, world, loader, method, model, store)
        barrier("the published directory", timeout_s)
    except BaseException:
        if rank == 0:
            shutil.rmtree(staging, ignore_errors=True)
        raise
    return out


def _staging(out: Path, rank: int, overwrite: bool, timeout_s: float) -> Path:
    """The staging directory beside ``out`` (rank 0 makes it; every rank waits for it)."""
    staging = out.with_name(f".{out.name}.partial")
    if rank == 0:
        from gnnsys.outputs import staging_dir

        staging_dir(out, overwrite=overwrite)
        (staging / LAYERS).mkdir()
    barrier("the staging directory", timeout_s)
    return staging


def _all_owned(
    store: Any, info: Any, fanouts: list[int], input_type: str | None, batch_size: int,
    codec: Any, timeout_s: float,
) -> DistNeighborLoader:  # fmt: skip
    """Batches of every node of the output type, each rank its own, in ascending id order."""
    form = pyg_format(info)
    t = form.output_type(input_type, info)
    if t is None or t not in info.named_types:
        raise ValueError(
            f"input_type={t!r}: name the node type of {store} to write, one of {info.named_types}"
        )
    mask = torch.ones(form.num_nodes(store, info, t), dtype=torch.bool)
    nodes = form.seeds(t, mask)
    return DistNeighborLoader(
        store, fanouts, input_nodes=nodes, batch_size=batch_size, codec=codec,
        timeout_s=timeout_s,
    )  # fmt: skip


def _typed_layerwise(
    model: Any, plan: Any, loader: DistNeighborLoader, layers: Path, embeddings: Any, codec: Any
) -> Tensor:  # fmt: skip
    """Exact outputs of a ``to_hetero`` model (``gnnsys.distributed.to_hetero``)."""
    from gnnsys.distributed.to_hetero import typed_layerwise

    def loader_of(t: str) -> DistNeighborLoader:
        if t == loader.input_type:
            return loader
        return _all_owned(
            loader.store, loader.info, [-1], t, loader.batch_size, codec, loader.timeout_s
        )

    return typed_layerwise(
        model, plan, loader_of, loader.input_type, layers, loader.timeout_s, embeddings
    )


def _sampled(model: Any, loader: DistNeighborLoader, embeddings: dict[str, Any]) -> Tensor:
    """``[M, H]`` outputs of the rank's nodes from sampled batches."""
    outs = []
    for batch in loader:
        y, size = loader.format.forward(model, batch, loader.input_type, embeddings)
        outs.append(y[:size].float())
    return torch.cat(outs)


def _layerwise(model: Any, loader: DistNeighborLoader, layers: Path, timeout_s: float) -> Tensor:
    """``[M, H]`` exact outputs, layer by layer; halo rows from their owners' layer files."""
    rank = loader.rank
    book = loader.books[loader.input_type]
    per_layer = _per_layer(model)
    subgraphs, outs = [], []
    for batch in loader:  # layer 0: the features through the loader's halo path
        subgraphs.append((batch.n_id, batch.edge_index, int(batch.batch_size)))
        outs.append(per_layer(0, batch.x, batch.edge_index, int(batch.batch_size)))
    h = torch.cat(outs)
    for layer in range(1, int(model.num_layers)):
        path = save_rows(layers / f"layer{layer - 1}-part{rank:05d}.npy", h)
        barrier(f"layer {layer - 1}'s rows", timeout_s)
        tables = [
            np.load(layers / f"layer{layer - 1}-part{p:05d}.npy", mmap_mode="r", allow_pickle=False)
            for p in range(loader.world_size)
        ]
        outs = []
        for n_id, edge_index, size in subgraphs:
            x = owner_rows(tables, book, n_id.numpy(), int(h.shape[1]))
            outs.append(per_layer(layer, x, edge_index, size))
        h = torch.cat(outs)
        barrier(f"layer {layer}", timeout_s)  # every rank has read layer - 1's files
        path.unlink()
    return h


def _per_layer(model: Any) -> Any:
    """``(layer, x, edge_index, batch_size) -> rows`` of one layer of ``model``.

    PyG's ``inference_per_layer``; with ``jk=cat|max|lstm`` (which it refuses) the runtime's
    layers that carry every layer's outputs to the last (``gnnsys.models.pyg_user``): the rows
    of layer ``i`` are ``[h_0 | ... | h_i]``, the last layer's ``lin(jk([h_0, ..., h_{L-1}]))``.
    """
    from gnnsys.models.pyg_user import JK_CARRY, _PygLayer

    if getattr(model, "jk_mode", None) not in JK_CARRY:
        return model.inference_per_layer
    layers = [_PygLayer(model, i).eval() for i in range(int(model.num_layers))]

    def run(layer: int, x: Tensor, edge_index: Tensor, size: int) -> Tensor:
        return layers[layer].apply_layer(x, edge_index, size)

    return run


def _write(
    kind: str, loader: DistNeighborLoader, rows: Tensor, staging: Path, model: Any,
    timeout_s: float,
) -> None:  # fmt: skip
    """This rank's part and its manifest entry (a JSON file rank 0 collects)."""
    from gnnsys.outputs import OutputRequest, OutputRows, write_part

    ids = loader.seed_gid.numpy()
    if int(rows.shape[0]) != ids.shape[0]:
        raise RuntimeError(
            f"rank {loader.rank}: {rows.shape[0]} output rows for {ids.shape[0]} nodes"
        )
    node_type = loader.format.node_type(loader.input_type)
    layers = int(_num_layers(model) or 0)
    request = OutputRequest(kind, layers, str(staging))
    part = write_part(request, loader.rank, [OutputRows(node_type, ids, rows.numpy())])
    entry = staging / f".part-{loader.rank:05d}.json"
    entry.write_text(json.dumps(asdict(part)))
    barrier("every part written", timeout_s)


def _publish(
    out: Path, staging: Path, kind: str, world: int, loader: DistNeighborLoader, method: str,
    model: Any, store: Any,
) -> None:  # fmt: skip
    from gnnsys.outputs import PartFile, publish

    parts = []
    for r in range(world):
        entry = staging / f".part-{r:05d}.json"
        parts.append(PartFile(**json.loads(entry.read_text())))
        entry.unlink()
    shutil.rmtree(staging / LAYERS, ignore_errors=True)
    layers = _num_layers(model)
    manifest = {
        "kind": kind,
        "layer": layers,
        "num_layers": layers,
        "parts": world,
        "node_types": loader.format.node_types(loader.input_type),
        "typed": loader.typed,
        "run": None,
        "store": str(Path(store).resolve()),
        "decoder": None,
        "model": type(model).__name__,
        "method": method,
    }
    publish(staging, out, manifest, parts)
