"""``int8``: per-row affine 8-bit quantization, plus the affine quantizer ``int4`` shares.

Math (per row ``r``, levels ``[qmin, qmax]``; int8: ``[-128, 127]``, int4: ``[0, 15]``)::

    step_r  = roundup_fp16(max(range_r / (qmax - qmin), maxabs_r / ZERO_LIMIT, 2**-24))
    zero_r  = fp16(qmin - min_r / step_r)
    q       = clamp(round(x / step_r + zero_r), qmin, qmax)     # or floor(v + U[0,1)) stochastic
    x'      = (q.float() - zero_r.float()) * step_r.float()      # the fused kernel's dequant

Why the step is rounded *up* to fp16: the row then spans at most ``qmax - qmin`` levels, so no
value clamps by more than half a step. Why ``maxabs / ZERO_LIMIT``: the zero point is stored in
fp16, which is exact to within 0.5 only below 2048; bounding ``|zero| <= 128 + ZERO_LIMIT`` keeps
its rounding inside half a level. Consequence: ``|x - x'| <= step_r / 2`` (round to nearest), and
``step_r ~= range_r / (qmax - qmin)`` whenever ``maxabs_r < 7.4 * range_r`` (rows that are not
a tiny spread around a large offset). Stochastic rounding is unbiased with error < one step.

Shape legend: ``N`` rows, ``F`` feature dim.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from gnnsys.cache.codecs.base import EncodedRows, check_features

__all__ = ["ZERO_LIMIT", "AffineRows", "Int8Codec", "affine_dequantize", "affine_quantize"]

ZERO_LIMIT = 1900.0
"""Largest ``maxabs / step`` allowed, so ``|zero| < 2048`` and fp16 holds it within 0.5."""

_TINY_STEP = 2.0**-24  # smallest positive fp16 (subnormal)
_FP16_MAX = float(torch.finfo(torch.float16).max)


@dataclass(frozen=True, slots=True, eq=False)
class AffineRows:
    """Quantized levels before packing: ``q_NF`` int16 in ``[qmin, qmax]``, fp16 step and zero."""

    q_NF: Tensor
    scale: Tensor
    zero: Tensor


def _roundup_fp16(s: Tensor) -> Tensor:
    """Smallest fp16 >= ``s`` (``s`` > 0): cast, then bump one ulp where it rounded down."""
    h = s.to(torch.float16)
    low = h.float() < s
    bumped = (h.view(torch.int16) + 1).view(torch.float16)  # next fp16 up, for positive values
    return torch.where(low, bumped, h)


def affine_quantize(
    x_NF: Tensor, qmin: int, qmax: int, *, generator: torch.Generator | None = None
) -> AffineRows:
    """Per-row affine quantization of ``[N, F]`` rows to integer levels ``[qmin, qmax]``.

    Args:
        x_NF: Finite float rows.
        qmin: Lowest level.
        qmax: Highest level.
        generator: If given, stochastic rounding with this (seeded) generator.

    Raises:
        ValueError: A row's step overflows fp16 (``|x|`` beyond ~1.2e8 for int8).
    """
    x = x_NF.float()
    n = x.shape[0]
    if x.shape[1] == 0:
        ones = torch.ones(n, dtype=torch.float16)
        return AffineRows(torch.zeros(n, 0, dtype=torch.int16), ones, torch.zeros_like(ones))
    lo, hi = torch.aminmax(x, dim=1)  # one pass; min/max(dim=1) stall on busy 2-core hosts
    maxabs = torch.maximum(lo.abs(), hi.abs())
    step = torch.maximum((hi - lo) / (qmax - qmin), maxabs / ZERO_LIMIT).clamp_min(_TINY_STEP)
    if n and float(step.max()) > _FP16_MAX:
        raise ValueError(
            f"feature magnitude {float(maxabs.max()):.4g} overflows the fp16 step of an affine "
            "codec; normalize the features or use codec fp32/bf16"
        )
    scale = _roundup_fp16(step)
    zero = (qmin - lo / scale.float()).to(torch.float16)
    v = x / scale.float()[:, None] + zero.float()[:, None]
    if generator is None:
        q = torch.round(v)
    else:
        q = torch.floor(v + torch.rand(v.shape, generator=generator))
    q_NF = q.clamp_(qmin, qmax).to(torch.int16)
    return AffineRows(q_NF, scale, zero)


def affine_dequantize(q_NF: Tensor, scale: Tensor, zero: Tensor) -> Tensor:
    """``(q.float() - zero.float()) * scale.float()`` row-wise, as float32 ``[N, F]``."""
    return (q_NF.float() - zero.float()[:, None]) * scale.float()[:, None]


@dataclass(frozen=True, slots=True)
class Int8Codec:
    """Per-row affine int8: ``F`` bytes + 2 (fp16 step) + 2 (fp16 zero) per row.

    Attributes:
        stochastic: Stochastic instead of nearest rounding (unbiased; error < one step).
        seed: Seed of the rounding generator; the same rows encode identically for one seed.
    """

    stochastic: bool = False
    seed: int = 0
    name: str = "int8"

    @property
    def lossless(self) -> bool:
        """Lossy in general (``auto`` checks a given matrix exactly)."""
        return False

    @property
    def fused_aggregate(self) -> bool:
        """Affine rows: ``gnnsys.kernels.aggregate`` dequantizes inside the reduction."""
        return True

    @property
    def partial_sums(self) -> bool:
        """Per-row scale and zero follow each sum's own range."""
        return True

    def _generator(self) -> torch.Generator | None:
        return torch.Generator().manual_seed(self.seed) if self.stochastic else None

    def encode(self, x_NF: Tensor) -> EncodedRows:
        """Quantize ``[N, F]`` rows; ``data`` is int8 ``[N, F]``."""
        check_features(x_NF, self.name)
        rows = affine_quantize(x_NF, -128, 127, generator=self._generator())
        return EncodedRows(
            self.name, int(x_NF.shape[1]), rows.q_NF.to(torch.int8), rows.scale, rows.zero
        )

    def decode(self, enc: EncodedRows) -> Tensor:
        """Dequantize to float32 ``[N, F]``."""
        assert enc.scale is not None and enc.zero is not None, "int8 rows carry scale and zero"
        return affine_dequantize(enc.data, enc.scale, enc.zero)

    def nbytes(self, enc: EncodedRows) -> int:
        """``N * (F + 4)``."""
        return enc.nbytes

    def row_nbytes(self, num_cols: int) -> int:
        """``F + 4``."""
        return num_cols + 4

    def empty(self, num_rows: int, num_cols: int) -> EncodedRows:
        """Zeroed storage: int8 ``[num_rows, F]`` and fp16 ``[num_rows]`` step and zero."""
        return EncodedRows(
            self.name,
            num_cols,
            torch.zeros(num_rows, num_cols, dtype=torch.int8),
            torch.ones(num_rows, dtype=torch.float16),
            torch.zeros(num_rows, dtype=torch.float16),
        )
