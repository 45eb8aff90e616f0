"""Owner-side partial aggregation of the first layer: plan (pure), owner compute, combine.

For mean, sum and GCN's normalised sum, the first layer's neighbour aggregation is linear in
the input rows, so the owner of a group of sampled neighbours can sum them itself and send one
partial sum per (destination, owner) instead of every neighbour's row::

    agg_i = sum_{e in in(i)} w_e * x[src_e]              (w = 1, or GCN's s_j per source)
          = sum_{local/cached e} w_e x[src_e] + sum_{owner o} partial_{i,o}
    mean_i = agg_i / deg_i                                (deg = block in-degree; 0 stays 0)

Which rows travel. A block-0 source that is also a block-0 destination (``pos < num_dst``) is
needed as a row anyway (the layer's root term ``x_dst``), so its edges are aggregated locally.
A source past ``num_dst`` that is owned elsewhere and not available locally (not cached) is
*remote-only*: with ``owner`` placement its edges go to its owner as (destination group,
source gid) pairs and its row never travels. ``auto`` decides per owner, by bytes.

Shape legend: ``N`` block-0 source nodes, ``M`` its destinations, ``E`` its edges, ``K`` pairs
sent to one owner, ``G`` destination groups of one owner, ``F`` features.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from gnnsys.cache.codecs import Codec, EncodedRows
from gnnsys.kernels import aggregate
from gnnsys.train.layer0.base import Placement
from gnnsys.types import Block

__all__ = [
    "OwnerRequest",
    "PartialPlan",
    "answer_partials",
    "combine_partials",
    "owner_partial_sums",
    "plan_partial",
]

ID_BYTES = 8  # int64 gids and row pointers on the wire
WEIGHT_BYTES = 4  # float32 per-pair weights (GCN)


@dataclass(frozen=True, slots=True, eq=False)
class OwnerRequest:
    """The (destination group, source) pairs one owner aggregates.

    Attributes:
        part: The owner.
        group_rowptr: ``[G + 1]`` int64, pairs grouped by destination (sent).
        group_dst: ``[G]`` int64 block-0 destination of each group (kept by the requester).
        src_gid: ``[K]`` int64 source gids owned by ``part`` (sent).
        src_weight: ``[K]`` float32 per-pair weights, or ``None`` for a plain sum (sent).
    """

    part: int
    group_rowptr: Tensor
    group_dst: Tensor
    src_gid: Tensor
    src_weight: Tensor | None

    @property
    def num_groups(self) -> int:
        """``G``: partial sums this owner returns."""
        return int(self.group_dst.numel())

    def request_nbytes(self) -> int:
        """Bytes sent to the owner: the row pointer, the source gids and the weights."""
        weights = 0 if self.src_weight is None else int(self.src_weight.numel()) * WEIGHT_BYTES
        return (int(self.group_rowptr.numel()) + int(self.src_gid.numel())) * ID_BYTES + weights


@dataclass(frozen=True, slots=True, eq=False)
class PartialPlan:
    """How one batch's first-layer aggregation is split between requester and owners.

    Attributes:
        requests: One per owner that aggregates for us (may be empty).
        local_rowptr: ``[M + 1]`` int64 CSR of the edges aggregated by the requester.
        local_col: ``[E_local]`` int64 block-0 source positions of those edges.
        need_row_N: ``[N]`` bool, the source rows the requester must hold (local, cached or
            fetched); rows elsewhere are never read.
        rows_avoided: Remote rows that no longer travel because their owner aggregates them.
    """

    requests: tuple[OwnerRequest, ...]
    local_rowptr: Tensor
    local_col: Tensor
    need_row_N: Tensor
    rows_avoided: int


def _csr_of(dst_E: Tensor, num_dst: int) -> Tensor:
    """``[M + 1]`` row pointer of edges sorted by destination."""
    rowptr = torch.zeros(num_dst + 1, dtype=torch.int64)
    torch.cumsum(torch.bincount(dst_E, minlength=num_dst), 0, out=rowptr[1:])
    return rowptr


def _owner_request(
    part: int, dst_K: Tensor, src_gid_K: Tensor, weight_K: Tensor | None
) -> OwnerRequest:
    """Group one owner's pairs (already sorted by destination) into a request."""
    group_dst, counts = torch.unique_consecutive(dst_K, return_counts=True)
    group_rowptr = torch.zeros(group_dst.numel() + 1, dtype=torch.int64)
    torch.cumsum(counts, 0, out=group_rowptr[1:])
    return OwnerRequest(part, group_rowptr, group_dst, src_gid_K, weight_K)


def _rows_cost(num_rows: int, row_bytes: int) -> int:
    """Bytes to fetch ``num_rows`` rows: their gids out, the rows back."""
    return num_rows * (ID_BYTES + row_bytes)


def plan_partial(
    block: Block,
    n_id: Tensor,
    part_N: Tensor,
    *,
    my_part: int,
    available_N: Tensor,
    placement: Placement = Placement.OWNER,
    row_bytes: int = 0,
    src_weight_N: Tensor | None = None,
    sum_bytes: int | None = None,
    root_rows: int | None = None,
) -> PartialPlan:
    """Decide which block-0 edges each owner aggregates; pure, no I/O.

    Args:
        block: The first (input) block of a sampled subgraph.
        n_id: ``[N]`` gids of its source nodes.
        part_N: ``[N]`` owner of every source node.
        my_part: The requester's part.
        available_N: ``[N]`` bool, rows held without a remote fetch (owned, or cached).
        placement: ``REQUESTER`` (no owner aggregates), ``OWNER`` or ``AUTO`` (validated once,
            in ``FirstLayerConfig``).
        row_bytes: Bytes of one feature row on the wire (``auto`` compares costs with it).
        src_weight_N: ``[N]`` per-source weights (GCN's ``s_j``), or ``None``.
        sum_bytes: Bytes of one partial sum on the wire (default ``row_bytes``); differs when
            rows and sums travel in different formats (e.g. ``binary`` rows, float32 sums).
        root_rows: How many leading sources are needed as rows anyway (the layer's root
            term). ``None``: ``num_dst``, as in a block over one node set whose destinations
            are its first sources; a typed type's relations stacked into one block pass the
            destinations of its relation to itself (0 when it has none).

    Returns:
        The plan; ``combine_partials`` turns its answers into the layer's aggregation.

    Raises:
        ValueError: ``auto`` without ``row_bytes``.
    """
    if placement == Placement.AUTO and row_bytes <= 0:
        raise ValueError(f"placement='auto' needs row_bytes > 0, got {row_bytes}")
    sum_nbytes = row_bytes if sum_bytes is None else sum_bytes
    num_src, num_dst = block.num_src, block.num_dst
    part_N, col_E = part_N.long(), block.col.long()
    remote_N = (part_N != my_part) & ~available_N.bool()
    roots = num_dst if root_rows is None else root_rows
    remote_only_N = remote_N & (torch.arange(num_src) >= roots)
    if placement == Placement.REQUESTER:
        remote_only_N = torch.zeros_like(remote_only_N)
    dst_E = torch.repeat_interleave(torch.arange(num_dst), block.rowptr.diff())
    sent_E = remote_only_N[col_E]
    requests = []
    if bool(sent_E.any()):
        owner_S = part_N[col_E[sent_E]]
        order = torch.argsort(owner_S, stable=True)  # by owner, destination order kept
        dst_S, src_S, owner_S = dst_E[sent_E][order], col_E[sent_E][order], owner_S[order]
        for part in torch.unique(owner_S).tolist():
            sel = owner_S == part
            weight = None if src_weight_N is None else src_weight_N[src_S[sel]].float()
            request = _owner_request(part, dst_S[sel], n_id[src_S[sel]].long(), weight)
            rows = int(torch.unique(src_S[sel]).numel())
            partial_cost = request.request_nbytes() + request.num_groups * sum_nbytes
            if placement == Placement.AUTO and partial_cost >= _rows_cost(rows, row_bytes):
                remote_only_N[src_S[sel]] = False  # this owner sends rows instead
                continue
            requests.append(request)
    sent_E = remote_only_N[col_E]
    return PartialPlan(
        requests=tuple(requests),
        local_rowptr=_csr_of(dst_E[~sent_E], num_dst),
        local_col=col_E[~sent_E],
        need_row_N=~remote_only_N,
        rows_avoided=int(remote_only_N.sum()),
    )


def owner_partial_sums(
    x_owned: Tensor,
    lid_K: Tensor,
    group_rowptr: Tensor,
    src_weight_K: Tensor | None = None,
    *,
    scale: Tensor | None = None,
    zero: Tensor | None = None,
    num_features: int | None = None,
) -> Tensor:
    """At the owner: ``[G, F]`` sums of its rows ``lid_K`` per destination group.

    Unweighted sums run the fused kernel straight over the owner's (possibly quantized) rows,
    so a compressed store is dequantized only inside the reduction.

    Args:
        x_owned: ``[M_own, F]`` owned feature rows (float, or int8/int4 with ``scale``/``zero``).
        lid_K: ``[K]`` lids of the requested sources.
        group_rowptr: ``[G + 1]`` grouping of the ``K`` pairs.
        src_weight_K: ``[K]`` per-pair weights or ``None``.
        scale: Per-row scale of quantized ``x_owned``.
        zero: Per-row zero point of quantized ``x_owned``.
        num_features: ``F`` for int4-packed rows.
    """
    if src_weight_K is None:
        return aggregate(
            x_owned, group_rowptr, lid_K, "sum", scale=scale, zero=zero, num_features=num_features
        )
    rows_KF = aggregate(
        x_owned,
        torch.arange(lid_K.numel() + 1, dtype=torch.int64),
        lid_K,
        "sum",
        scale=scale,
        zero=zero,
        num_features=num_features,
    )
    weighted = rows_KF.float() * src_weight_K[:, None]
    return aggregate(weighted, group_rowptr, torch.arange(lid_K.numel()), "sum")


def answer_partials(
    rows: Callable[[np.ndarray], np.ndarray],
    group_rowptr: np.ndarray,
    src_id: np.ndarray,
    src_weight: np.ndarray | None,
    codec: Codec,
) -> EncodedRows:
    """An owner's answer to one partial-sum request: ``[G, F]`` sums, encoded with ``codec``.

    ``rows(ids) -> [K, F]`` float32 owned rows of the request's ids (global or type-local);
    row ``g`` of the answer is ``sum_{k in group g} w_k * rows[k]`` (``w = 1`` without
    ``src_weight``). ``ShardOwner.partial_sums`` answers through it, for any node type.

    Raises:
        ValueError: ``group_rowptr`` does not end at the number of ids sent.
    """
    rowptr = torch.from_numpy(np.asarray(group_rowptr, dtype=np.int64))
    if rowptr.numel() < 1 or int(rowptr[-1]) != len(src_id):
        raise ValueError(
            f"group_rowptr ends at {int(rowptr[-1]) if rowptr.numel() else None} but "
            f"{len(src_id)} source ids were sent; pass one id per pair"
        )
    rows_KF = torch.from_numpy(rows(np.asarray(src_id, dtype=np.int64)))
    weight = None if src_weight is None else torch.from_numpy(np.asarray(src_weight))
    pos_K = torch.arange(rows_KF.shape[0], dtype=torch.int64)
    sums_GF = owner_partial_sums(rows_KF, pos_K, rowptr, weight).float().contiguous()
    return codec.encode(sums_GF)


def combine_partials(
    plan: PartialPlan,
    block: Block,
    x_NF: Tensor,
    partials: dict[int, Tensor],
    *,
    reduce: str,
    src_weight_N: Tensor | None = None,
) -> Tensor:
    """At the requester: the first layer's ``[M, F]`` aggregation from local rows and partials.

    Args:
        plan: From :func:`plan_partial`.
        block: The first block.
        x_NF: ``[N, F]`` source rows; only rows where ``plan.need_row_N`` are read. A caller
            may pass just those rows if it remaps ``plan.local_col`` (and ``src_weight_N``) to
            them, as ``gnnsys.train.layer0.owner_sums`` does.
        partials: Owner part -> ``[G, F]`` sums answering that owner's request.
        reduce: ``"sum"`` or ``"mean"`` (GCN uses ``"sum"`` with ``src_weight_N``).
        src_weight_N: ``[N]`` per-source weights, as given to :func:`plan_partial`.
    """
    if reduce not in ("sum", "mean"):
        raise ValueError(
            f"reduce={reduce!r}: only sum and mean are linear; use placement=requester"
        )
    x = x_NF.float() if src_weight_N is None else x_NF.float() * src_weight_N[:, None].float()
    agg_MF = aggregate(x, plan.local_rowptr, plan.local_col, "sum")
    # In place unless autograd tracks x: each out-of-place step would copy [M, F] again.
    in_place = not agg_MF.requires_grad
    for request in plan.requests:
        part_GF = partials[request.part].float()
        if in_place:
            agg_MF.index_add_(0, request.group_dst, part_GF)
        else:
            agg_MF = agg_MF.index_add(0, request.group_dst, part_GF)
    if reduce == "mean":
        deg_M = block.rowptr.diff().clamp(min=1).to(agg_MF.dtype)
        agg_MF = agg_MF.div_(deg_M[:, None]) if in_place else agg_MF / deg_M[:, None]
    return agg_MF
