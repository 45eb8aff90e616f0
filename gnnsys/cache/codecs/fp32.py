"""``fp32``: identity codec (the no-compression baseline), and the cast codec fp16/bf16 share.

Shape legend: ``N`` rows, ``F`` feature dim.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from gnnsys.cache.codecs.base import EncodedRows, check_features

__all__ = ["CastCodec", "FP32Codec"]

_FP32_MAX = float(torch.finfo(torch.float32).max)


@dataclass(frozen=True, slots=True)
class CastCodec:
    """Stores rows as ``dtype`` (a plain cast); decode casts back to float32.

    Attributes:
        name: Registry name.
        dtype: Storage dtype (float32, float16 or bfloat16).
        max_abs: Largest finite magnitude of ``dtype``; larger inputs raise instead of overflowing.
    """

    name: str = "fp32"
    dtype: torch.dtype = torch.float32
    max_abs: float = float(torch.finfo(torch.float32).max)

    @property
    def lossless(self) -> bool:
        """Only the float32 cast is lossless for every float32 input."""
        return self.dtype == torch.float32

    @property
    def fused_aggregate(self) -> bool:
        """A float cast is no affine code; the kernels read the decoded floats."""
        return False

    @property
    def partial_sums(self) -> bool:
        """Every cast but fp16 (whose 65504 limit a sum of many rows can pass) holds sums."""
        return self.dtype != torch.float16

    def encode(self, x_NF: Tensor) -> EncodedRows:
        """Cast ``[N, F]`` rows to ``dtype``.

        Raises:
            ValueError: Non-finite input, or a magnitude that overflows ``dtype``.
        """
        check_features(x_NF, self.name)
        narrower = self.max_abs < _FP32_MAX  # finite float32 rows always fit fp32 and bf16
        if narrower and x_NF.numel() and float(x_NF.abs().max()) > self.max_abs:
            raise ValueError(
                f"{self.name} cannot hold |x| = {float(x_NF.abs().max()):.4g} > "
                f"{self.max_abs:.4g}; "
                "normalize the features or use codec fp32/bf16"
            )
        data = x_NF.to(self.dtype).contiguous()
        if data.data_ptr() == x_NF.data_ptr():
            data = data.clone()  # never alias the owner's feature matrix
        return EncodedRows(self.name, int(x_NF.shape[1]), data)

    def decode(self, enc: EncodedRows) -> Tensor:
        """Cast back to float32 ``[N, F]``."""
        return enc.data.float()

    def nbytes(self, enc: EncodedRows) -> int:
        """``N * F * itemsize``."""
        return enc.nbytes

    def row_nbytes(self, num_cols: int) -> int:
        """``F * itemsize``."""
        return num_cols * torch.empty((), dtype=self.dtype).element_size()

    def empty(self, num_rows: int, num_cols: int) -> EncodedRows:
        """Zeroed ``[num_rows, F]`` storage."""
        return EncodedRows(self.name, num_cols, torch.zeros(num_rows, num_cols, dtype=self.dtype))


def FP32Codec() -> CastCodec:  # noqa: N802 - reads like a class at call sites, as the others
    """The identity codec: 4 bytes per value, exact."""
    return CastCodec("fp32", torch.float32, float(torch.finfo(torch.float32).max))
