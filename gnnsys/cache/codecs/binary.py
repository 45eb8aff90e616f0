"""``binary``: one bit per value, lossless for 0/1 features (bag-of-words, multi-hot).

Packing (numpy ``packbits(..., bitorder="little")`` order): bit ``b`` of byte ``j`` is column
``8j + b``; the last byte pads with zeros.

Shape legend: ``N`` rows, ``F`` feature dim, ``W = ceil(F / 8)`` bytes per row.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from gnnsys.cache.codecs.base import EncodedRows, check_features

__all__ = ["BinaryCodec", "is_binary"]

_BIT_WEIGHTS = torch.tensor([1, 2, 4, 8, 16, 32, 64, 128], dtype=torch.uint8)
_BIT_SHIFTS = torch.arange(8, dtype=torch.uint8)


def is_binary(x_NF: Tensor) -> bool:
    """True when every value is exactly 0 or 1."""
    return bool(((x_NF == 0) | (x_NF == 1)).all())


@dataclass(frozen=True, slots=True)
class BinaryCodec:
    """Bit-packed 0/1 rows: ``ceil(F/8)`` bytes per row, no metadata."""

    name: str = "binary"

    @property
    def lossless(self) -> bool:
        """Exact for every input it accepts (it rejects anything but 0/1)."""
        return True

    @property
    def fused_aggregate(self) -> bool:
        """Packed bits are no affine code."""
        return False

    @property
    def partial_sums(self) -> bool:
        """A sum of 0/1 rows is not 0/1."""
        return False

    def encode(self, x_NF: Tensor) -> EncodedRows:
        """Pack ``[N, F]`` 0/1 rows to uint8 ``[N, ceil(F/8)]``.

        Raises:
            ValueError: A value other than 0 or 1 (use ``auto``, or a lossy codec such as int8).
        """
        check_features(x_NF, self.name)
        if not is_binary(x_NF):
            raise ValueError(
                "binary codec got a value other than 0/1; use codec 'auto' (falls back to a lossy "
                "codec) or 'int8'"
            )
        n, f = x_NF.shape
        bits = x_NF.to(torch.uint8)
        pad = (-f) % 8
        if pad:
            bits = torch.cat([bits, torch.zeros(n, pad, dtype=torch.uint8)], dim=1)
        packed = (bits.reshape(n, -1, 8) * _BIT_WEIGHTS).sum(dim=2, dtype=torch.uint8)
        return EncodedRows(self.name, int(f), packed.contiguous())

    def decode(self, enc: EncodedRows) -> Tensor:
        """Unpack to float32 ``[N, F]`` of 0.0/1.0."""
        bits = (enc.data.unsqueeze(2) >> _BIT_SHIFTS) & 1
        return bits.reshape(enc.num_rows, -1)[:, : enc.num_cols].float()

    def nbytes(self, enc: EncodedRows) -> int:
        """``N * ceil(F/8)``."""
        return enc.nbytes

    def row_nbytes(self, num_cols: int) -> int:
        """``ceil(F/8)``."""
        return (num_cols + 7) // 8

    def empty(self, num_rows: int, num_cols: int) -> EncodedRows:
        """Zeroed packed storage."""
        return EncodedRows(
            self.name, num_cols, torch.zeros(num_rows, (num_cols + 7) // 8, dtype=torch.uint8)
        )
