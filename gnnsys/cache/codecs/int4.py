"""``int4``: per-row affine 4-bit quantization, two values a byte.

Levels ``0..15`` with the same dequantization as int8 (see ``int8.py`` for the math and the error
bound: ``|x - x'| <= step / 2`` with ``step ~= range / 15``). Packing: byte ``j`` of a row holds
column ``2j`` in its low nibble and column ``2j + 1`` in its high nibble; an odd ``F`` pads the
last high nibble with 0.

Shape legend: ``N`` rows, ``F`` feature dim, ``W = ceil(F / 2)`` bytes per row.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from gnnsys.cache.codecs.base import EncodedRows, check_features
from gnnsys.cache.codecs.int8 import affine_dequantize, affine_quantize

__all__ = ["Int4Codec", "pack_nibbles", "unpack_nibbles"]


def pack_nibbles(q_NF: Tensor) -> Tensor:
    """``[N, F]`` levels in ``0..15`` -> uint8 ``[N, ceil(F/2)]`` (even column = low nibble)."""
    q = q_NF.to(torch.uint8)
    if q.shape[1] % 2:
        q = torch.cat([q, torch.zeros(q.shape[0], 1, dtype=torch.uint8)], dim=1)
    return (q[:, 0::2] | (q[:, 1::2] << 4)).contiguous()


def unpack_nibbles(data_NW: Tensor, num_cols: int) -> Tensor:
    """Inverse of ``pack_nibbles``: uint8 ``[N, W]`` -> uint8 levels ``[N, num_cols]``."""
    low, high = data_NW & 0x0F, data_NW >> 4
    return torch.stack([low, high], dim=2).reshape(data_NW.shape[0], -1)[:, :num_cols]


@dataclass(frozen=True, slots=True)
class Int4Codec:
    """Per-row affine int4: ``ceil(F/2)`` bytes + 4 (fp16 step and zero) per row.

    Attributes:
        stochastic: Stochastic instead of nearest rounding (unbiased; error < one step).
        seed: Seed of the rounding generator.
    """

    stochastic: bool = False
    seed: int = 0
    name: str = "int4"

    @property
    def lossless(self) -> bool:
        """Lossy in general."""
        return False

    @property
    def fused_aggregate(self) -> bool:
        """Affine rows: ``gnnsys.kernels.aggregate`` dequantizes inside the reduction."""
        return True

    @property
    def partial_sums(self) -> bool:
        """Per-row scale and zero follow each sum's own range."""
        return True

    def encode(self, x_NF: Tensor) -> EncodedRows:
        """Quantize and pack ``[N, F]`` rows."""
        check_features(x_NF, self.name)
        gen = torch.Generator().manual_seed(self.seed) if self.stochastic else None
        rows = affine_quantize(x_NF, 0, 15, generator=gen)
        return EncodedRows(
            self.name, int(x_NF.shape[1]), pack_nibbles(rows.q_NF), rows.scale, rows.zero
        )

    def decode(self, enc: EncodedRows) -> Tensor:
        """Unpack and dequantize to float32 ``[N, F]``."""
        assert enc.scale is not None and enc.zero is not None, "int4 rows carry scale and zero"
        return affine_dequantize(unpack_nibbles(enc.data, enc.num_cols), enc.scale, enc.zero)

    def nbytes(self, enc: EncodedRows) -> int:
        """``N * (ceil(F/2) + 4)``."""
        return enc.nbytes

    def row_nbytes(self, num_cols: int) -> int:
        """``ceil(F/2) + 4``."""
        return (num_cols + 1) // 2 + 4

    def empty(self, num_rows: int, num_cols: int) -> EncodedRows:
        """Zeroed packed storage plus fp16 step and zero."""
        return EncodedRows(
            self.name,
            num_cols,
            torch.zeros(num_rows, (num_cols + 1) // 2, dtype=torch.uint8),
            torch.ones(num_rows, dtype=torch.float16),
            torch.zeros(num_rows, dtype=torch.float16),
        )
