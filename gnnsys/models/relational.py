"""Heterogeneous GNN layers over typed blocks: heterogeneous SAGE and R-GCN (single device).

A *typed block* layer is a dict ``edge type -> Block`` (``RelationalSubgraph.blocks[l]``):
the block of ``(src, rel, dst)`` has rows for the first ``num_dst`` nodes of ``dst`` and ``col``
indexes the first ``num_src`` nodes of ``src``. Inputs are ``x_dict``: node type -> ``[N_t, F]``
rows of that type's sampled nodes (at least ``num_src`` of every block reading it). A layer's
output has one entry per destination type: ``[M_t, H]`` for its first ``M_t`` nodes.

* ``RelationalSAGELayer`` equals PyG's ``HeteroConv({et: SAGEConv((-1, -1), H)}, aggr="sum")``:
  ``out[t]_i = sum over relations r into t of lin_l_r(mean_{j in N_r(i)} x_j) + lin_r_r(x_i)``,
  with PyG 2.8's parameter names (``convs.<src___rel___dst>.lin_l.weight``, ...).
* ``RelationalGATLayer`` equals PyG's ``HeteroConv`` of ``GATConv`` (``aggr="sum"``), one per
  relation in the form the relation admits: from a type to itself, the homogeneous
  ``GATConv(F_t, C, heads=K, concat=)`` (one projection, a self loop per destination:
  ``gnnsys.models.GATLayer``, so a homogeneous graph's one relation gives ``GAT``); between two
  types, the bipartite ``GATConv((F_src, F_dst), C, heads=K, concat=, add_self_loops=False)``
  (PyG's ``to_hetero`` recipe; a destination without in-edges of it gets its bias). PyG's
  parameter names (``convs.<src___rel___dst>.lin.weight`` or ``lin_src``/``lin_dst``,
  ``att_src``, ``att_dst``, ``bias``).
* ``RelationalGCNLayer`` equals PyG's ``to_hetero`` of a GCN (``GCNConv(-1, H)`` per relation,
  summed), for graphs whose every relation leads from a type to itself: PyG's ``GCNConv``
  takes no bipartite input. Each relation normalises by its own whole-graph in-degrees
  (``Block.src_in_degree``); a homogeneous graph's one relation gives ``GCNLayer``.
* ``RGCNLayer`` equals PyG's ``RGCNConv(F, H, num_relations, aggr="mean")`` on the
  homogeneous graph (``HeteroData.to_homogeneous()``, relation index = position in
  ``edge_types``): ``out_i = x_i root + sum_r (mean_{j in N_r(i)} x_j) W_r + bias``; every type
  shares the width ``F`` (as R-GCN does).

A stack over one relation from a type to itself (a homogeneous graph's) saves and loads its
state dict under the homogeneous model's names (``layers.0.lin_l.weight``, not
``layers.0.convs.<node___to___node>.lin_l.weight``): its checkpoints are ``SAGE``'s, ``GCN``'s
or ``GAT``'s (:func:`_one_relation_names`).

Both reduce neighbours with ``gnnsys.kernels.aggregate`` (a relation without edges into a type
contributes zero). Relations whose source type is missing from ``x_dict`` are skipped, as
``HeteroConv`` skips them.

Shape legend: ``N_t`` input rows of type ``t``, ``M_t`` destination rows, ``F`` input dim,
``H`` output dim, ``R`` relations.
"""

from __future__ import annotations

from typing import cast

import torch
from torch import Tensor, nn

from gnnsys.kernels import aggregate
from gnnsys.models.layers import GCNLayer, SAGELayer
from gnnsys.types import Block, EdgeType

__all__ = [
    "RGCN",
    "EdgeType",
    "RelationalGCN",
    "RelationalGCNLayer",
    "RelationalSAGE",
    "RelationalSAGELayer",
    "RGCNLayer",
    "TypedBlocks",
]

TypedBlocks = dict[EdgeType, Block]
"""One layer's blocks, keyed by edge type."""


def _key(edge_type: EdgeType) -> str:
    return f"<{'___'.join(edge_type)}>"  # PyG 2.8's ModuleDict key for an edge type


def _dst_rows(blocks: TypedBlocks, x_dict: dict[str, Tensor]) -> dict[str, int]:
    """``M_t`` of every destination type reachable from ``x_dict``; blocks must agree."""
    rows: dict[str, int] = {}
    for (src, _, dst), block in blocks.items():
        if src in x_dict:
            if rows.setdefault(dst, block.num_dst) != block.num_dst:
                raise ValueError(
                    f"blocks into {dst!r} disagree on num_dst ({rows[dst]} vs {block.num_dst})"
                )
    return rows


def _sum_relations(
    convs: nn.ModuleDict,
    edge_types: list[EdgeType],
    x_dict: dict[str, Tensor],
    blocks: TypedBlocks,
    agg: dict[EdgeType, Tensor] | None = None,
) -> dict[str, Tensor]:
    """Each relation's ``conv(x_src, x_dst, block)``, summed per destination type.

    PyG's ``HeteroConv(aggr="sum")``; a relation whose block or endpoint rows are missing is
    skipped. ``agg[r]`` stands in for relation ``r``'s neighbour reduction
    (``conv.from_agg(agg[r], x_dst)``): its source rows are then not needed.
    """
    agg = agg or {}
    out: dict[str, Tensor] = {}
    _dst_rows(blocks, x_dict)
    for edge_type in edge_types:
        src, _, dst = edge_type
        block = blocks.get(edge_type)
        if block is None or dst not in x_dict or (edge_type not in agg and src not in x_dict):
            continue
        conv = convs[_key(edge_type)]
        x_dst = x_dict[dst][: block.num_dst]
        if edge_type in agg:
            h = cast(_RelationSAGE | _RelationGCN, conv).from_agg(agg[edge_type], x_dst, block)
        else:
            h = conv(x_dict[src][: block.num_src], x_dst, block)
        out[dst] = h if dst not in out else out[dst] + h
    return out


class _RelationSAGE(SAGELayer):
    """One relation's ``SAGEConv((F_src, F_dst), H)`` (PyG's names: ``lin_l``, ``lin_r``)."""

    def __init__(self, src_dim: int, dst_dim: int, out_dim: int, reduce: str) -> None:
        super().__init__(src_dim, out_dim, reduce, dst_dim=dst_dim)

    def forward(  # type: ignore[override]
        self, x_src: Tensor, x_dst: Tensor, block: Block
    ) -> Tensor:
        """``[N, F_src], [M, F_dst] -> [M, H]``."""
        return self.combine(self.aggregate(x_src, block), x_dst, block)

    def from_agg(self, agg_MF: Tensor, x_dst: Tensor, block: Block | None = None) -> Tensor:
        """``[M, F_src], [M, F_dst] -> [M, H]`` from the neighbour reduction done already.

        ``block`` is unused (``_RelationGCN.from_agg`` reads its destinations' degrees).
        """
        h_MH: Tensor = self.lin_l(agg_MF) + self.lin_r(x_dst)
        return h_MH


class RelationalSAGELayer(nn.Module):
    """One ``SAGEConv`` per relation, summed per destination type (PyG's ``HeteroConv``).

    Args:
        in_dims: Node type -> input width ``F_t``.
        out_dim: ``H``.
        edge_types: The relations, in PyG's ``metadata()[1]`` order.
        reduce: Neighbour reduction per relation (``"mean"``, PyG's default).
    """

    def __init__(
        self,
        in_dims: dict[str, int],
        out_dim: int,
        edge_types: list[EdgeType],
        reduce: str = "mean",
    ) -> None:
        super().__init__()
        self.reduce = reduce
        self.edge_types: list[EdgeType] = [(et[0], et[1], et[2]) for et in edge_types]
        self.convs = nn.ModuleDict(
            {
                _key(et): _RelationSAGE(in_dims[et[0]], in_dims[et[2]], out_dim, reduce)
                for et in edge_types
            }
        )

    def forward(self, x_dict: dict[str, Tensor], blocks: TypedBlocks) -> dict[str, Tensor]:
        """``{t: [N_t, F_t]} -> {t: [M_t, H]}`` for every destination type."""
        return _sum_relations(self.convs, self.edge_types, x_dict, blocks)

    @property
    def linear_reduce(self) -> str | None:
        """``mean``/``sum``: each relation's reduction is linear (``None`` for ``max``)."""
        return self.reduce if self.reduce in ("mean", "sum") else None

    def conv(self, edge_type: EdgeType) -> _RelationSAGE:
        """Relation ``edge_type``'s ``SAGEConv`` (``lin_l``, ``lin_r``)."""
        return cast(_RelationSAGE, self.convs[_key(edge_type)])

    def forward_from_agg(
        self, x_dict: dict[str, Tensor], blocks: TypedBlocks, agg: dict[EdgeType, Tensor]
    ) -> dict[str, Tensor]:
        """``forward`` with some relations' neighbour reductions already done.

        ``agg[r]`` (``[M_dst, F_src]``) replaces relation ``r``'s reduction of its source rows
        (the fused dequantizing sum of compressed halo rows, or owners' partial sums:
        ``gnnsys.train.layer0``); its destination rows still come from ``x_dict``. Equal to
        :meth:`forward` up to float summation order.
        """
        return _sum_relations(self.convs, self.edge_types, x_dict, blocks, agg)


class _RelationGCN(GCNLayer):
    """One relation's ``GCNConv(F, H)`` (PyG's names: ``lin.weight``, ``bias``).

    Source and destination are one node type, whose whole-graph in-degrees in the relation it
    normalises by (``Block.src_in_degree``, else degrees counted in the block, as ``GCNLayer``).
    """

    def forward(  # type: ignore[override]
        self, x_src: Tensor, x_dst: Tensor, block: Block
    ) -> Tensor:
        """``[N, F], [M, F] -> [M, H]`` (``x_dst`` is ``x_src[:M]``: one node type)."""
        return self.combine(self.aggregate(x_src, block), x_dst, block)

    def from_agg(self, agg_MF: Tensor, x_dst: Tensor, block: Block) -> Tensor:
        """``[M, F], [M, F] -> [M, H]`` from the degree-weighted neighbour sum done already.

        ``agg_MF`` is :meth:`aggregate`'s; ``block`` need only carry its destinations' rows and
        in-degrees (``src_in_degree[:num_dst]``).
        """
        return self.combine(agg_MF, x_dst, block)


class RelationalGCNLayer(nn.Module):
    """One ``GCNConv`` per relation, summed per destination type (PyG's ``to_hetero`` of a GCN).

    PyG's ``GCNConv`` takes no bipartite input (pyg-team/pytorch_geometric#7637): every
    relation must lead from a node type to itself. A homogeneous graph's one relation does, and
    there this layer equals ``GCNLayer`` (same parameters, same order).

    Args:
        in_dims: Node type -> input width ``F_t``.
        out_dim: ``H``.
        edge_types: The relations, each ``(t, rel, t)``.

    Raises:
        ValueError: A relation between two node types.
    """

    uses_in_degree = True
    """Its blocks must carry each relation's whole-graph in-degrees (``Block.src_in_degree``)."""
    linear_reduce = "gcn"
    """Each relation is a weighted sum (evaluation sums it straight out of the source rows)."""

    def __init__(self, in_dims: dict[str, int], out_dim: int, edge_types: list[EdgeType]) -> None:
        super().__init__()
        check_gcn_relations(edge_types)
        self.edge_types: list[EdgeType] = [(et[0], et[1], et[2]) for et in edge_types]
        self.convs = nn.ModuleDict(
            {_key(et): _RelationGCN(in_dims[et[0]], out_dim) for et in self.edge_types}
        )

    def forward(self, x_dict: dict[str, Tensor], blocks: TypedBlocks) -> dict[str, Tensor]:
        """``{t: [N_t, F_t]} -> {t: [M_t, H]}`` for every destination type."""
        return _sum_relations(self.convs, self.edge_types, x_dict, blocks)

    def forward_from_agg(
        self, x_dict: dict[str, Tensor], blocks: TypedBlocks, agg: dict[EdgeType, Tensor]
    ) -> dict[str, Tensor]:
        """``forward`` with some relations' weighted sums done (``_RelationGCN.from_agg``)."""
        return _sum_relations(self.convs, self.edge_types, x_dict, blocks, agg)


def check_gcn_relations(edge_types: list[EdgeType]) -> None:
    """Raise unless every relation leads from a node type to itself (GCN's one condition).

    Raises:
        ValueError: Naming the first relation between two types and the models that take it.
    """
    for src, rel, dst in edge_types:
        if src != dst:
            raise ValueError(
                f"model gcn needs every relation to lead from a node type to itself, but "
                f"{src}__{rel}__{dst} joins two types: PyG's GCNConv takes no bipartite input "
                "(pyg-team/pytorch_geometric#7637); choose --model sage, gat or rgcn"
            )


class RGCNLayer(nn.Module):
    """R-GCN layer, equal to PyG's ``RGCNConv(in_dim, out_dim, R, aggr="mean")`` (no bases).

    Parameter names and shapes match PyG's: ``weight [R, F, H]``, ``root [F, H]``, ``bias [H]``.

    Args:
        in_dim: ``F`` (every node type's width).
        out_dim: ``H``.
        edge_types: The relations; relation ``r`` is ``edge_types[r]``.
    """

    def __init__(self, in_dim: int, out_dim: int, edge_types: list[EdgeType]) -> None:
        super().__init__()
        self.edge_types: list[EdgeType] = [(et[0], et[1], et[2]) for et in edge_types]
        num_relations = len(edge_types)
        self.weight = nn.Parameter(torch.empty(num_relations, in_dim, out_dim))
        self.root = nn.Parameter(torch.empty(in_dim, out_dim))
        self.bias = nn.Parameter(torch.zeros(out_dim))
        nn.init.xavier_uniform_(self.weight.view(-1, out_dim))
        nn.init.xavier_uniform_(self.root)

    def forward(self, x_dict: dict[str, Tensor], blocks: TypedBlocks) -> dict[str, Tensor]:
        """``{t: [N_t, F]} -> {t: [M_t, H]}`` for every destination type."""
        rows = _dst_rows(blocks, x_dict)
        out = {t: x_dict[t][:m] @ self.root + self.bias for t, m in rows.items() if t in x_dict}
        for r, edge_type in enumerate(self.edge_types):
            src, _, dst = edge_type
            block = blocks.get(edge_type)
            if block is None or src not in x_dict or dst not in out:
                continue
            agg_MF = aggregate(x_dict[src][: block.num_src], block.rowptr, block.col, "mean")
            out[dst] = out[dst] + agg_MF @ self.weight[r]
        return out


def _one_relation_names(stack: nn.Module, edge_types: list[EdgeType]) -> None:
    """Save and load ``stack`` under the homogeneous names if it has one relation, type to itself.

    ``layers.<i>.convs.<t___rel___t>.<name>`` is saved as ``layers.<i>.<name>``: the names of
    ``SAGE``, ``GCN`` and ``GAT``, whose layers are this one relation's. Loading takes either form.
    """
    if len(edge_types) != 1 or edge_types[0][0] != edge_types[0][2]:
        return
    inner = f".convs.{_key(edge_types[0])}."

    def save(module: nn.Module, state: dict[str, Tensor], prefix: str, _meta: object) -> None:
        for name in [n for n in state if n.startswith(prefix + "layers.") and inner in n]:
            state[name.replace(inner, ".", 1)] = state.pop(name)

    def load(module: nn.Module, state: dict[str, Tensor], prefix: str, *_: object) -> None:
        head = prefix + "layers."
        for name in [n for n in state if n.startswith(head) and ".convs." not in n]:
            layer, rest = name[len(head) :].split(".", 1)
            state[f"{head}{layer}{inner}{rest}"] = state.pop(name)

    stack.register_state_dict_post_hook(save)  # type: ignore[no-untyped-call]
    stack.register_load_state_dict_pre_hook(load)  # type: ignore[no-untyped-call]


class _RelationalStack(nn.Module):
    """Typed layers in order (input layer first), ReLU and dropout between them.

    Raises:
        ValueError: ``num_layers < 1`` or dropout outside ``[0, 1)``.
    """

    def __init__(self, num_layers: int, dropout: float) -> None:
        super().__init__()
        if num_layers < 1 or not 0.0 <= dropout < 1.0:
            raise ValueError(
                f"need num_layers >= 1 and dropout in [0, 1); got {num_layers}, {dropout}"
            )
        self.dropout = dropout
        self.layers = nn.ModuleList()

    def forward(
        self, x_dict: dict[str, Tensor], blocks: tuple[TypedBlocks, ...]
    ) -> dict[str, Tensor]:
        """``{t: [N_t, F_t]}`` and one typed block layer per layer -> every reached output."""
        return _stack_forward(self.layers, x_dict, blocks, self.dropout, self.training)


class _RelationStack(_RelationalStack):
    """A stack of one per-relation layer class (``layer_class``), each type its own input width.

    Args:
        in_dims: Node type -> input width.
        hidden_dim: ``H``.
        out_dim: Output width (classes) of the last layer.
        edge_types: The relations.
        num_layers: Layers (= typed block layers per batch).
        dropout: Dropout after each hidden layer.
    """

    layer_class: type[nn.Module]

    def __init__(
        self,
        in_dims: dict[str, int],
        hidden_dim: int,
        out_dim: int,
        edge_types: list[EdgeType],
        num_layers: int = 2,
        dropout: float = 0.5,
    ) -> None:
        super().__init__(num_layers, dropout)
        dims = [in_dims] + [dict.fromkeys(in_dims, hidden_dim)] * (num_layers - 1)
        widths = [hidden_dim] * (num_layers - 1) + [out_dim]
        self.layers.extend(
            self._layer(d_in, width, edge_types, last=i == num_layers - 1)
            for i, (d_in, width) in enumerate(zip(dims, widths, strict=True))
        )
        _one_relation_names(self, edge_types)

    def _layer(
        self, in_dims: dict[str, int], width: int, edge_types: list[EdgeType], *, last: bool
    ) -> nn.Module:
        """One layer ``in_dims -> width`` (``last``: the output layer)."""
        return self.layer_class(in_dims, width, edge_types)

    def forward_from_first_agg(
        self,
        x_dict: dict[str, Tensor],
        blocks: tuple[TypedBlocks, ...],
        agg: dict[EdgeType, Tensor],
    ) -> dict[str, Tensor]:
        """``forward`` with layer 0's reductions of the relations in ``agg`` done already."""
        return _stack_forward(self.layers, x_dict, blocks, self.dropout, self.training, agg)


class RelationalSAGE(_RelationStack):
    """``RelationalSAGELayer`` stack with ReLU and dropout between layers (input layer first).

    Arguments as ``_RelationStack``'s.

    Raises:
        ValueError: ``num_layers < 1`` or dropout outside ``[0, 1)``.
    """

    layer_class = RelationalSAGELayer


def _stack_forward(
    layers: nn.ModuleList,
    x_dict: dict[str, Tensor],
    blocks: tuple[TypedBlocks, ...],
    dropout: float,
    training: bool,
    first_agg: dict[EdgeType, Tensor] | None = None,
) -> dict[str, Tensor]:
    """Run typed layers in order, ReLU and dropout between them (RelationalSAGE's and RGCN's).

    ``first_agg``: layer 0's reductions done already (``RelationalSAGELayer.forward_from_agg``).
    """
    if len(blocks) != len(layers):
        raise ValueError(f"got {len(blocks)} block layers for {len(layers)} layers")
    for i, (layer, layer_blocks) in enumerate(zip(layers, blocks, strict=True)):
        if i == 0 and first_agg:
            linear = cast(RelationalSAGELayer | RelationalGCNLayer, layer)
            x_dict = linear.forward_from_agg(x_dict, layer_blocks, first_agg)
        else:
            x_dict = layer(x_dict, layer_blocks)
        if i < len(layers) - 1:
            x_dict = {
                t: nn.functional.dropout(h.relu(), dropout, training) for t, h in x_dict.items()
            }
    return x_dict


class RGCN(_RelationalStack):
    """``RGCNLayer`` stack with ReLU and dropout between layers (input layer first).

    Every node type enters with width ``in_dim`` (features, or embeddings as wide).

    Args:
        in_dim: ``F`` of every node type.
        hidden_dim: ``H``.
        out_dim: Output width (classes) of the last layer.
        edge_types: The relations.
        num_layers: Layers (= typed block layers per batch).
        dropout: Dropout after each hidden layer.

    Raises:
        ValueError: ``num_layers < 1`` or dropout outside ``[0, 1)``.
    """

    def __init__(
        self,
        in_dim: int,
        hidden_dim: int,
        out_dim: int,
        edge_types: list[EdgeType],
        num_layers: int = 2,
        dropout: float = 0.5,
    ) -> None:
        super().__init__(num_layers, dropout)
        dims = [in_dim] + [hidden_dim] * (num_layers - 1)
        widths = [hidden_dim] * (num_layers - 1) + [out_dim]
        self.layers.extend(
            RGCNLayer(d_in, width, edge_types) for d_in, width in zip(dims, widths, strict=True)
        )


class RelationalGCN(_RelationStack):
    """``RelationalGCNLayer`` stack with ReLU and dropout between layers (input layer first).

    Every relation leads from a node type to itself (:func:`check_gcn_relations`); on a
    homogeneous graph it equals ``gnnsys.models.GCN`` from the same seed. Arguments as
    ``_RelationStack``'s.

    Raises:
        ValueError: ``num_layers < 1``, dropout outside ``[0, 1)``, or a relation between two
            node types.
    """

    layer_class = RelationalGCNLayer
    uses_in_degree = True
    """Blocks carry each relation's whole-graph in-degrees (``Block.src_in_degree``)."""
