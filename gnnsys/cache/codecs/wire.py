"""Optional lossless wire stage: compress an ``EncodedRows``' buffers with zstd (or lz4).

Runs after the codec, so its saving is reported on its own (``WireFrame.wire_nbytes`` against
``raw_nbytes``). Buffers are written raw, in the order data, scale, zero (no pickle); the frame
keeps dtypes and shapes in plain fields. Compression costs CPU on the owner and the receiver;
it pays off on sparse or low-entropy rows (binary bag-of-words, int4 of smooth features).
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from gnnsys.cache.codecs.base import EncodedRows

__all__ = ["HAS_LZ4", "WIRE_METHODS", "WireFrame", "wire_compress", "wire_decompress"]

HAS_LZ4 = importlib.util.find_spec("lz4") is not None
WIRE_METHODS = ("zstd", "lz4") if HAS_LZ4 else ("zstd",)
"""Methods available in this environment."""


def _zstd() -> Any:
    """The ``zstandard`` module, imported on first use (only ``--wire zstd`` needs it)."""
    import zstandard

    return zstandard


_DTYPES = {
    "int8": torch.int8,
    "uint8": torch.uint8,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
}


@dataclass(frozen=True, slots=True, eq=False)
class WireFrame:
    """One compressed transfer of encoded rows.

    Attributes:
        method: ``zstd`` or ``lz4``.
        payload: Compressed bytes of data, scale and zero buffers, concatenated.
        codec: ``EncodedRows.codec``.
        num_cols: ``F``.
        shapes: Shapes of data, scale, zero (``()`` marks an absent tensor).
        dtypes: Dtype names of data, scale, zero (``""`` for absent).
        raw_nbytes: Bytes before compression (== codec ``nbytes``).
    """

    method: str
    payload: bytes
    codec: str
    num_cols: int
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    raw_nbytes: int

    @property
    def wire_nbytes(self) -> int:
        """Compressed payload bytes (the small shape header is not counted)."""
        return len(self.payload)


def _lz4_frame() -> Any:
    """The optional ``lz4.frame`` module, imported only when asked for (no type stubs)."""
    return importlib.import_module("lz4.frame")


def _raw(t: Tensor) -> bytes:
    flat = t.contiguous().reshape(-1)
    if flat.dtype == torch.bfloat16:  # numpy has no bfloat16; ship the bit pattern
        flat = flat.view(torch.int16)
    return bytes(flat.numpy().tobytes())


def _compress(method: str, raw: bytes, level: int) -> bytes:
    if method == "zstd":
        return bytes(_zstd().ZstdCompressor(level=level).compress(raw))
    if method == "lz4" and HAS_LZ4:
        return bytes(_lz4_frame().compress(raw))
    raise ValueError(f"wire method {method!r} is not available; choose one of {WIRE_METHODS}")


def wire_compress(enc: EncodedRows, method: str = "zstd", level: int = 3) -> WireFrame:
    """Compress ``enc``'s buffers losslessly.

    Args:
        enc: Encoded rows.
        method: ``zstd`` (always available) or ``lz4`` (if the lz4 package is installed).
        level: zstd level (1 fast .. 19 small); ignored by lz4.

    Raises:
        ValueError: Unknown or unavailable method.
    """
    tensors = (enc.data, enc.scale, enc.zero)
    raw = b"".join(_raw(t) for t in tensors if t is not None)
    shapes = tuple(() if t is None else tuple(t.shape) for t in tensors)
    dtypes = tuple("" if t is None else str(t.dtype).removeprefix("torch.") for t in tensors)
    payload = _compress(method, raw, level)
    return WireFrame(method, payload, enc.codec, enc.num_cols, shapes, dtypes, len(raw))


def wire_decompress(frame: WireFrame) -> EncodedRows:
    """Inverse of ``wire_compress``: the identical ``EncodedRows``."""
    if frame.method == "zstd":
        raw = _zstd().ZstdDecompressor().decompress(frame.payload, max_output_size=frame.raw_nbytes)
    else:
        raw = _lz4_frame().decompress(frame.payload)
    out: list[Tensor | None] = []
    offset = 0
    for shape, dtype_name in zip(frame.shapes, frame.dtypes, strict=True):
        if not dtype_name:
            out.append(None)
            continue
        dtype = _DTYPES[dtype_name]
        count = int(np.prod(shape))
        size = count * torch.empty((), dtype=dtype).element_size()
        load_dtype = torch.int16 if dtype == torch.bfloat16 else dtype
        buf = bytearray(raw[offset : offset + size])
        t = torch.frombuffer(buf, dtype=load_dtype) if size else torch.empty(0, dtype=load_dtype)
        out.append(t.view(dtype).reshape(shape))
        offset += size
    data = out[0]
    assert data is not None, "a frame always carries data"
    return EncodedRows(frame.codec, frame.num_cols, data, out[1], out[2])
