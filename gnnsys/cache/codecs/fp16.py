"""``fp16``: IEEE half precision (2 bytes per value, relative error <= 2**-11, |x| <= 65504)."""

from __future__ import annotations

import torch

from gnnsys.cache.codecs.fp32 import CastCodec

__all__ = ["FP16Codec"]


def FP16Codec() -> CastCodec:  # noqa: N802 - a codec constructor, named like the others
    """Half-precision cast; raises on magnitudes above 65504 instead of producing inf."""
    return CastCodec("fp16", torch.float16, float(torch.finfo(torch.float16).max))
