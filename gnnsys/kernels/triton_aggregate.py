"""Fused gather + dequantize + reduce over a CSR, in Triton (Triton-tutorial layout).

Algorithm (one program per destination row ``i`` and feature tile ``t``; no atomics, so the
result is deterministic and bit-identical run to run)::

    acc[BLOCK_F] = 0 (sum/mean) or -inf (max)        # fp32 accumulator in registers
    for e0 in range(rowptr[i], rowptr[i+1], BLOCK_E):  # neighbour chunk of BLOCK_E edges
        src[BLOCK_E]      = col[e0 : e0 + BLOCK_E]
        v[BLOCK_E, BLOCK_F] = x[src, t*BLOCK_F : (t+1)*BLOCK_F]          # the gather
        if quantized: v = (v - zero[src, None]) * scale[src, None]       # fused dequant
        acc = acc + sum(v, 0)    |    acc, arg = running max / argmax source row
    out[i, tile] = acc / max(deg, 1) (mean) | acc | (acc if deg > 0 else 0) (max)

Bytes per edge at F = 128: fp32 516, fp16/bf16 260, int8 + fp16 scale/zero 136 (3.8x less), int4
72. At about 2 FLOP/B the loop stays memory-bound even with dequant, so dequant is free on GPU.

Backward (``torch.autograd.Function``): for sum/mean the same kernel runs over the transposed CSR
(cached per graph) on ``grad`` (pre-divided by the degree for mean); for max the forward's argmax
source rows receive ``grad`` through ``scatter_add_`` (atomic on GPU, so not bit-deterministic).

Shape legend: ``N`` source rows, ``M`` destination rows, ``E`` edges, ``F`` feature dim,
``Fp = ceil(F / 2)`` packed int4 bytes per row.

Interpreter (``TRITON_INTERPRET=1``, read by ``triton.jit`` when this module is imported): the
kernels run on CPU tensors, one program after another; autotuning with more than one config needs
a GPU driver, so a single large-tile config is used there.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, cast

import torch
import triton
import triton.language as tl
from torch import Tensor

from gnnsys.kernels.csr import AggInputs, check_index_range, transpose_csr

__all__ = ["aggregate_triton"]

_REDUCE_CODE = {"sum": 0, "mean": 1, "max": 2}
_QUANT_CODE = {"": 0, "int8": 1, "int4": 2}
_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"  # what triton.jit sees right now


def _autotune_configs() -> list[triton.Config]:
    """Tile shapes to try (one in the interpreter, which cannot benchmark; see ``_launch``)."""
    if _INTERPRET:
        return [triton.Config({"BLOCK_E": 32, "BLOCK_F": 256}, num_warps=4)]
    # Four configs: each (F, reduce, quant, dtypes) key compiles and times every one of them.
    shapes = ((16, 64, 2), (32, 64, 4), (16, 128, 4), (32, 128, 4))
    return [
        triton.Config({"BLOCK_E": be, "BLOCK_F": bf}, num_warps=w, num_stages=2)
        for be, bf, w in shapes
    ]


# triton ships no type information; kernel arguments are typed by triton's JIT, not Python.
@triton.autotune(configs=_autotune_configs(), key=["F", "REDUCE", "QUANT"])  # type: ignore[untyped-decorator]
@triton.jit  # type: ignore[untyped-decorator]
def _csr_aggregate_kernel(  # type: ignore[no-untyped-def]
    # pointers
    x_ptr,  # [N, F] float / int8, or [N, Fp] uint8 (int4)
    scale_ptr,  # [N] per-row scale (quantized only)
    zero_ptr,  # [N] per-row zero point (quantized only)
    rowptr_ptr,  # [M + 1]
    col_ptr,  # [E]
    out_ptr,  # [M, F]
    arg_ptr,  # [M, F] int64 argmax source row (max only)
    # sizes and strides (in elements)
    F,
    stride_x,
    stride_out,
    # meta-parameters
    REDUCE: tl.constexpr,  # 0 sum, 1 mean, 2 max
    QUANT: tl.constexpr,  # 0 float rows, 1 int8, 2 int4
    BLOCK_E: tl.constexpr,
    BLOCK_F: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    f = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
    f_mask = f < F
    start = tl.load(rowptr_ptr + row).to(tl.int64)
    end = tl.load(rowptr_ptr + row + 1).to(tl.int64)
    if REDUCE == 2:
        acc = tl.full([BLOCK_F], float("-inf"), dtype=tl.float32)
    else:
        acc = tl.zeros([BLOCK_F], dtype=tl.float32)
    arg = tl.full([BLOCK_F], -1, dtype=tl.int64)
    for e0 in range(start, end, BLOCK_E):
        e = e0 + tl.arange(0, BLOCK_E)
        e_mask = e < end
        src = tl.load(col_ptr + e, mask=e_mask, other=0).to(tl.int64)
        mask = e_mask[:, None] & f_mask[None, :]
        if QUANT == 2:
            packed = tl.load(
                x_ptr + src[:, None] * stride_x + (f // 2)[None, :], mask=mask, other=0
            )
            v = ((packed >> ((f % 2) * 4).to(tl.uint8)[None, :]) & 0xF).to(tl.float32)
        else:
            v = tl.load(x_ptr + src[:, None] * stride_x + f[None, :], mask=mask, other=0)
            v = v.to(tl.float32)
        if QUANT != 0:
            scale = tl.load(scale_ptr + src, mask=e_mask, other=0).to(tl.float32)
            zero = tl.load(zero_ptr + src, mask=e_mask, other=0).to(tl.float32)
            v = (v - zero[:, None]) * scale[:, None]
        if REDUCE == 2:
            v = tl.where(mask, v, float("-inf"))
            tile_max = tl.max(v, axis=0)
            is_max = (v == tile_max[None, :]) & mask
            tile_arg = tl.min(tl.where(is_max, src[:, None], 2**62), axis=0)
            better = tile_max > acc
            acc = tl.where(better, tile_max, acc)
            arg = tl.where(better, tile_arg, arg)
        else:
            acc += tl.sum(tl.where(mask, v, 0.0), axis=0)
    if REDUCE == 1:
        acc = acc / tl.maximum(end - start, 1).to(tl.float32)
    if REDUCE == 2:
        acc = tl.where(arg >= 0, acc, 0.0)
        tl.store(arg_ptr + row * stride_out + f, arg, mask=f_mask)
    tl.store(out_ptr + row * stride_out + f, acc.to(out_ptr.dtype.element_ty), mask=f_mask)


def _launch(inputs: AggInputs, x: Tensor) -> tuple[Tensor, Tensor | None]:
    """Allocate and launch (inputs are checked by the caller)."""
    num_dst, num_f, quant, reduce = inputs.num_dst, inputs.num_features, inputs.quant, inputs.reduce
    out_dtype = torch.float32 if quant else x.dtype
    out = torch.empty((num_dst, num_f), dtype=out_dtype, device=x.device)
    arg = (
        torch.empty((num_dst, num_f), dtype=torch.int64, device=x.device)
        if reduce == "max"
        else out
    )
    if num_dst == 0 or num_f == 0:
        return out, (arg if reduce == "max" else None)
    x = x.contiguous()
    scale = inputs.scale.contiguous() if quant and inputs.scale is not None else x
    zero = inputs.zero.contiguous() if quant and inputs.zero is not None else x

    def grid(meta: dict[str, Any]) -> tuple[int, int]:
        return (num_dst, triton.cdiv(num_f, meta["BLOCK_F"]))

    kernel: Any = _csr_aggregate_kernel
    tiles: dict[str, int] = {}
    if _INTERPRET:
        # Bypass the autotuner (it needs a driver) and size the feature tile to F: every
        # interpreted tl op costs time in proportion to the tile.
        kernel = _csr_aggregate_kernel.fn
        tiles = {"BLOCK_E": 32, "BLOCK_F": min(256, max(16, triton.next_power_of_2(num_f)))}
    kernel[grid](
        x, scale, zero, inputs.rowptr.contiguous(), inputs.col.contiguous(), out, arg,
        num_f, x.stride(0), out.stride(0),
        REDUCE=_REDUCE_CODE[reduce], QUANT=_QUANT_CODE[quant], **tiles,
    )  # fmt: skip
    return out, (arg if reduce == "max" else None)


class _TritonAggregate(torch.autograd.Function):
    """Triton forward; sum/mean backward reruns the kernel on the transposed CSR."""

    @staticmethod
    def forward(ctx: Any, x_NF: Tensor, inputs: AggInputs) -> Tensor:
        out_MF, arg_MF = _launch(inputs, x_NF)
        ctx.inputs = inputs
        if arg_MF is not None:
            ctx.save_for_backward(arg_MF)
        return out_MF

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_MF: Tensor) -> tuple[Tensor | None, None]:
        inputs: AggInputs = ctx.inputs
        if not ctx.needs_input_grad[0]:
            return None, None
        num_src = int(inputs.x.shape[0])
        if inputs.reduce == "max":
            (arg_MF,) = ctx.saved_tensors
            grad_MF = torch.where(arg_MF >= 0, grad_MF, torch.zeros_like(grad_MF))
            grad_NF = grad_MF.new_zeros((num_src, inputs.num_features))
            return grad_NF.scatter_add_(0, arg_MF.clamp(min=0), grad_MF), None
        rowptr_t, col_t = transpose_csr(inputs.rowptr, inputs.col, num_src)
        if inputs.reduce == "mean":
            deg_M = (inputs.rowptr[1:] - inputs.rowptr[:-1]).clamp(min=1)
            grad_MF = grad_MF / deg_M.to(grad_MF.dtype)[:, None]
        grad_t = AggInputs(grad_MF, rowptr_t, col_t, "sum", None, None, inputs.num_features, "")
        grad_NF, _ = _launch(grad_t, grad_MF)
        return grad_NF.to(inputs.x.dtype), None


def aggregate_triton(inputs: AggInputs) -> Tensor:
    """Aggregate validated inputs with the Triton kernel (CUDA, or CPU under the interpreter).

    Args:
        inputs: Output of ``gnnsys.kernels.csr.check_inputs``.

    Returns:
        ``[M, F]`` in ``inputs.out_dtype``; differentiable with respect to float ``x``.

    Raises:
        ValueError: CPU tensors without ``TRITON_INTERPRET=1``, or out-of-range indices on CPU.
        TypeError: float64 ``x`` (the kernel accumulates in fp32; use the torch backend).
    """
    if inputs.x.device.type == "cpu":
        if not _INTERPRET:
            raise ValueError(
                "the triton backend got CPU tensors; move them to CUDA, or set TRITON_INTERPRET=1 "
                "before gnnsys.kernels.triton_aggregate is imported, or use GNNSYS_KERNEL=torch"
            )
        check_index_range(inputs)  # the interpreter has no bounds checks: a wild index segfaults
    if inputs.x.dtype == torch.float64:
        raise TypeError("the triton backend accumulates in fp32; use float32 x or backend 'torch'")
    apply = cast(Callable[[Tensor, AggInputs], Tensor], _TritonAggregate.apply)
    return apply(inputs.x, inputs)
