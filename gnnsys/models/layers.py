"""SAGE and GCN layers on ``gnnsys.kernels.aggregate``, split into ``aggregate`` and ``combine``.

Shape legend: ``N`` source nodes of a block, ``M`` destination nodes (the first ``M`` sources),
``F`` input dim, ``H`` output dim.

``forward(x_src, block) == combine(aggregate(x_src, block), x_src[:M], block)``. ``aggregate`` is
linear in ``x_src`` and a sum over in-edges, so an owner of some source rows can compute a partial
result over the edges it holds and the requester adds the partials (issue 8):

- ``SAGELayer`` (mean): owners return ``partial_i = sum_{e of i they hold} x[col[e]]``; the
  requester sums the partials and divides by the block degree ``rowptr[i+1] - rowptr[i]``
  (0 stays 0), giving exactly ``aggregate``.
- ``GCNLayer``: ``aggregate`` is ``sum_e s[col[e]] * x[col[e]]`` with the per-source scale
  ``s = GCNLayer.src_scale(block)`` ``= (1 + deg_j) ** -0.5`` (whole-graph in-degree when the
  block carries ``src_in_degree``, as the runtime's sampled blocks do); the requester
  sends ``s`` for the rows it asks for, owners return ``sum`` of ``s_j * x_j`` over their edges,
  and the requester adds the partials. ``combine`` applies the self loop and ``dst_scale``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from gnnsys.kernels import aggregate
from gnnsys.types import Block

__all__ = ["GCNLayer", "SAGELayer"]


class SAGELayer(nn.Module):
    """GraphSAGE layer, equal to PyG ``SAGEConv(in, out)``, with its parameter names.

    ``out_i = lin_l(reduce_{j in N(i)} x_j) + lin_r(x_i)``; ``lin_l`` carries the bias.

    Args:
        in_dim: ``F`` (of the sources).
        out_dim: ``H``.
        reduce: Neighbour reduction, ``"mean"`` (PyG's default), ``"sum"`` or ``"max"``.
        dst_dim: Width of the destinations' rows when they differ from the sources' (PyG's
            ``SAGEConv((F_src, F_dst), H)``: a relation between two node types); ``None``: ``F``.
    """

    def __init__(
        self, in_dim: int, out_dim: int, reduce: str = "mean", *, dst_dim: int | None = None
    ) -> None:
        super().__init__()
        self.reduce = reduce
        self.lin_l = nn.Linear(in_dim, out_dim, bias=True)
        self.lin_r = nn.Linear(in_dim if dst_dim is None else dst_dim, out_dim, bias=False)

    def aggregate(self, x_src: Tensor, block: Block) -> Tensor:
        """``[N, F] -> [M, F]``: the neighbour reduction over raw inputs."""
        return aggregate(x_src, block.rowptr, block.col, self.reduce)

    def combine(self, agg_MF: Tensor, x_dst: Tensor, block: Block) -> Tensor:
        """``[M, F], [M, F] -> [M, H]``: the linear maps of neighbours and root."""
        out: Tensor = self.lin_l(agg_MF) + self.lin_r(x_dst)
        return out

    def forward(self, x_src: Tensor, block: Block) -> Tensor:
        """``[N, F] -> [M, H]``."""
        return self.combine(self.aggregate(x_src, block), x_src[: block.num_dst], block)


class GCNLayer(nn.Module):
    """GCN layer with self loops and symmetric normalisation, equal to PyG ``GCNConv(in, out)``.

    ``out_i = W (t_i * (sum_{j in N(i)} s_j x_j + s_i x_i)) + b`` with ``s_j = (1 + outdeg_j)^-1/2``
    and ``t_i = (1 + indeg_i)^-1/2``: whole-graph in-degrees when ``block.src_in_degree`` is set
    (then the layer equals PyG's ``GCNConv`` on the whole graph, on any block holding every
    in-edge of its destinations), else degrees counted in the block. A graph that already has
    self loops gets a second one here (PyG keeps one).
    Parameter names (``lin.weight``, ``bias``) match PyG's.

    Args:
        in_dim: ``F``.
        out_dim: ``H``.
    """

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.lin = nn.Linear(in_dim, out_dim, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_dim))

    @staticmethod
    def src_scale(block: Block) -> Tensor:
        """``[N]`` ``(1 + degree) ** -0.5`` of every source node.

        The degree is ``block.src_in_degree`` (the whole graph's in-degree, PyG's ``deg``) when
        the block carries it, else the node's out-degree inside the block.
        """
        if block.src_in_degree is not None:
            return (block.src_in_degree + 1).float().rsqrt()
        outdeg_N = torch.bincount(block.col.long(), minlength=block.num_src)
        return (outdeg_N + 1).float().rsqrt()

    @staticmethod
    def dst_scale(block: Block) -> Tensor:
        """``[M]`` ``(1 + in-degree) ** -0.5`` of every destination (whole graph's if known)."""
        if block.src_in_degree is not None:
            return (block.src_in_degree[: block.num_dst] + 1).float().rsqrt()
        indeg_M = block.rowptr[1:] - block.rowptr[:-1]
        return (indeg_M + 1).float().rsqrt()

    def aggregate(self, x_src: Tensor, block: Block) -> Tensor:
        """``[N, F] -> [M, F]``: ``sum_e s[col[e]] * x[col[e]]`` (self loop excluded)."""
        s_N = self.src_scale(block).to(x_src.dtype)
        return aggregate(x_src * s_N[:, None], block.rowptr, block.col, "sum")

    def combine(self, agg_MF: Tensor, x_dst: Tensor, block: Block) -> Tensor:
        """``[M, F], [M, F] -> [M, H]``: add the self loop, scale by ``t``, project, add bias."""
        s_M = self.src_scale(block)[: block.num_dst].to(x_dst.dtype)
        t_M = self.dst_scale(block).to(x_dst.dtype)
        normed_MF = t_M[:, None] * (agg_MF + s_M[:, None] * x_dst)
        out: Tensor = self.lin(normed_MF) + self.bias
        return out

    def forward(self, x_src: Tensor, block: Block) -> Tensor:
        """``[N, F] -> [M, H]``."""
        return self.combine(self.aggregate(x_src, block), x_src[: block.num_dst], block)
