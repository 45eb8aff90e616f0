"""Source-blocked exact evaluation: linear layers over tables larger than memory.

The default evaluation path (``gnnsys.train.eval.sharded``: each relation reduced straight out of
the source rows) sums each destination's neighbours in in-edge order: one random row read per
edge. When the layer input (the shard's
memory-mapped features, a spilled table) does not fit in the page cache a run has, every one of
those reads is a disk read. Here a rank takes its destinations in spans whose neighbour sums
``[span, F]`` fit a budget (``EvalConfig.block_mb``, ``--eval-block-mb``); a span's in-edges are
read once and bucketed by source block (8 bytes each); its owned sources are read in ascending
blocks, each asked of the kernel ahead (``MADV_WILLNEED``) while the previous one is summed; its
distinct halo rows are fetched once, in sorted blocks. A layer so costs ``ceil(M / span)``
sequential passes over the own table.

A SAGE layer much narrower than its input (the last layer: ``H`` classes from a ``F``-wide
hidden table) runs projected instead (``projected_outputs``, relation by relation):
``lin_l`` is linear, so ``lin_l(mean x_j) = mean(x_j W^T) + b``. One sequential pass over the
own table and one over the halo rows project every source to ``H`` columns (and
``lin_r(x_i) + b`` is added per destination); every in-edge is then summed from the
``[M + halo, H]`` projections in memory, with no span passes. Only where they fit twice the
span budget: otherwise the layer keeps the span passes.

Sums run in source order, not in-edge order: the outputs equal the default path's up to float
rounding. Shape legend: ``M`` owned rows, ``F`` input width, ``D`` destinations of a span.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import numpy as np
import torch
from torch import Tensor

from gnnsys.kernels import aggregate
from gnnsys.models.layers import GCNLayer
from gnnsys.models.relational import RelationalGCNLayer, RelationalSAGELayer
from gnnsys.train.eval.memory import eval_tick
from gnnsys.types import Block

__all__ = [
    "RelationInput",
    "projected_outputs",
    "blocked_outputs",
    "linear_reduce",
    "is_blocked_layer",
]

_PIECE_EDGES = 1 << 20  # in-edges read from the shard at once while a span is bucketed

Willneed = Callable[[Tensor, int, int], None]
"""``willneed(table, first, stop)``: a read-ahead hint for rows ``[first, stop)``."""


def _bucketed(
    local_E: np.ndarray,
    rowptr: np.ndarray,
    e0: int,
    m: int,
    block_rows: int,
) -> tuple[list[list[np.ndarray]], list[list[np.ndarray]], np.ndarray, np.ndarray]:
    """One span's in-edges, owned sources bucketed by source block, halo sources sorted.

    Read ``_PIECE_EDGES`` in-edges at a time; each edge is kept as two int32 (source, span
    destination), so a span costs 8 bytes per in-edge. Returns per owned source block the
    pieces of sources and destinations, and the halo edges' halo positions (sorted) and
    destinations.
    """
    num_blocks = -(-m // block_rows)
    own_src: list[list[np.ndarray]] = [[] for _ in range(num_blocks)]
    own_dst: list[list[np.ndarray]] = [[] for _ in range(num_blocks)]
    halo_src: list[np.ndarray] = []
    halo_dst: list[np.ndarray] = []
    total = int(rowptr[-1])
    for p0 in range(0, total, _PIECE_EDGES):
        p1 = min(total, p0 + _PIECE_EDGES)
        col = np.asarray(local_E[e0 + p0 : e0 + p1], dtype=np.int64)
        dst = np.searchsorted(rowptr, np.arange(p0, p1), side="right").astype(np.int32) - 1
        mine = col < m
        src = col[mine]
        block = src // block_rows
        order = np.argsort(block, kind="stable")
        src, mine_dst, block = src[order].astype(np.int32), dst[mine][order], block[order]
        bounds = np.searchsorted(block, np.arange(num_blocks + 1))
        for b in np.flatnonzero(np.diff(bounds)):
            own_src[b].append(src[bounds[b] : bounds[b + 1]])
            own_dst[b].append(mine_dst[bounds[b] : bounds[b + 1]])
        halo_src.append((col[~mine] - m).astype(np.int32))  # positions among the halo rows
        halo_dst.append(dst[~mine])
    h_src = np.concatenate(halo_src) if halo_src else np.zeros(0, np.int32)
    h_dst = np.concatenate(halo_dst) if halo_dst else np.zeros(0, np.int32)
    order = np.argsort(h_src, kind="stable")
    return own_src, own_dst, h_src[order], h_dst[order]


def divide_by_degree(sum_DF: Tensor, rowptr: np.ndarray) -> None:
    """Neighbour sums -> means, in place, by each row's in-edges (a row without any stays 0)."""
    sum_DF.div_(torch.from_numpy(np.diff(rowptr)).clamp_(min=1).to(sum_DF.dtype)[:, None])


class _Sums:
    """The neighbour sums ``[D, F]`` of one span, added to a block of rows at a time."""

    def __init__(self, num_dst: int, width: int, scale_S: Tensor | None, m: int) -> None:
        self.acc = torch.zeros(num_dst, width, dtype=torch.float32)
        self.scale_S, self.m = scale_S, m

    def add(self, rows: Tensor, source: np.ndarray, dst: np.ndarray) -> None:
        """Add ``rows`` (of sources ``source``: own lids, or ``M +`` halo positions)."""
        if self.scale_S is not None:
            rows *= self.scale_S[torch.from_numpy(source.astype(np.int64)), None]
        self.acc.index_add_(0, torch.from_numpy(dst.astype(np.int64)), rows)

    def own_blocks(
        self,
        own_MF: Tensor,
        own_src: list[list[np.ndarray]],
        own_dst: list[list[np.ndarray]],
        block_rows: int,
        willneed: Willneed | None,
    ) -> None:
        """Owned sources, block by block in ascending order, the next block asked ahead."""
        m = int(own_MF.shape[0])
        todo = [b for b in range(len(own_src)) if own_src[b]]
        for i, b in enumerate(todo):
            if willneed is not None:  # this block at the start, then always the next one
                for ahead in todo[:2] if i == 0 else todo[i + 1 : i + 2]:
                    willneed(own_MF, ahead * block_rows, min(m, (ahead + 1) * block_rows))
            src = np.concatenate(own_src[b]).astype(np.int64)
            dst = np.concatenate(own_dst[b])
            own_src[b], own_dst[b] = [], []
            for g in range(0, src.shape[0], block_rows):
                pick = src[g : g + block_rows]
                self.add(own_MF[torch.from_numpy(pick)].float(), pick, dst[g : g + block_rows])
                eval_tick()

    def halo_blocks(
        self,
        halo_src: np.ndarray,
        halo_dst: np.ndarray,
        halo_rows: Callable[[np.ndarray], Tensor],
        block_rows: int,
    ) -> None:
        """Halo sources: the distinct ones, fetched ``block_rows`` at a time, sorted."""
        uniq, first_edge = np.unique(halo_src, return_index=True)
        first_edge = np.append(first_edge, halo_src.shape[0])
        for u0 in range(0, uniq.shape[0], block_rows):
            u1 = min(u0 + block_rows, uniq.shape[0])
            got = halo_rows(uniq[u0:u1].astype(np.int64))
            lo, hi = int(first_edge[u0]), int(first_edge[u1])
            pos = np.searchsorted(uniq[u0:u1], halo_src[lo:hi])
            source = self.m + halo_src[lo:hi].astype(np.int64)
            self.add(got[torch.from_numpy(pos)].float(), source, halo_dst[lo:hi])
            eval_tick()


def linear_reduce(module: object) -> str | None:
    """How a linear typed layer reduces every relation: ``mean``/``sum`` (SAGE) or ``gcn``.

    ``None`` for the others (GAT, R-GCN), which keep the default path with cut inputs.
    """
    reduce: str | None = getattr(module, "linear_reduce", None)
    return reduce


def is_blocked_layer(module: object) -> bool:
    """Whether a typed layer runs source-blocked: SAGE (mean or sum) or GCN per relation."""
    return linear_reduce(module) is not None


@dataclass(frozen=True, slots=True, eq=False)
class RelationInput:
    """One relation into the destination type of :func:`blocked_outputs`.

    Attributes:
        block: In-edges of every owned destination; ``col`` below ``own.shape[0]`` is an owned
            source row, past it ``own.shape[0] +`` a position among the source type's halo rows.
        own: ``[M_src, F]`` the source type's owned rows (usually memory-mapped).
        halo_rows: Float rows of the source type's halo at sorted positions.
        num_halo: The source type's halo rows (positions ``0 .. num_halo - 1``).
    """

    block: Block
    own: Tensor
    halo_rows: Callable[[np.ndarray], Tensor]
    num_halo: int


@torch.no_grad()
def blocked_outputs(
    module: object,
    dst_type: str,
    own_dst: Tensor,
    relations: dict[tuple[str, str, str], RelationInput],
    into: Callable[[int], Tensor],
    *,
    block_mb: float,
    willneed: Willneed | None = None,
) -> None:
    """A typed SAGE or GCN layer's outputs for one destination type, sources read in blocks.

    The destinations run in spans whose neighbour sums over every relation into the type fit
    ``block_mb`` MiB; per relation a span's in-edges are bucketed once, its owned sources read in
    ascending blocks of a quarter of that (the next asked ahead) and its distinct halo rows
    fetched once, sorted. Each relation's sums become its reduction (``forward_from_agg``; GCN
    scales each source by its relation's ``(1 + in-degree) ** -0.5`` from ``block``'s
    ``src_in_degree``). Equal to the layer on the whole input up to float rounding (sums in
    source order).

    Args:
        module: The layer (:func:`is_blocked_layer` holds).
        dst_type: The destination type computed.
        own_dst: ``[M, F_dst]`` its owned rows (the roots).
        relations: Every relation into ``dst_type`` whose source type has rows this layer.
        into: Called once with the output width; returns the ``[M, H]`` output buffer.
        block_mb: The span budget.
        willneed: Read-ahead hint for rows of the owned tables (optional).
    """
    assert is_blocked_layer(module)
    linear = cast(RelationalSAGELayer | RelationalGCNLayer, module)
    gcn = linear.linear_reduce == "gcn"
    m = int(own_dst.shape[0])
    width = sum(int(r.own.shape[1]) for r in relations.values())
    span_rows = max(1, int(block_mb * 2**20) // (4 * max(width, 1)))
    block_rows = max(1, span_rows // 4)
    sage = cast(RelationalSAGELayer, module)  # when not GCN
    if not gcn and _relations_project(sage, relations, block_mb):
        projected_outputs(sage, own_dst, relations, into, block_rows=block_rows, willneed=willneed)
        return
    out: Tensor | None = None
    for start in range(0, m, span_rows):
        end = min(start + span_rows, m)
        agg, blocks = {}, {}
        for et, rel in relations.items():
            indptr = rel.block.rowptr.numpy()
            e0 = int(indptr[start])
            rowptr = indptr[start : end + 1] - e0
            m_src = int(rel.own.shape[0])
            own_src, own_dst_, halo_src, halo_dst = _bucketed(
                rel.block.col.numpy(), rowptr, e0, m_src, block_rows
            )
            degree = rel.block.src_in_degree  # GCN's, of [own; halo] sources
            scale_S = None
            if gcn:
                assert degree is not None  # the evaluator fetched them for a GCN layer
                scale_S = GCNLayer.src_scale(rel.block)
            sums = _Sums(end - start, int(rel.own.shape[1]), scale_S, m_src)
            sums.own_blocks(rel.own, own_src, own_dst_, block_rows, willneed)
            sums.halo_blocks(halo_src, halo_dst, rel.halo_rows, block_rows)
            if linear.linear_reduce == "mean":
                divide_by_degree(sums.acc, rowptr)
            agg[et] = sums.acc
            blocks[et] = Block(
                num_src=0, num_dst=end - start, rowptr=torch.from_numpy(rowptr),
                col=rel.block.col[:0], e_id=rel.block.e_id[:0],
                src_in_degree=None if degree is None or not gcn else degree[start:end],
            )  # fmt: skip
        if willneed is not None:
            willneed(own_dst, start, end)
        x_dst = {dst_type: own_dst[start:end].float()}
        rows = linear.forward_from_agg(x_dst, blocks, agg).get(dst_type)
        if rows is None:
            return
        if out is None:
            out = into(int(rows.shape[1]))
        out[start:end] = rows


def _relations_project(
    module: RelationalSAGELayer,
    relations: dict[tuple[str, str, str], RelationInput],
    block_mb: float,
) -> bool:
    """:func:`_projects` for a typed SAGE layer, relation by relation.

    Every relation into the type is at most half as wide out as in, and each relation's
    ``[M_src + H_src, H]`` projections fit twice the span budget (one relation's are held at a
    time).
    """
    if not relations:
        return False
    for et, rel in relations.items():
        width, out = int(rel.own.shape[1]), int(module.conv(et).lin_l.out_features)
        rows = int(rel.own.shape[0]) + rel.num_halo
        if 2 * out > width or rows * out * 4 > 2 * block_mb * 2**20:
            return False
    return True


@torch.no_grad()
def projected_outputs(
    module: RelationalSAGELayer,
    own_dst: Tensor,
    relations: dict[tuple[str, str, str], RelationInput],
    into: Callable[[int], Tensor],
    *,
    block_rows: int,
    willneed: Willneed | None = None,
) -> None:
    """:func:`projected_layer_outputs` per relation into one destination type, summed.

    ``out_i = sum_r (reduce_{j in N_r(i)}(x_j W_l,r^T) + b_r + x_i W_r,r^T)``: per relation (in
    the layer's order) its sources are projected in one sequential pass over the own table and
    one over the halo rows, its root term added in one pass over ``own_dst``, and every in-edge
    summed from the projections in memory. One relation's projections are held at a time.
    """
    m, block_rows = int(own_dst.shape[0]), max(1, block_rows)
    out: Tensor | None = None
    for et in [et for et in module.edge_types if et in relations]:
        rel, conv = relations[et], module.conv(et)
        w_l, w_r, bias = conv.lin_l.weight, conv.lin_r.weight, conv.lin_l.bias
        m_src = int(rel.own.shape[0])
        z_S = torch.empty(m_src + rel.num_halo, int(w_l.shape[0]), dtype=torch.float32)
        term = torch.empty(m, int(w_l.shape[0]), dtype=torch.float32)
        for b0 in range(0, m_src, block_rows):  # own sources: one sequential pass
            b1 = min(m_src, b0 + block_rows)
            if willneed is not None and b1 < m_src:
                willneed(rel.own, b1, min(m_src, b1 + block_rows))
            z_S[b0:b1] = rel.own[b0:b1].float() @ w_l.T
            eval_tick()
        for b0 in range(0, m, block_rows):  # the roots: one pass over the destination rows
            b1 = min(m, b0 + block_rows)
            term[b0:b1] = torch.addmm(bias, own_dst[b0:b1].float(), w_r.T)
        for u0 in range(0, rel.num_halo, block_rows):  # halo sources: sorted blocks, each once
            u1 = min(rel.num_halo, u0 + block_rows)
            rows = rel.halo_rows(np.arange(u0, u1, dtype=np.int64)).float()
            z_S[m_src + u0 : m_src + u1] = rows @ w_l.T
            eval_tick()
        ptr = rel.block.rowptr
        for start in range(0, m, 1 << 14):  # runs of destinations (bounded temporaries)
            end = min(m, start + (1 << 14))
            lo, hi = int(ptr[start]), int(ptr[end])
            col = rel.block.col[lo:hi]
            term[start:end] += aggregate(z_S, ptr[start : end + 1] - lo, col, module.reduce)
            eval_tick()
        del z_S
        if out is None:
            out = into(int(term.shape[1]))
            out[:] = term
        else:
            out += term
