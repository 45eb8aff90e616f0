"""GAT over blocks: multi-head attention with self loops, in plain torch ops.

Attention weights depend on both endpoints, so this aggregation is not linear in ``x`` and has no
``aggregate``/``combine`` split; it materialises ``[E, heads, C]`` messages (fine at sampled-block
sizes). Shape legend: ``N`` source nodes, ``M`` destination nodes (the first ``M`` sources), ``E``
block edges plus ``M`` self loops, ``K`` heads, ``C`` channels per head.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional

from gnnsys.kernels.csr import dst_of_edges
from gnnsys.models.base import BlockModel, check_dims, layer_dims
from gnnsys.types import Block

__all__ = ["GAT", "GATLayer"]


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
