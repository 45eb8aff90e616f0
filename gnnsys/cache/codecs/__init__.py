"""Stage 5b, codecs: compact row formats for halo features (in the cache and on the wire).

``CODECS`` maps a name to a constructor taking keyword options (``stochastic``, ``seed`` for the
affine codecs; ``lossy`` for ``auto``). ``make_codec(name, **options)`` builds one;
``CodecConfig`` is the run setting that names one (validated and ``auto``-resolved there).

| name   | bytes per row (F features) | error                                 |
|--------|----------------------------|---------------------------------------|
| fp32   | 4F                         | exact                                 |
| fp16   | 2F                         | relative 2**-11, abs <= 65504         |
| bf16   | 2F                         | relative 2**-8                        |
| int8   | F + 4                      | <= step/2, step ~= row range / 255    |
| int4   | ceil(F/2) + 4              | <= step/2, step ~= row range / 15     |
| binary | ceil(F/8)                  | exact (0/1 features only)             |
| auto   | the resolved codec's       | exact if any candidate is, else lossy |
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gnnsys.cache.codecs.auto import AutoCodec
from gnnsys.cache.codecs.base import Codec, EncodedRows, concat, put, take
from gnnsys.cache.codecs.bf16 import BF16Codec
from gnnsys.cache.codecs.binary import BinaryCodec
from gnnsys.cache.codecs.config import WIRE_STAGES, CodecConfig, PerTypeCodecConfig
from gnnsys.cache.codecs.fp16 import FP16Codec
from gnnsys.cache.codecs.fp32 import CastCodec, FP32Codec
from gnnsys.cache.codecs.int4 import Int4Codec
from gnnsys.cache.codecs.int8 import Int8Codec
from gnnsys.cache.codecs.wire import WireFrame, wire_compress, wire_decompress

__all__ = [
    "CODECS",
    "WIRE_STAGES",
    "AutoCodec",
    "CastCodec",
    "Codec",
    "CodecConfig",
    "EncodedRows",
    "FP32Codec",
    "PerTypeCodecConfig",
    "WireFrame",
    "concat",
    "make_codec",
    "put",
    "take",
    "wire_compress",
    "wire_decompress",
]

CODECS: dict[str, Callable[..., Any]] = {
    "fp32": FP32Codec,
    "fp16": FP16Codec,
    "bf16": BF16Codec,
    "int8": Int8Codec,
    "int4": Int4Codec,
    "binary": BinaryCodec,
    "auto": AutoCodec,
}
"""Codec name -> constructor."""


def make_codec(name: str, **options: Any) -> Codec:
    """Build the codec ``name`` with its options, e.g. ``make_codec("int8", stochastic=True)``.

    Raises:
        ValueError: Unknown name, or options the codec does not take.
    """
    if name not in CODECS:
        raise ValueError(f"unknown codec {name!r}; choose one of {sorted(CODECS)}")
    try:
        codec: Codec = CODECS[name](**options)
    except TypeError as err:
        raise ValueError(f"codec {name!r} does not take options {sorted(options)}: {err}") from err
    return codec
