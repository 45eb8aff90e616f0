"""``bf16``: bfloat16 (2 bytes per value, float32's range, relative error <= 2**-8)."""

from __future__ import annotations

import torch

from gnnsys.cache.codecs.fp32 import CastCodec

__all__ = ["BF16Codec"]


def BF16Codec() -> CastCodec:  # noqa: N802 - a codec constructor, named like the others
    """bfloat16 cast: same exponent range as float32, 8 significant bits."""
    return CastCodec("bf16", torch.bfloat16, float(torch.finfo(torch.bfloat16).max))
