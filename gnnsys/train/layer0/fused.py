"""Layer 0 straight from compressed halo rows: the requester's fused dequantizing aggregation.

With a codec whose ``fused_aggregate`` is true (``int8``, ``int4``), ``requester`` placement
and a first layer that is linear in its inputs (SAGE mean/sum, GCN), the remote rows of a
type's block-0 relations are summed from their codes by ``gnnsys.kernels.aggregate(q, rowptr,
col, "sum", scale=, zero=)`` (fused dequantization: the Triton kernel on CUDA, FBGEMM's
byte-row ``embedding_bag`` on CPU), so they are never decoded to a float32 ``[H, F]`` copy.
Owned rows are floats already. Per batch::

    rows   = features.fetch_split(n_id)            # owned rows float, halo rows encoded
    per relation out of the type (``PerTypeInputs.finish_first``), split its block-0 edges by
    the kind of their source (owned | halo), order kept:
    agg_MF = aggregate(x_own,  rowptr_own,  col_own,  "sum")
           + aggregate(q_halo, rowptr_halo, col_halo, "sum", scale=s_halo, zero=z_halo)
    mean: agg_MF /= max(deg, 1);  GCN: sources scaled by s_j (folded into the row scale)
    x_dst_MF = owned dst rows | decode(halo dst rows)  # only the M root rows are decoded

``agg_MF`` equals ``layer.aggregate`` over decoded rows up to float32 summation order; the bytes
on the wire, the cache's lookups and admissions and the ledger are exactly those of decoding
(the rows are fetched through the same ``RoutedFeatureSource``: cache, fetcher and owner calls).

Shape legend: ``N`` block-0 sources, ``M`` destinations, ``E`` edges, ``F`` features, ``L`` owned
source rows, ``H`` halo source rows.
"""

from __future__ import annotations

import torch
from torch import Tensor

from gnnsys.cache import SplitRows
from gnnsys.cache.codecs import Codec, EncodedRows, take
from gnnsys.kernels import aggregate
from gnnsys.types import Block

__all__ = ["decoded_roots", "fused_sum"]


def _sub_csr(keep_E: Tensor, dst_E: Tensor, col_E: Tensor, num_dst: int) -> tuple[Tensor, Tensor]:
    """``(rowptr, col)`` of the edges where ``keep_E``, grouped by destination, order kept."""
    counts_M = torch.bincount(dst_E[keep_E], minlength=num_dst)
    rowptr = torch.zeros(num_dst + 1, dtype=torch.int64, device=dst_E.device)
    torch.cumsum(counts_M, 0, out=rowptr[1:])
    return rowptr, col_E[keep_E]


def fused_sum(
    block: Block, rows: SplitRows, weight_N: Tensor | None, *, num_features: int
) -> Tensor:
    """``[M, F]`` ``sum_e w[col[e]] * x[col[e]]`` of ``block``, halo rows summed from codes.

    ``rows`` are the block's sources split by ``fetch_split``: owned ones as floats, halo ones
    encoded. Called per relation, with its source type's rows (``PerTypeInputs.finish_first``).
    """
    num_src, num_dst = block.num_src, block.num_dst
    on = block.col.device  # the step's device: the host, or a GPU after the transfer stage
    is_halo_N = torch.zeros(num_src, dtype=torch.bool, device=on)
    is_halo_N[rows.remote_pos] = True
    within_N = torch.empty(num_src, dtype=torch.int64, device=on)  # index inside its group
    within_N[rows.local_pos] = torch.arange(rows.local_pos.numel(), device=on)
    within_N[rows.remote_pos] = torch.arange(rows.remote_pos.numel(), device=on)
    col_E = block.col.long()
    halo_E = is_halo_N[col_E]
    dst_E = torch.repeat_interleave(
        torch.arange(num_dst, device=on), block.rowptr.diff().long(), output_size=col_E.numel()
    )  # output_size: no device-to-host sync for the length
    col_E = within_N[col_E]
    x_LF = rows.local_LF
    if weight_N is not None:
        x_LF = x_LF * weight_N[rows.local_pos][:, None]
    rowptr, col = _sub_csr(~halo_E, dst_E, col_E, num_dst)
    agg_MF = aggregate(x_LF, rowptr, col, "sum")
    if rows.remote_pos.numel():
        enc = rows.remote
        assert enc.scale is not None and enc.zero is not None  # int8/int4 carry both
        scale_H = enc.scale.float()
        if weight_N is not None:  # (q - z) * (scale * s): GCN's weight rides in the scale
            scale_H = scale_H * weight_N[rows.remote_pos]
        rowptr, col = _sub_csr(halo_E, dst_E, col_E, num_dst)
        agg_MF += aggregate(
            enc.data, rowptr, col, "sum", scale=scale_H, zero=enc.zero,
            num_features=num_features,
        )  # fmt: skip
    return agg_MF


def decoded_roots(num_dst: int, rows: SplitRows, codec: Codec, *, num_features: int) -> Tensor:
    """``[num_dst, F]`` float32 rows of the first ``num_dst`` sources (only halo ones decoded)."""
    x_dst_MF = torch.empty(num_dst, num_features, dtype=torch.float32, device=rows.local_LF.device)
    local_dst = rows.local_pos < num_dst
    x_dst_MF[rows.local_pos[local_dst]] = rows.local_LF[local_dst]
    remote_dst = torch.nonzero(rows.remote_pos < num_dst).flatten()
    if remote_dst.numel():
        dst_rows: EncodedRows = take(rows.remote, remote_dst)
        x_dst_MF[rows.remote_pos[remote_dst]] = codec.decode(dst_rows)
    return x_dst_MF
