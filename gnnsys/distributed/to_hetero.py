"""Exact layer-wise inference of a PyG ``to_hetero(BasicGNN)`` model over a typed store.

PyG's ``to_hetero`` turns layer ``i`` of a ``BasicGNN`` into one conv per relation
(``convs[i]['src__rel__dst']``), an aggregation of the relations that lead into each node type
(``to_hetero``'s ``aggr``: sum, mean, max, min or mul), and, on every layer but the last, the
type's own ``act[t]``, ``norms[i][t]`` and ``dropout[t]``. :func:`plan_of` reads that structure
from the model's FX graph (the node that aggregates type ``t`` at layer ``i`` is
``convs_{i}__{t}``; whether ``act`` runs before the norm is the norm's input), so the layers run
one at a time: layer ``i`` for every node of every type, with *all* its in-neighbours, before
layer ``i + 1`` starts, as ``BasicGNN.inference`` does for one type.

Each type's 1-hop subgraphs come from one ``DistNeighborLoader`` of every owned node of that type
(fanout ``-1``), sampled once and reused by every layer. Layer 0 reads features through the
loader's halo path; a featureless type's rows come from ``embeddings[t]`` (a ``[N_t, F]`` tensor
or the ``nn.Embedding`` the model was trained with, indexed by type-local id). Layer ``i - 1``'s
rows of halo nodes come from their owner's file in the staging directory, between bounded
barriers (:mod:`gnnsys.distributed.inference`).

Not here: ``jk`` modes and ``lin`` (``jk=None`` only), edge features and weights.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor, nn

from gnnsys.distributed.layer_files import barrier, owner_rows, save_rows
from gnnsys.types import EdgeType

__all__ = ["HeteroPlan", "plan_of", "typed_layerwise"]


AGGRS: dict[Any, str] = {
    torch.add: "sum", torch.div: "mean", torch.max: "max", torch.min: "min", torch.mul: "mul",
}  # fmt: skip
"""The FX targets ``to_hetero`` aggregates relations with, by its ``aggr`` name."""


@dataclass(frozen=True, slots=True)
class HeteroPlan:
    """The layers of a ``to_hetero(BasicGNN)`` model, read from its FX graph.

    Attributes:
        num_layers: ``L``.
        relations: Per layer, ``(edge type, conv key)`` of every relation it convolves.
        aggr: ``(layer, destination type)`` -> how its relations combine.
        act_first: ``(layer, type)`` -> the activation runs before the norm (hidden layers).
    """

    num_layers: int
    relations: list[list[tuple[EdgeType, str]]]
    aggr: dict[tuple[int, str], str]
    act_first: dict[tuple[int, str], bool]

    def types(self, layer: int) -> list[str]:
        """The node types layer ``layer`` gives rows (those a relation leads into)."""
        return sorted({et[2] for et, _ in self.relations[layer]})


def plan_of(model: Any, relations: list[EdgeType]) -> HeteroPlan | None:
    """The layer plan of a ``to_hetero(BasicGNN)`` model, or ``None`` for another model.

    Raises:
        ValueError: A ``to_hetero`` model this cannot run layer by layer (``jk``/``lin``, a
            relation the store lacks, an aggregation it does not know), naming the fix.
    """
    graph, convs = getattr(model, "graph", None), getattr(model, "convs", None)
    if graph is None or not isinstance(convs, nn.ModuleList) or not len(convs):
        return None
    if not all(isinstance(c, nn.ModuleDict) for c in convs):
        return None
    fix = "pass method='sampled' and num_neighbors"
    if hasattr(model, "jk") or hasattr(model, "lin"):
        raise ValueError(f"layer-wise inference of a to_hetero model takes jk=None; {fix}")
    nodes = {n.name: n for n in graph.nodes}
    known = {"__".join(et): et for et in relations}
    plan = HeteroPlan(len(convs), [], {}, {})
    for i, layer in enumerate(convs):
        keys = list(cast(nn.ModuleDict, layer))
        unknown = sorted(set(keys) - set(known))
        if unknown:
            raise ValueError(
                f"the model's layer {i} convolves {unknown}, not relations of the store "
                f"({sorted(known)}); train it on this store's metadata"
            )
        plan.relations.append([(known[k], k) for k in keys])
        for t in plan.types(i):
            plan.aggr[(i, t)] = _aggr(nodes, i, t, plan.relations[i], fix)
            norm = nodes.get(f"norms_{i}__{t}")
            if i < len(convs) - 1:
                arg = norm.args[0] if norm is not None and norm.args else None
                plan.act_first[(i, t)] = bool(getattr(arg, "name", "").startswith("act"))
    return plan


def _aggr(nodes: dict[str, Any], i: int, t: str, rels: list[Any], fix: str) -> str:
    """How layer ``i`` combines the relations into ``t`` (one relation: nothing to combine)."""
    if sum(1 for et, _ in rels if et[2] == t) == 1:
        return "sum"
    node = nodes.get(f"convs_{i}__{t}")
    target = getattr(node, "target", None) if getattr(node, "op", "") == "call_function" else None
    if target not in AGGRS:
        raise ValueError(
            f"layer {i} combines the relations into {t!r} with {target!r}, not one of "
            f"to_hetero's aggregations ({sorted(AGGRS.values())}); {fix}"
        )
    return AGGRS[target]


def _combine(outs: list[Tensor], aggr: str) -> Tensor:
    out = outs[0]
    for other in outs[1:]:
        out = {"max": torch.maximum, "min": torch.minimum, "mul": torch.mul}.get(aggr, torch.add)(
            out, other
        )
    return out / len(outs) if aggr == "mean" else out


@dataclass(slots=True)
class _Sub:
    """One batch's 1-hop subgraph: ids per type, edges per relation, its seed count."""

    n_id: dict[str, Tensor]
    edge_index: dict[EdgeType, Tensor]
    size: int


Rows = Callable[[str, Tensor], Tensor]


def _layer(model: Any, plan: HeteroPlan, i: int, t: str, sub: _Sub, rows: Rows) -> Tensor:
    """``[size, H]``: layer ``i`` for the batch's seeds of type ``t``."""
    from torch_geometric.nn import GCNConv

    x_t = rows(t, sub.n_id[t])
    outs = []
    for et, key in plan.relations[i]:
        if et[2] != t:
            continue
        conv = model.convs[i][key]
        x_s = x_t if et[0] == t else rows(et[0], sub.n_id[et[0]])
        edge_index = sub.edge_index[et]
        if isinstance(conv, GCNConv):  # not bipartite: one type, the 1-hop subgraph's degrees
            outs.append(conv(x_s, edge_index)[: sub.size])
        else:
            outs.append(conv((x_s, x_t[: sub.size]), edge_index))
    h = _combine(outs, plan.aggr[(i, t)])
    if i == plan.num_layers - 1:
        return h
    act = model.act[t] if isinstance(getattr(model, "act", None), nn.ModuleDict) else None
    first = plan.act_first[(i, t)]
    if act is not None and first:
        h = act(h)
    h = model.norms[i][t](h) if hasattr(model, "norms") else h
    if act is not None and not first:
        h = act(h)
    return h  # dropout: evaluation mode


def _layer0_rows(batch: Any, embeddings: dict[str, Any]) -> Rows:
    """Layer 0's rows: the batch's features, or a featureless type's embedding rows."""

    def rows(t: str, n_id: Tensor) -> Tensor:
        if "x" in batch[t]:
            x: Tensor = batch[t].x
            return x
        if t not in embeddings:
            raise ValueError(
                f"node type {t!r} has no features: pass embeddings={{{t!r}: ...}} (the "
                "nn.Embedding or [N, F] rows your model was trained with)"
            )
        return embedding_rows(embeddings[t], n_id)

    return rows


def embedding_rows(table: Any, n_id: Tensor) -> Tensor:
    """Rows ``n_id`` of a featureless type's ``nn.Embedding`` or ``[N_t, F]`` tensor, float32."""
    out = table(n_id) if isinstance(table, nn.Module) else table[n_id]
    return torch.as_tensor(out, dtype=torch.float32)


def typed_layerwise(
    model: Any, plan: HeteroPlan, loader_of: Callable[[str], Any], output_type: str,
    layers: Path, timeout_s: float, embeddings: dict[str, Any] | None = None,
) -> Tensor:  # fmt: skip
    """``[M, H]`` exact outputs of this rank's ``output_type`` nodes, layer by layer.

    ``loader_of(t)``: the ``DistNeighborLoader`` of every owned node of type ``t`` (1 hop).
    """
    embeddings = embeddings or {}
    loaders = {t: loader_of(t) for t in plan.types(0)}
    first = next(iter(loaders.values()))
    rank, world, books = first.rank, first.world_size, first.books
    subs: dict[str, list[_Sub]] = {t: [] for t in loaders}
    h: dict[str, Tensor] = {}
    for t, loader in loaders.items():  # layer 0: the features through the loader's halo path
        outs = []
        for batch in loader:
            sub = _Sub(
                {s: batch[s].n_id for s in batch.node_types},
                {et: batch[et].edge_index for et in batch.edge_types},
                int(batch[t].batch_size),
            )  # fmt: skip
            subs[t].append(sub)
            outs.append(_layer(model, plan, 0, t, sub, _layer0_rows(batch, embeddings)))
        h[t] = torch.cat(outs)
    names = {t: k for k, t in enumerate(sorted(books))}
    for i in range(1, plan.num_layers):
        paths = _save(h, i - 1, rank, names, layers)
        barrier(f"layer {i - 1}'s rows", timeout_s)
        tables = {t: [_load(layers, i - 1, names[t], p) for p in range(world)] for t in h}
        rows = _table_rows(tables, books, i - 1)
        wanted = plan.types(i)
        missing = sorted(set(wanted) - set(subs))
        if missing:
            raise ValueError(f"layer {i} gives rows to {missing}, which layer 0 does not")
        h = {t: torch.cat([_layer(model, plan, i, t, s, rows) for s in subs[t]]) for t in wanted}
        barrier(f"layer {i}", timeout_s)  # every rank has read layer i - 1's files
        del tables
        for path in paths:
            path.unlink()
    if output_type not in h:
        raise ValueError(
            f"the model's last layer gives node type {output_type!r} no rows; pass an "
            f"input_type it gives: {sorted(h)}"
        )
    return h[output_type]


def _table_rows(tables: dict[str, list[np.ndarray]], books: dict[str, Any], layer: int) -> Rows:
    """Rows of layer ``layer``'s tables (every rank's file) for any ids of a type."""

    def rows(t: str, n_id: Tensor) -> Tensor:
        if t not in tables:
            raise ValueError(
                f"layer {layer} gives node type {t!r} no rows; the next layer reads them"
            )
        return owner_rows(tables[t], books[t], n_id.numpy(), int(tables[t][0].shape[1]))

    return rows


def _save(
    h: dict[str, Tensor], layer: int, rank: int, names: dict[str, int], at: Path
) -> list[Path]:
    """This rank's rows of every type of one layer, each written atomically."""
    return [
        save_rows(at / f"layer{layer}-type{names[t]}-part{rank:05d}.npy", rows)
        for t, rows in h.items()
    ]


def _load(at: Path, layer: int, type_number: int, part: int) -> np.ndarray:
    path = at / f"layer{layer}-type{type_number}-part{part:05d}.npy"
    table: np.ndarray = np.load(path, mmap_mode="r", allow_pickle=False)
    return table
