"""GAT over blocks: multi-head attention with self loops, in plain torch ops.

Attention weights depend on both endpoints, so this aggregation is not linear in ``x`` and has no
``aggregate``/``combine`` split; it materialises ``[E, heads, C]`` messages (fine at sampled-block
sizes). Shape legend: ``N`` source nodes, ``M`` destination nodes (the first ``M`` sources), ``E``
block edges plus ``M`` self loops, ``K`` heads, ``C`` channels per head.

``RelationalGATLayer``/``RelationalGAT`` are GAT over typed blocks (``gnnsys.models.relational``
describes them): one ``GATConv`` per relation, summed; a relation from a type to itself is a
``GATLayer``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional

from gnnsys.kernels.csr import dst_of_edges
from gnnsys.models.base import BlockModel, check_dims, layer_dims
from gnnsys.models.relational import (
    EdgeType,
    TypedBlocks,
    _key,
    _RelationStack,
    _sum_relations,
)
from gnnsys.types import Block

__all__ = ["GAT", "GATLayer", "RelationalGAT", "RelationalGATLayer"]


class GATLayer(nn.Module):
    """GATConv-style layer (PyG parameter names ``lin``, ``att_src``, ``att_dst``, ``bias``).

    Args:
        in_dim: Input dim.
        out_dim: Channels per head ``C``.
        heads: ``K``.
        concat: Concatenate heads (``K * C`` outputs) or average them (``C`` outputs).
        negative_slope: LeakyReLU slope of the attention logits.
        attn_dropout: Dropout on the attention weights while training.
    """

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        heads: int = 1,
        concat: bool = True,
        negative_slope: float = 0.2,
        attn_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.heads, self.out_dim, self.concat = heads, out_dim, concat
        self.negative_slope, self.attn_dropout = negative_slope, attn_dropout
        self.lin = nn.Linear(in_dim, heads * out_dim, bias=False)
        self.att_src = nn.Parameter(torch.empty(1, heads, out_dim))
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_dim))
        self.bias = nn.Parameter(torch.zeros(heads * out_dim if concat else out_dim))
        nn.init.xavier_uniform_(self.att_src)
        nn.init.xavier_uniform_(self.att_dst)

    def _edges(self, block: Block) -> tuple[Tensor, Tensor]:
        """``(src [E], dst [E])`` of the block's edges plus one self loop per destination."""
        loops = torch.arange(block.num_dst, device=block.col.device)
        src = torch.cat([block.col.long(), loops])
        dst = torch.cat([dst_of_edges(block.rowptr), loops])
        return src, dst

    def forward(self, x_src: Tensor, block: Block) -> Tensor:
        """``[N, F] -> [M, K * C]`` (concat) or ``[M, C]``."""
        m, k, c = block.num_dst, self.heads, self.out_dim
        h_NKC = self.lin(x_src).view(-1, k, c)
        logit_src_N = (h_NKC * self.att_src).sum(-1)
        logit_dst_M = (h_NKC[:m] * self.att_dst).sum(-1)
        src, dst = self._edges(block)
        logit_EK = functional.leaky_relu(logit_src_N[src] + logit_dst_M[dst], self.negative_slope)
        # Softmax per destination, shifted by the per-destination max for stability.
        idx_EK = dst[:, None].expand_as(logit_EK)
        max_MK = logit_EK.new_zeros(m, k).scatter_reduce(
            0, idx_EK, logit_EK, "amax", include_self=False
        )
        w_EK = torch.exp(logit_EK - max_MK[dst])
        denom_MK = logit_EK.new_zeros(m, k).index_add(0, dst, w_EK)
        alpha_EK = functional.dropout(w_EK / denom_MK[dst], self.attn_dropout, self.training)
        out_MKC = h_NKC.new_zeros(m, k, c).index_add(0, dst, h_NKC[src] * alpha_EK[..., None])
        out = out_MKC.reshape(m, k * c) if self.concat else out_MKC.mean(1)
        result: Tensor = out + self.bias
        return result


class GAT(BlockModel):
    """Stack of ``GATLayer``: hidden layers concatenate ``heads`` heads, the last averages one.

    Args:
        in_dim: Input feature dim ``F``.
        hidden_dim: Hidden dim (all heads together); must be divisible by ``heads``.
        out_dim: Output dim ``C`` (classes).
        num_layers: Layers (= blocks per batch).
        dropout: Dropout after each hidden layer and on attention weights.
        heads: Attention heads of the hidden layers.

    Raises:
        ValueError: Bad dims, dropout, or ``hidden_dim`` not divisible by ``heads``.
    """

    def __init__(
        self,
        in_dim: int,
        hidden_dim: int,
        out_dim: int,
        num_layers: int = 2,
        dropout: float = 0.5,
        heads: int = 4,
    ) -> None:
        check_dims(in_dim, hidden_dim, out_dim, num_layers, dropout)
        if heads < 1 or hidden_dim % heads:
            raise ValueError(f"hidden_dim={hidden_dim} must be a multiple of heads={heads} >= 1")
        super().__init__(num_layers, dropout)
        dims = layer_dims(in_dim, hidden_dim, out_dim, num_layers)
        for i, (d_in, d_out) in enumerate(dims):
            last = i == num_layers - 1
            k = 1 if last else heads
            self.layers.append(GATLayer(d_in, d_out // k, k, not last, attn_dropout=dropout))


class _RelationGAT(nn.Module):
    """One relation's ``GATConv((F_src, F_dst), C, heads=K, add_self_loops=False)``."""

    def __init__(
        self, src_dim: int, dst_dim: int, out_dim: int, heads: int, concat: bool, dropout: float
    ) -> None:
        super().__init__()
        self.heads, self.out_dim, self.concat, self.dropout = heads, out_dim, concat, dropout
        self.att_src = nn.Parameter(torch.empty(1, heads, out_dim))
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_dim))
        self.bias = nn.Parameter(torch.zeros(heads * out_dim if concat else out_dim))
        self.lin_src = nn.Linear(src_dim, heads * out_dim, bias=False)
        self.lin_dst = nn.Linear(dst_dim, heads * out_dim, bias=False)
        nn.init.xavier_uniform_(self.att_src)
        nn.init.xavier_uniform_(self.att_dst)

    def forward(self, x_src: Tensor, x_dst: Tensor, block: Block) -> Tensor:
        """``[N, F_src], [M, F_dst] -> [M, K * C]`` (concat) or ``[M, C]``."""
        m, k, c = block.num_dst, self.heads, self.out_dim
        h_src = self.lin_src(x_src).view(-1, k, c)
        logit_src = (h_src * self.att_src).sum(-1)
        logit_dst = (self.lin_dst(x_dst).view(-1, k, c) * self.att_dst).sum(-1)
        src, dst = block.col.long(), dst_of_edges(block.rowptr)
        logit = functional.leaky_relu(logit_src[src] + logit_dst[dst], 0.2)
        idx = dst[:, None].expand_as(logit)  # softmax per destination, max-shifted
        top = logit.new_zeros(m, k).scatter_reduce(0, idx, logit, "amax", include_self=False)
        w = torch.exp(logit - top[dst])
        alpha = w / logit.new_zeros(m, k).index_add(0, dst, w)[dst]
        alpha = functional.dropout(alpha, self.dropout, self.training)
        out = h_src.new_zeros(m, k, c).index_add(0, dst, h_src[src] * alpha[..., None])
        result: Tensor = (out.reshape(m, k * c) if self.concat else out.mean(1)) + self.bias
        return result


class _SelfGAT(GATLayer):
    """A relation from a type to itself: the homogeneous ``GATConv(F, C, heads=K)``.

    One projection for both ends and a self loop per destination (``x_dst`` is ``x_src[:M]``).
    """

    def forward(  # type: ignore[override]
        self, x_src: Tensor, x_dst: Tensor, block: Block
    ) -> Tensor:
        """``[N, F], [M, F] -> [M, K * C]`` (concat) or ``[M, C]``."""
        return super().forward(x_src, block)


class RelationalGATLayer(nn.Module):
    """One ``GATConv`` per relation, summed per destination type (PyG's ``HeteroConv``).

    A relation from a type to itself gets the homogeneous form (``_SelfGAT``), one between two
    types the bipartite form without self loops (``_RelationGAT``).

    Args:
        in_dims: Node type -> input width ``F_t``.
        out_dim: Channels per head ``C``.
        edge_types: The relations.
        heads: ``K``.
        concat: Concatenate the heads (``K * C`` outputs) or average them (``C``).
        attn_dropout: Dropout on the attention weights while training.
    """

    def __init__(
        self,
        in_dims: dict[str, int],
        out_dim: int,
        edge_types: list[EdgeType],
        heads: int = 1,
        concat: bool = True,
        attn_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.edge_types: list[EdgeType] = [(et[0], et[1], et[2]) for et in edge_types]
        self.convs = nn.ModuleDict(
            {
                _key(et): (
                    _SelfGAT(in_dims[et[0]], out_dim, heads, concat, attn_dropout=attn_dropout)
                    if et[0] == et[2]
                    else _RelationGAT(
                        in_dims[et[0]], in_dims[et[2]], out_dim, heads, concat, attn_dropout
                    )
                )
                for et in self.edge_types
            }
        )

    def forward(self, x_dict: dict[str, Tensor], blocks: TypedBlocks) -> dict[str, Tensor]:
        """``{t: [N_t, F_t]} -> {t: [M_t, K * C or C]}`` for every destination type."""
        return _sum_relations(self.convs, self.edge_types, x_dict, blocks)


class RelationalGAT(_RelationStack):
    """``RelationalGATLayer`` stack with ReLU and dropout between layers.

    Hidden layers concatenate ``heads`` heads, the last averages one (as ``gnnsys.models.GAT``).

    Args:
        in_dims: Node type -> input width.
        hidden_dim: ``H`` (all heads together); a multiple of ``heads``.
        out_dim: Output width (classes) of the last layer.
        edge_types: The relations.
        num_layers: Layers (= typed block layers per batch).
        dropout: Dropout after each hidden layer and on the attention weights.
        heads: Attention heads of the hidden layers.

    Raises:
        ValueError: ``num_layers < 1``, dropout outside ``[0, 1)``, or ``hidden_dim`` not a
            multiple of ``heads``.
    """

    def __init__(
        self,
        in_dims: dict[str, int],
        hidden_dim: int,
        out_dim: int,
        edge_types: list[EdgeType],
        num_layers: int = 2,
        dropout: float = 0.5,
        heads: int = 4,
    ) -> None:
        if heads < 1 or hidden_dim % heads:
            raise ValueError(f"hidden_dim={hidden_dim} must be a multiple of heads={heads} >= 1")
        self.heads = heads
        super().__init__(in_dims, hidden_dim, out_dim, edge_types, num_layers, dropout)

    def _layer(
        self, in_dims: dict[str, int], width: int, edge_types: list[EdgeType], *, last: bool
    ) -> nn.Module:
        """Hidden layers: ``heads`` heads of ``width // heads`` concatenated; the last: one."""
        k = 1 if last else self.heads
        return RelationalGATLayer(in_dims, width // k, edge_types, k, not last, self.dropout)
