"""Stage 7, kernels: ``aggregate`` over a CSR, with one backend chosen once and a test override.

Backends (``BACKENDS``): ``reference`` (the pure-torch spec), ``torch`` (fused ``embedding_bag``
with a cached transposed-CSR backward: the measured-fastest CPU path) and ``triton`` (the fused
gather-dequant-reduce kernel). Default: ``triton`` for CUDA tensors when triton is installed,
``torch`` otherwise. ``GNNSYS_KERNEL=reference|torch|triton`` (read once, on the first call)
forces one for debugging; ``use_backend(name)`` overrides both inside a ``with`` block.

Importing this package imports neither triton nor torch_geometric: ``triton_aggregate`` is
loaded on first use, and the PyG ``Aggregation`` classes are resolved lazily by name.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from torch import Tensor

from gnnsys.kernels.csr import AggInputs, check_inputs, transpose_csr
from gnnsys.kernels.reference import aggregate_reference
from gnnsys.kernels.torch_path import aggregate_torch

if TYPE_CHECKING:
    from gnnsys.kernels.pyg_aggregation import (
        FusedMaxAggregation,
        FusedMeanAggregation,
        FusedSumAggregation,
    )

__all__ = [
    "BACKENDS",
    "HAS_TRITON",
    "FusedMaxAggregation",
    "FusedMeanAggregation",
    "FusedSumAggregation",
    "aggregate",
    "backend_for",
    "transpose_csr",
    "use_backend",
]

HAS_TRITON: bool = importlib.util.find_spec("triton") is not None
"""Whether triton is installed (checked without importing it)."""

BACKENDS = ("reference", "torch", "triton")
_override: list[str] = []  # stack of use_backend() names, innermost last


def _triton_impl(inputs: AggInputs) -> Tensor:
    from gnnsys.kernels.triton_aggregate import aggregate_triton  # imports triton on first use

    return aggregate_triton(inputs)


_IMPLS: dict[str, Callable[[AggInputs], Tensor]] = {
    "reference": aggregate_reference,
    "torch": aggregate_torch,
    "triton": _triton_impl,
}


def _check_backend(name: str, source: str) -> str:
    if name not in BACKENDS:
        raise ValueError(f"{source}={name!r}; choose one of {BACKENDS}")
    if name == "triton" and not HAS_TRITON:
        raise ValueError(f"{source}='triton' but triton is not installed; pip install triton")
    return name


@functools.cache
def _env_backend() -> str | None:
    """``GNNSYS_KERNEL``, read once (a debugging switch, not configuration)."""
    name = os.environ.get("GNNSYS_KERNEL", "").strip()
    return _check_backend(name, "GNNSYS_KERNEL") if name else None


def backend_for(x: Tensor) -> str:
    """The backend ``aggregate`` uses for ``x``: override, then env, then device default."""
    if _override:
        return _override[-1]
    forced = _env_backend()
    if forced is not None:
        return forced
    return "triton" if x.is_cuda and HAS_TRITON else "torch"


@contextmanager
def use_backend(name: str) -> Iterator[None]:
    """Force a backend inside a ``with`` block (tests, benchmarks); nests.

    Raises:
        ValueError: Unknown name, or ``"triton"`` without triton installed.
    """
    _override.append(_check_backend(name, "backend"))
    try:
        yield
    finally:
        _override.pop()


def aggregate(
    x: Tensor,
    rowptr: Tensor,
    col: Tensor,
    reduce: str = "mean",
    *,
    scale: Tensor | None = None,
    zero: Tensor | None = None,
    num_features: int | None = None,
) -> Tensor:
    """Reduce the (dequantized) rows of ``x`` over the in-edges of every destination of a CSR.

    ``out[i] = reduce(dequant(x[col[e]]) for e in rowptr[i]:rowptr[i+1])``; empty rows give 0.

    Args:
        x: ``[N, F]`` float32/float16/bfloat16 (float64 on the reference/torch backends) rows;
            or ``[N, F]`` int8 rows; or ``[N, ceil(F/2)]`` uint8 int4-packed rows (low nibble =
            even column, values 0..15).
        rowptr: ``[M + 1]`` int32/int64 CSR row pointer over the destinations.
        col: ``[E]`` int32/int64 source row of every edge, in ``[0, N)``.
        reduce: ``"sum"``, ``"mean"`` or ``"max"``.
        scale: ``[N]`` (fp16) per-row scale; required for int8/int4 ``x``, else ``None``.
        zero: ``[N]`` (fp16) per-row zero point; ``dequant(q) = (q - zero) * scale``.
        num_features: ``F``; required for int4 ``x``.

    Returns:
        ``[M, F]`` with ``M = len(rowptr) - 1``, in ``x.dtype`` for float ``x`` (fp32
        accumulation) and float32 for quantized ``x``. Gradients flow to float ``x``.

    Raises:
        ValueError: Bad reduce, shapes, devices or quantization arguments.
        TypeError: Unsupported dtypes.
    """
    inputs = check_inputs(x, rowptr, col, reduce, scale, zero, num_features)
    return _IMPLS[backend_for(x)](inputs)


def __getattr__(name: str) -> Any:
    if name in ("FusedMeanAggregation", "FusedSumAggregation", "FusedMaxAggregation"):
        from gnnsys.kernels import pyg_aggregation  # imports torch_geometric on first use

        return getattr(pyg_aggregation, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
