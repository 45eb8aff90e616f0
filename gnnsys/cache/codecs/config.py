"""``CodecConfig``: the codec remote feature rows travel in, validated and resolved in one place.

A name becomes a codec object only here (:meth:`CodecConfig.make`); ``fp32`` is an ``FP32Codec``
like any other, so no caller branches on "no codec". ``auto`` is resolved once, on the driver,
from the features (:meth:`CodecConfig.resolve`) before the config reaches the workers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from torch import Tensor

from gnnsys.cache.codecs.auto import AutoCodec
from gnnsys.cache.codecs.base import Codec

__all__ = ["WIRE_STAGES", "CodecConfig"]

log = logging.getLogger(__name__)

WIRE_STAGES = ("zstd", "lz4")
"""Lossless wire stages a run may measure (``lz4`` needs the optional ``lz4`` package)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CodecConfig:
    """How remote feature rows are encoded by their owners (``--codec``, ``--wire``)."""

    name: str = "fp32"
    """Codec in ``gnnsys.cache.codecs.CODECS`` (``fp32``: plain float rows). ``auto`` picks the
    smallest codec that is exact on the features, else ``lossy``; see :meth:`resolve`."""
    lossy: str = "int8"
    """What ``auto`` picks when no lossless codec fits the features."""
    wire: str | None = None
    """Optional lossless wire stage over encoded rows: ``zstd`` or ``lz4``, measured into the
    cache counters' ``bytes_wire`` (so only with a cache); the ledger counts the codec's bytes."""

    def __post_init__(self) -> None:
        from gnnsys.cache.codecs import CODECS

        if self.name not in CODECS:
            raise ValueError(f"codec name={self.name!r}; choose one of {sorted(CODECS)}")
        if self.lossy not in CODECS or self.lossy in ("auto", "binary"):
            raise ValueError(
                f"codec lossy={self.lossy!r}; auto falls back to fp32, fp16, bf16, int8 or int4"
            )
        if self.wire is not None and self.wire not in WIRE_STAGES:
            raise ValueError(f"codec wire={self.wire!r}; choose zstd, lz4 or leave it unset")

    def resolve(self, x_NF: Tensor) -> CodecConfig:
        """This config with ``auto`` replaced by what ``AutoCodec`` picks for ``x_NF``.

        Costs one encode and decode per candidate over ``x_NF``; call it once, on the driver.
        """
        if self.name != "auto":
            return self
        chosen = AutoCodec(lossy=self.lossy).resolve(x_NF)
        log.info("codec auto -> %s", chosen.name)
        return replace(self, name=chosen.name)

    def resolve_chunks(self, chunks: Callable[[], Iterable[Tensor]]) -> CodecConfig:
        """:meth:`resolve` over the rows of ``chunks()`` without concatenating them.

        ``chunks`` is called once per candidate tried (``AutoCodec.resolve_chunks``), so the
        driver never holds the whole feature matrix.
        """
        if self.name != "auto":
            return self
        chosen = AutoCodec(lossy=self.lossy).resolve_chunks(chunks)
        log.info("codec auto -> %s", chosen.name)
        return replace(self, name=chosen.name)

    def make(self) -> Codec:
        """The codec object (``FP32Codec`` for ``fp32``).

        Raises:
            ValueError: ``name`` is still ``auto``; resolve it on the driver first.
        """
        from gnnsys.cache.codecs import make_codec

        if self.name == "auto":
            raise ValueError("codec name='auto' is unresolved; call CodecConfig.resolve(x) first")
        return make_codec(self.name)
