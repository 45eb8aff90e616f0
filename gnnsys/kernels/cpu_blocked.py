"""Blocked CPU sum over a CSR for large tables: feature tiles x edge chunks of ``embedding_bag``.

Shape legend: ``R`` rows of the gathered table (``N`` forward, ``M`` backward), ``Q`` output rows,
``E`` edges, ``F`` feature dim, ``W`` columns of one feature tile, ``T`` tiles.

Algorithm (``gather_sum``)::

    stage:  ws[t] = table[:, tile t] * in_scale[:, None]     # one pass, tile-major, reused buffer
    for t in tiles:                                           # W = 64 fp32 columns = 256 B per row
        for (q0, q1, e0, e1) in chunks:                       # ~256 K edges each
            o = embedding_bag(ws[t], col[e0:e1], offsets)     # [q1 - q0, W], stays in cache
            out[q0:q1, tile t] = o * out_scale[q0:q1, None]   # mean's 1/deg fused into the copy

Why each step (measured on the 2-core CI box, R-MAT scale 20, F = 128; see docs/kernels.md):

- Page faults: a fresh ``[1 M, 128]`` fp32 output costs ~131 K 4 KiB page faults, 0.2-0.3 s of
  a ~1 s forward on this VM. ``thp_empty`` advises transparent huge pages on the output before
  its first touch (256 faults instead), and the staged table lives in a reused buffer.
- Locality: the gather of random 512 B rows is latency-bound; the hot (high out-degree) rows are
  what stays in the 8 MiB L3. Gathering one 256 B tile at a time doubles the number of hot rows
  that fit, at the price of one staging pass and one extra read of ``col`` per tile.
- Chunks keep every ``embedding_bag`` output small (it lives in cache until the fused copy) and
  replace the separate ``[Q, F]`` division pass of mean.
- Mean backward scales the staged ``grad`` rows by ``1/deg`` (``in_scale``) during staging, so it
  needs no per-edge weights and no ``[E]`` temporary.

The chunk plan (bounds, per-chunk offsets, ``1/deg``) is cached per ``(rowptr, col)`` tensor
pair, like the transposed CSR. Used for fp32 tables of at least ``MIN_TABLE_BYTES``; smaller
tables fit the caches and take the plain ``embedding_bag`` path.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor

from gnnsys.kernels.csr import cached_per_csr

__all__ = [
    "MIN_TABLE_BYTES",
    "ChunkPlan",
    "chunk_plan",
    "gather_sum",
    "run_chunks",
    "thp_empty",
    "use_blocked",
]

MIN_TABLE_BYTES = 32 << 20
"""Smallest gathered table (bytes) that takes the blocked path: 4x the 8 MiB L3 of the CI box."""
CHUNK_EDGES = 1 << 18
"""Edges per ``embedding_bag`` chunk (the output chunk of ~256 K edges stays in L2/L3)."""
TILE_BYTES = 256
"""Bytes of one row of a feature tile (64 fp32 columns)."""

_HUGE_PAGE = 2 << 20
_MADV_HUGEPAGE = 14  # linux/mman.h


@functools.cache
def _madvise() -> Callable[[int, int, int], int] | None:
    """The C library's ``madvise`` on Linux, else ``None`` (``thp_empty`` then skips advice)."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    fn = libc.madvise
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return cast(Callable[[int, int, int], int], fn)


def thp_empty(shape: tuple[int, ...], dtype: torch.dtype) -> Tensor:
    """``torch.empty`` whose 2 MiB-aligned interior is advised for transparent huge pages.

    Only the advice is given (``madvise(MADV_HUGEPAGE)``, before any page is touched); the
    tensor is an ordinary torch tensor and the kernel falls back to 4 KiB pages on its own. A
    failed call is ignored: the advice only changes speed.
    """
    out = torch.empty(shape, dtype=dtype)
    nbytes = out.numel() * out.element_size()
    madvise = _madvise()
    if madvise is None or nbytes < 4 * _HUGE_PAGE:
        return out
    start = -(-out.data_ptr() // _HUGE_PAGE) * _HUGE_PAGE
    end = (out.data_ptr() + nbytes) // _HUGE_PAGE * _HUGE_PAGE
    if end > start:
        madvise(start, end - start, _MADV_HUGEPAGE)
    return out


_WORKSPACE = threading.local()  # per thread: concurrent callers never share a staging buffer


def _staging(numel: int, dtype: torch.dtype) -> Tensor:
    """A reused, huge-page-advised buffer of ``numel`` elements (grows to the largest table).

    Reuse matters as much as the advice: the staging pass then writes to resident pages.
    """
    buf: Tensor | None = getattr(_WORKSPACE, "buf", None)
    nbytes = numel * torch.empty((), dtype=dtype).element_size()
    if buf is None or buf.numel() < nbytes:
        buf = thp_empty((nbytes,), torch.uint8)
        _WORKSPACE.buf = buf
    return buf[:nbytes].view(dtype)


def use_blocked(table: Tensor) -> bool:
    """Whether ``gather_sum`` should serve this table (large fp32 CPU rows)."""
    return (
        table.device.type == "cpu"
        and table.dtype == torch.float32
        and table.numel() * table.element_size() >= MIN_TABLE_BYTES
    )


@dataclass(frozen=True, slots=True, eq=False)
class ChunkPlan:
    """Edge-balanced chunks of a CSR for ``gather_sum``.

    Attributes:
        bounds: ``(q0, q1, e0, e1)`` per chunk: output rows ``[q0, q1)`` own edges ``[e0, e1)``.
        offsets: per chunk, ``[q1 - q0 + 1]`` offsets into ``col[e0:e1]`` in ``col``'s dtype.
        inv_deg: ``[Q]`` fp32 ``1 / max(deg, 1)`` of every output row (the mean scale).
    """

    bounds: tuple[tuple[int, int, int, int], ...]
    offsets: tuple[Tensor, ...]
    inv_deg: Tensor


def _build_plan(rowptr: Tensor, col: Tensor, chunk_edges: int) -> ChunkPlan:
    num_rows, num_edges = int(rowptr.shape[0]) - 1, int(col.shape[0])
    rowptr64 = rowptr.long()
    starts = torch.arange(0, num_edges, chunk_edges, dtype=torch.int64)
    cuts = sorted({0, num_rows, *torch.searchsorted(rowptr64, starts, right=True).sub(1).tolist()})
    cuts = [c for c in cuts if 0 <= c <= num_rows]
    bounds, offsets = [], []
    for q0, q1 in zip(cuts[:-1], cuts[1:], strict=True):
        e0, e1 = int(rowptr64[q0]), int(rowptr64[q1])
        bounds.append((q0, q1, e0, e1))
        offsets.append((rowptr64[q0 : q1 + 1] - e0).to(col.dtype))
    inv_deg = 1.0 / (rowptr64[1:] - rowptr64[:-1]).clamp(min=1).to(torch.float32)
    return ChunkPlan(tuple(bounds), tuple(offsets), inv_deg)


def chunk_plan(rowptr: Tensor, col: Tensor, num_src: int) -> ChunkPlan:
    """The chunk plan of ``(rowptr, col)``, built once per CSR tensor pair and cached."""
    chunk_edges = CHUNK_EDGES

    def build() -> tuple[ChunkPlan]:
        return (_build_plan(rowptr, col, chunk_edges),)

    plan: ChunkPlan = cached_per_csr(f"chunks{chunk_edges}", rowptr, col, num_src, build)[0]
    return plan


def _tiles(num_features: int, elem_bytes: int) -> list[tuple[int, int]]:
    width = max(1, TILE_BYTES // elem_bytes)
    return [(c0, min(c0 + width, num_features)) for c0 in range(0, num_features, width)]


def gather_sum(
    table_RF: Tensor,
    rowptr: Tensor,
    col: Tensor,
    *,
    in_scale_R: Tensor | None = None,
    out_scale: bool = False,
) -> Tensor:
    """``out[q] = out_s[q] * sum(in_s[col[e]] * table[col[e]] for e in row q)`` over a CSR.

    Args:
        table_RF: ``[R, F]`` fp32 rows to gather (any strides).
        rowptr: ``[Q + 1]`` CSR row pointer of the output rows.
        col: ``[E]`` int32/int64 table row of every edge.
        in_scale_R: optional ``[R]`` per-table-row factor, applied while staging.
        out_scale: multiply every output row by ``1 / max(deg, 1)`` (mean).

    Returns:
        ``[Q, F]`` in ``table_RF.dtype``; rows without edges are 0.
    """
    num_rows, num_f = table_RF.shape
    col = col.contiguous()  # chunks are slices of col
    plan = chunk_plan(rowptr, col, int(num_rows))
    out_QF = thp_empty((int(rowptr.shape[0]) - 1, int(num_f)), table_RF.dtype)
    staged = _staging(num_rows * num_f, table_RF.dtype)
    for c0, c1 in _tiles(int(num_f), table_RF.element_size()):
        tile_RW = staged[num_rows * c0 : num_rows * c1].view(num_rows, c1 - c0)
        if in_scale_R is None:
            tile_RW.copy_(table_RF[:, c0:c1])
        else:
            torch.mul(table_RF[:, c0:c1], in_scale_R[:, None], out=tile_RW)

        def bag(col_e: Tensor, offsets: Tensor, tile_RW: Tensor = tile_RW) -> Tensor:
            return torch.embedding_bag(tile_RW, col_e, offsets, False, 0, False, None, True)[0]

        run_chunks(plan, col, out_QF[:, c0:c1], bag, out_scale=out_scale)
    return out_QF


def run_chunks(
    plan: ChunkPlan,
    col: Tensor,
    out_QW: Tensor,
    bag: Callable[[Tensor, Tensor], Tensor],
    *,
    out_scale: bool,
) -> None:
    """Fill ``out_QW`` chunk by chunk: ``out[q0:q1] = bag(col[e0:e1], offsets) (* 1/deg)``.

    Args:
        plan: ``chunk_plan`` of the CSR.
        col: ``[E]`` contiguous edge columns.
        out_QW: ``[Q, W]`` destination (a column slice of the output is fine).
        bag: sums the rows of one chunk: ``(col_e, offsets [q1 - q0 + 1]) -> [q1 - q0, W]``.
        out_scale: multiply by ``1 / max(deg, 1)`` in the same copy (mean).
    """
    for (q0, q1, e0, e1), offsets in zip(plan.bounds, plan.offsets, strict=True):
        part = bag(col[e0:e1], offsets)
        if out_scale:
            torch.mul(part, plan.inv_deg[q0:q1, None], out=out_QW[q0:q1])
        else:
            out_QW[q0:q1] = part
