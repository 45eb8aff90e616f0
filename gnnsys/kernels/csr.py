"""Input checks, dequantization and the cached transposed CSR shared by every backend.

Shape legend: ``N`` source rows (rows of ``x``), ``M`` destination rows (``len(rowptr) - 1``),
``E`` edges, ``F`` feature dim, ``Fp`` packed bytes per int4 row (``ceil(F / 2)``).

Quantized layouts (agreed with the cache codecs):

- int8: ``x`` is ``torch.int8 [N, F]``; ``scale`` and ``zero`` are ``[N]`` (fp16);
  ``dequant(q) = (q.float() - zero.float()) * scale.float()``.
- int4: ``x`` is ``torch.uint8 [N, Fp]``, two values per byte, the low nibble holds the even
  column; values are ``0..15``; same ``scale``/``zero`` and dequant; ``num_features=F`` is required.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = [
    "REDUCES",
    "AggInputs",
    "check_index_range",
    "check_inputs",
    "dequantize",
    "dst_of_edges",
    "edge_mean_weights",
    "transpose_csr",
    "transpose_mean_weights",
    "unpack_int4",
]

REDUCES = ("sum", "mean", "max")
_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
_INDEX_DTYPES = (torch.int32, torch.int64)


@dataclass(frozen=True, slots=True, eq=False)
class AggInputs:
    """Validated arguments of one ``aggregate`` call.

    Attributes:
        x: ``[N, F]`` float, ``[N, F]`` int8 or ``[N, Fp]`` uint8 (int4) rows.
        rowptr: ``[M + 1]`` int32/int64 CSR row pointer over destinations.
        col: ``[E]`` int32/int64 source row of every edge.
        reduce: ``"sum"``, ``"mean"`` or ``"max"``.
        scale: ``[N]`` per-row scale for quantized ``x``, else ``None``.
        zero: ``[N]`` per-row zero point for quantized ``x``, else ``None``.
        num_features: ``F``.
        quant: ``""`` (float rows), ``"int8"`` or ``"int4"``.
    """

    x: Tensor
    rowptr: Tensor
    col: Tensor
    reduce: str
    scale: Tensor | None
    zero: Tensor | None
    num_features: int
    quant: str

    @property
    def num_dst(self) -> int:
        """``M``."""
        return int(self.rowptr.shape[0]) - 1

    @property
    def out_dtype(self) -> torch.dtype:
        """``x.dtype`` for float rows, float32 for quantized rows."""
        return torch.float32 if self.quant else self.x.dtype


def _check_quant(
    x: Tensor, scale: Tensor | None, zero: Tensor | None, num_features: int | None
) -> tuple[str, int]:
    """Return ``(quant, F)`` after checking the quantized-layout arguments."""
    if x.dtype in _FLOAT_DTYPES:
        if scale is not None or zero is not None:
            raise ValueError(f"scale/zero given for {x.dtype} x; pass them only with int8/int4 x")
        return "", int(x.shape[1])
    if x.dtype not in (torch.int8, torch.uint8):
        raise TypeError(
            f"x has dtype {x.dtype}; use float32/float16/bfloat16, int8 (+scale, zero) or "
            "uint8-packed int4 (+scale, zero, num_features)"
        )
    if scale is None or zero is None:
        raise ValueError(f"{x.dtype} x needs per-row scale and zero ([N] fp16); got None")
    for name, t in (("scale", scale), ("zero", zero)):
        if t.shape != (x.shape[0],) or not t.is_floating_point():
            raise ValueError(
                f"{name} has shape {tuple(t.shape)} {t.dtype}; expected ({x.shape[0]},) float"
            )
    if x.dtype == torch.int8:
        if num_features is not None and num_features != x.shape[1]:
            raise ValueError(f"num_features={num_features} but int8 x has {x.shape[1]} columns")
        return "int8", int(x.shape[1])
    if num_features is None or (num_features + 1) // 2 != x.shape[1]:
        raise ValueError(
            f"uint8 (int4-packed) x with {x.shape[1]} bytes per row needs num_features F with "
            f"ceil(F / 2) == {x.shape[1]}; got num_features={num_features}"
        )
    return "int4", num_features


def check_inputs(
    x: Tensor,
    rowptr: Tensor,
    col: Tensor,
    reduce: str,
    scale: Tensor | None,
    zero: Tensor | None,
    num_features: int | None,
) -> AggInputs:
    """Validate shapes and dtypes (no pass over the data, so no GPU sync) and pack them.

    Raises:
        ValueError: Bad reduce, shapes, or missing/extra quantization arguments.
        TypeError: Unsupported dtypes.
    """
    if reduce not in REDUCES:
        raise ValueError(f"reduce={reduce!r}; choose one of {REDUCES}")
    if x.dim() != 2:
        raise ValueError(f"x has shape {tuple(x.shape)}; expected [N, F]")
    if rowptr.dim() != 1 or rowptr.shape[0] < 1 or col.dim() != 1:
        raise ValueError(
            f"rowptr {tuple(rowptr.shape)} / col {tuple(col.shape)}: expected [M + 1] and [E]"
        )
    if rowptr.dtype not in _INDEX_DTYPES or col.dtype not in _INDEX_DTYPES:
        raise TypeError(f"rowptr/col have dtypes {rowptr.dtype}/{col.dtype}; use int32 or int64")
    if rowptr.device != x.device or col.device != x.device:
        raise ValueError(
            f"x on {x.device}, rowptr on {rowptr.device}, col on {col.device}; move them together"
        )
    quant, num_f = _check_quant(x, scale, zero, num_features)
    return AggInputs(x, rowptr, col, reduce, scale, zero, num_f, quant)


def check_index_range(inputs: AggInputs) -> None:
    """Check ``rowptr`` and ``col`` values (a pass over ``E``; ``.item()`` syncs a GPU).

    Used before kernels that do no bounds checking (the Triton interpreter segfaults on a wild
    index); the torch paths get the same check from ``embedding_bag``/``index_select``.
    """
    rowptr, col = inputs.rowptr, inputs.col
    num_edges = int(col.shape[0])
    if int(rowptr[0]) != 0 or int(rowptr[-1]) != num_edges:
        raise ValueError(
            f"rowptr must run from 0 to len(col)={num_edges}; "
            f"got {int(rowptr[0])}..{int(rowptr[-1])}"
        )
    if rowptr.shape[0] > 1 and bool((rowptr[1:] < rowptr[:-1]).any()):
        raise ValueError("rowptr must be non-decreasing (a valid CSR row pointer)")
    n = int(inputs.x.shape[0])
    if num_edges and (int(col.min()) < 0 or int(col.max()) >= n):
        raise ValueError(f"col has ids in [{int(col.min())}, {int(col.max())}] but x has {n} rows")


def unpack_int4(packed: Tensor, num_features: int) -> Tensor:
    """``[N, Fp]`` uint8 -> ``[N, F]`` uint8 values ``0..15`` (low nibble = even column)."""
    low = packed & 0x0F
    high = packed >> 4
    return torch.stack([low, high], dim=2).reshape(packed.shape[0], -1)[:, :num_features]


def dequantize(inputs: AggInputs, dtype: torch.dtype = torch.float32) -> Tensor:
    """Float rows ``[N, F]``: ``(q - zero) * scale`` for quantized ``x``, a cast otherwise."""
    x = inputs.x
    if not inputs.quant:
        return x.to(dtype)
    assert inputs.scale is not None and inputs.zero is not None  # checked in check_inputs
    q = unpack_int4(x, inputs.num_features) if inputs.quant == "int4" else x
    zero = inputs.zero.to(dtype)[:, None]
    return (q.to(dtype) - zero) * inputs.scale.to(dtype)[:, None]


def dst_of_edges(rowptr: Tensor) -> Tensor:
    """``[E]`` int64 destination row of every edge (``repeat_interleave``; one ``E`` array)."""
    num_dst = int(rowptr.shape[0]) - 1
    deg = (rowptr[1:] - rowptr[:-1]).long()
    return torch.repeat_interleave(torch.arange(num_dst, device=rowptr.device), deg)


def _build_transpose(rowptr: Tensor, col: Tensor, num_src: int) -> tuple[Tensor, Tensor]:
    # Stable sort keeps each source's destinations ascending; O(E log E) once per graph.
    perm = torch.argsort(col, stable=True)
    col_t = dst_of_edges(rowptr)[perm].to(col.dtype)
    counts = torch.bincount(col.long(), minlength=num_src)
    rowptr_t = torch.zeros(num_src + 1, dtype=torch.int64, device=col.device)
    torch.cumsum(counts, dim=0, out=rowptr_t[1:])
    return rowptr_t, col_t


_CacheEntry = tuple["weakref.ref[Tensor]", "weakref.ref[Tensor]", int, int, tuple[Tensor, ...]]
_CSR_CACHE: dict[tuple[str, int, int, int], _CacheEntry] = {}
_CSR_CACHE_SIZE = 16
_CSR_LOCK = threading.Lock()  # trainer threads of the in-process executor share the cache


def _cached(
    kind: str,
    rowptr: Tensor,
    col: Tensor,
    num_src: int,
    build: Callable[[], tuple[Tensor, ...]],
) -> tuple[Tensor, ...]:
    """Memoise ``build()`` per ``(kind, rowptr, col)`` tensor objects.

    Entries hold the tensors by weak reference and are checked against their version counters,
    so a freed or modified-in-place CSR never returns a stale result.
    """
    key = (kind, id(rowptr), id(col), num_src)
    hit = _CSR_CACHE.get(key)
    versions = (rowptr._version, col._version)
    if hit is not None and hit[0]() is rowptr and hit[1]() is col and hit[2:4] == versions:
        return hit[4]
    value = build()
    with _CSR_LOCK:
        for stale in [k for k, v in _CSR_CACHE.items() if v[0]() is None or v[1]() is None]:
            del _CSR_CACHE[stale]
        while len(_CSR_CACHE) >= _CSR_CACHE_SIZE:
            del _CSR_CACHE[next(iter(_CSR_CACHE))]
        _CSR_CACHE[key] = (weakref.ref(rowptr), weakref.ref(col), *versions, value)
    return value


def transpose_csr(rowptr: Tensor, col: Tensor, num_src: int) -> tuple[Tensor, Tensor]:
    """CSR of the transposed adjacency: for every source row, the destinations it feeds.

    Cached per ``(rowptr, col)`` tensor object, so a full-graph block pays the sort once; a
    fresh sampled block pays it on every backward pass.

    Args:
        rowptr: ``[M + 1]`` destination CSR row pointer.
        col: ``[E]`` source row of every edge.
        num_src: ``N``.

    Returns:
        ``(rowptr_t [N + 1] int64, col_t [E] in col's dtype)``; ``col_t`` holds destination rows.
    """
    rowptr_t, col_t = _cached(
        "transpose", rowptr, col, num_src, lambda: _build_transpose(rowptr, col, num_src)
    )
    return rowptr_t, col_t


def transpose_mean_weights(rowptr: Tensor, col: Tensor, num_src: int) -> Tensor:
    """``[E]`` fp32 ``1 / max(deg, 1)`` of each transposed edge's destination (mean backward).

    Cached like ``transpose_csr``: the mean backward then needs no ``[M, F]`` division pass.
    """

    def build() -> tuple[Tensor, ...]:
        _, col_t = transpose_csr(rowptr, col, num_src)
        inv_deg_M = 1.0 / (rowptr[1:] - rowptr[:-1]).clamp(min=1).to(torch.float32)
        return (inv_deg_M.index_select(0, col_t.long()),)

    return _cached("mean_weights", rowptr, col, num_src, build)[0]


def edge_mean_weights(rowptr: Tensor, col: Tensor, num_src: int) -> Tensor:
    """``[E]`` fp32 ``1 / max(deg, 1)`` of each edge's destination (mean forward).

    Cached like ``transpose_csr``: the mean forward passes them to ``embedding_bag`` as
    per-sample weights (reading ``E * 4`` bytes) instead of a division pass over ``[M, F]``.
    """

    def build() -> tuple[Tensor, ...]:
        deg_M = rowptr[1:] - rowptr[:-1]
        inv_deg_M = 1.0 / deg_M.clamp(min=1).to(torch.float32)
        return (torch.repeat_interleave(inv_deg_M, deg_M.long(), output_size=int(col.shape[0])),)

    return _cached("edge_mean_weights", rowptr, col, num_src, build)[0]
