"""Fast torch path (the CPU default): fused gather-reduce with ``embedding_bag``, custom backward.

Shape legend: ``N`` source rows, ``M`` destination rows, ``E`` edges, ``F`` feature dim.

Why these ops (measured on the 2-core CI box, see docs/kernels.md and benchmarks/kernels.py):

- Forward: ``torch.embedding_bag(x, col, rowptr, mode=sum|max)`` with ``include_last_offset`` reads
  each neighbour row once and never materialises the ``[E, F]`` messages (gather + ``index_add_``
  is 10-15x slower). Mean (fp32) passes cached per-edge ``1/deg`` weights (``E * 4`` bytes read)
  instead of a second pass over ``[M, F]``; other dtypes sum, then divide in place.
- Backward (sum/mean): the same ``embedding_bag`` over the *transposed* CSR (cached per graph in
  ``csr.transpose_csr``; mean adds cached per-edge ``1/deg`` weights). Autograd through
  ``embedding_bag`` or ``torch.sparse.mm`` instead scatters per edge or rebuilds the transpose
  every step (2-3x slower).
- Backward (max): the forward's per-element argmax row, scattered with ``scatter_add_``.
- int8 rows: FBGEMM's ``quantized.embedding_bag_byte_rowwise_offsets`` reads the ``F`` bytes of a
  row plus an inline fp32 scale/bias. Our layout keeps scale/zero apart, so each call repacks
  the table into a reused workspace (one pass over ``N`` rows, cheap next to the ``E`` gathered
  rows). The FBGEMM output never aliases the workspace. int4 rows are
  unpacked to bytes first. Mean passes the cached per-edge ``1/deg`` weights (FBGEMM ignores
  the mean mode for byte rows). Quantized rows carry no gradient.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, cast

import torch
from torch import Tensor

from gnnsys.kernels.csr import (
    AggInputs,
    dequantize,
    edge_mean_weights,
    transpose_csr,
    transpose_mean_weights,
    unpack_int4,
)

__all__ = ["aggregate_torch", "pack_int8_rowwise"]

_MODE_SUM, _MODE_MAX = 0, 2


def _bag(
    x_NF: Tensor, col: Tensor, rowptr: Tensor, mode: int, weights: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """``embedding_bag`` over a CSR: returns ``(out [M, F], max_row [M, F])`` (mode max only)."""
    offsets = rowptr.to(col.dtype)
    out = torch.embedding_bag(x_NF, col, offsets, False, mode, False, weights, True)
    return out[0], out[3]


def _degree(rowptr: Tensor) -> Tensor:
    return rowptr[1:] - rowptr[:-1]


class _SumMean(torch.autograd.Function):
    """Sum/mean over a CSR; backward gathers ``grad`` over the cached transposed CSR."""

    @staticmethod
    def forward(ctx: Any, x_NF: Tensor, rowptr: Tensor, col: Tensor, mean: bool) -> Tensor:
        if mean and x_NF.dtype == torch.float32:
            # Cached per-edge 1/deg weights (E * 4 bytes) instead of an [M, F] division pass.
            weights = edge_mean_weights(rowptr, col, x_NF.shape[0])
            out_MF, _ = _bag(x_NF.contiguous(), col, rowptr, _MODE_SUM, weights)
        else:
            out_MF, _ = _bag(x_NF.contiguous(), col, rowptr, _MODE_SUM)
            if mean:
                out_MF.div_(_degree(rowptr).clamp(min=1).to(out_MF.dtype)[:, None])
        # Plain attributes, not save_for_backward: the transpose cache is keyed on these objects.
        ctx.rowptr, ctx.col, ctx.mean, ctx.num_src = rowptr, col, mean, x_NF.shape[0]
        return out_MF

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_MF: Tensor) -> tuple[Tensor | None, None, None, None]:
        if not ctx.needs_input_grad[0]:
            return None, None, None, None
        rowptr_t, col_t = transpose_csr(ctx.rowptr, ctx.col, ctx.num_src)
        weights = None
        if ctx.mean:
            # Per-edge 1/deg weights (cached) instead of an [M, F] division pass: ~10% faster.
            weights = transpose_mean_weights(ctx.rowptr, ctx.col, ctx.num_src)
            if grad_MF.dtype == torch.float64:  # fp32 weights would cost fp64 its precision
                inv_deg_M = 1.0 / _degree(ctx.rowptr).clamp(min=1).to(torch.float64)
                weights = inv_deg_M.index_select(0, col_t.long())
            weights = weights.to(grad_MF.dtype)
        grad_NF, _ = _bag(grad_MF.contiguous(), col_t, rowptr_t, _MODE_SUM, weights)
        return grad_NF, None, None, None


class _Max(torch.autograd.Function):
    """Max over a CSR; backward routes each output element's gradient to its argmax row."""

    @staticmethod
    def forward(ctx: Any, x_NF: Tensor, rowptr: Tensor, col: Tensor) -> Tensor:
        out_MF, max_row_MF = _bag(x_NF.contiguous(), col, rowptr, _MODE_MAX)
        ctx.save_for_backward(max_row_MF, _degree(rowptr) > 0)
        ctx.num_src = x_NF.shape[0]
        return out_MF

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_MF: Tensor) -> tuple[Tensor | None, None, None]:
        if not ctx.needs_input_grad[0]:
            return None, None, None
        max_row_MF, nonempty_M = ctx.saved_tensors
        # embedding_bag reports row 0 for empty bags; their gradient must go nowhere.
        grad_MF = grad_MF * nonempty_M[:, None].to(grad_MF.dtype)
        grad_NF = grad_MF.new_zeros((ctx.num_src, grad_MF.shape[1]))
        grad_NF.scatter_add_(0, max_row_MF.long(), grad_MF)
        return grad_NF, None, None


_WORKSPACE = threading.local()  # per thread: concurrent callers never share a buffer


def _workspace(nbytes: int, device: torch.device) -> Tensor:
    """A reused uint8 buffer of ``nbytes`` for the FBGEMM repack.

    A fresh ``[N, F + 8]`` allocation spends most of the repack in page faults (0.11 s of 0.14 s at
    1 M rows, F = 128); the buffer grows to the largest table seen and stays (one per thread).
    """
    buf: Tensor | None = getattr(_WORKSPACE, "buf", None)
    if buf is None or buf.numel() < nbytes or buf.device != device:
        buf = torch.empty(nbytes, dtype=torch.uint8, device=device)
        _WORKSPACE.buf = buf
    return buf[:nbytes]


def _pack_bytes(u_NF: Tensor, scale_N: Tensor, bias_N: Tensor, flip: bool) -> Tensor:
    """FBGEMM rowwise layout ``[N, F + 8]`` uint8: ``u`` (``^ 0x80`` if flip), fp32 scale, bias.

    One pass over ``u``, written straight into the packed rows.
    """
    n, f = u_NF.shape
    packed = _workspace(n * (f + 8), u_NF.device).view(n, f + 8)
    if flip:
        torch.bitwise_xor(u_NF, 0x80, out=packed[:, :f])
    else:
        packed[:, :f] = u_NF
    meta = torch.stack([scale_N.float(), bias_N.float()], dim=1)  # [N, 2] fp32
    packed[:, f:] = meta.view(torch.uint8)
    return packed


def pack_int8_rowwise(q_NF: Tensor, scale_N: Tensor, zero_N: Tensor) -> Tensor:
    """Repack our int8 layout into FBGEMM's rowwise byte layout ``[N, F + 8]`` uint8.

    FBGEMM computes ``u * scale + bias`` with ``u = q + 128``; ``bias = -(128 + zero) * scale``
    makes that equal ``(q - zero) * scale``.
    """
    scale32 = scale_N.float()
    u_NF = q_NF.contiguous().view(torch.uint8)  # ^ 0x80 maps int8 q to q + 128, bit for bit
    return _pack_bytes(u_NF, scale32, -(zero_N.float() + 128.0) * scale32, flip=True)


def _aggregate_quantized(inputs: AggInputs) -> Tensor:
    """int8/int4 rows: fused FBGEMM dequant-sum on CPU; dequantize-then-bag elsewhere or for max."""
    fused = inputs.x.device.type == "cpu" and inputs.reduce != "max"
    if not fused:
        values_NF = dequantize(inputs)
        return _aggregate_float(values_NF, inputs.rowptr, inputs.col, inputs.reduce)
    assert inputs.scale is not None and inputs.zero is not None  # checked in check_inputs
    if inputs.quant == "int4":
        scale32 = inputs.scale.float()
        u_NF = unpack_int4(inputs.x, inputs.num_features).contiguous()
        packed = _pack_bytes(u_NF, scale32, -inputs.zero.float() * scale32, flip=False)
    else:
        packed = pack_int8_rowwise(inputs.x, inputs.scale, inputs.zero)
    col, rowptr = inputs.col, inputs.rowptr.to(inputs.col.dtype)
    weights = None  # mean: cached per-edge 1/deg, no [M, F] division pass
    if inputs.reduce == "mean":
        weights = edge_mean_weights(inputs.rowptr, inputs.col, int(inputs.x.shape[0]))
    op = torch.ops.quantized.embedding_bag_byte_rowwise_offsets
    out_MF: Tensor = op(packed, col, rowptr, False, 0, False, weights, None, True)
    return out_MF


def _aggregate_float(x_NF: Tensor, rowptr: Tensor, col: Tensor, reduce: str) -> Tensor:
    if reduce == "max":
        return cast(Callable[..., Tensor], _Max.apply)(x_NF, rowptr, col)
    return cast(Callable[..., Tensor], _SumMean.apply)(x_NF, rowptr, col, reduce == "mean")


def aggregate_torch(inputs: AggInputs) -> Tensor:
    """Aggregate validated inputs with the fused torch ops (any device ``embedding_bag`` runs on).

    Args:
        inputs: Output of ``gnnsys.kernels.csr.check_inputs``.

    Returns:
        ``[M, F]`` in ``inputs.out_dtype``; differentiable with respect to float ``x``.
    """
    if inputs.quant:
        return _aggregate_quantized(inputs)
    return _aggregate_float(inputs.x, inputs.rowptr, inputs.col, inputs.reduce)
