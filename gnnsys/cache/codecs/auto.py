"""``auto``: the smallest codec that is exact on the given features, else a configured lossy one.

Candidates are tried from the fewest bytes per row up (binary, int4, int8, bf16, fp16); a
candidate qualifies when ``decode(encode(x)) == x`` bit for bit on the features it is shown, so a
Cora/Facebook bag-of-words resolves to ``binary`` and Gaussian features to the lossy fallback.

Resolve once, on the whole feature matrix (or every part's, agreeing on one answer): the cache
stores fixed-width rows of a single codec, so ``HaloCache`` takes the resolved codec, not ``auto``.
The check costs one encode and decode per candidate tried over the rows it is shown.

Shape legend: ``N`` rows, ``F`` feature dim.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import Tensor

from gnnsys.cache.codecs.base import Codec, EncodedRows, check_features
from gnnsys.cache.codecs.bf16 import BF16Codec
from gnnsys.cache.codecs.binary import BinaryCodec, is_binary
from gnnsys.cache.codecs.fp16 import FP16Codec
from gnnsys.cache.codecs.fp32 import FP32Codec
from gnnsys.cache.codecs.int4 import Int4Codec
from gnnsys.cache.codecs.int8 import Int8Codec

__all__ = ["AutoCodec", "codec_for_rows"]

log = logging.getLogger(__name__)

_CANDIDATES: dict[str, Callable[[], Codec]] = {
    "binary": BinaryCodec,
    "int4": Int4Codec,
    "int8": Int8Codec,
    "bf16": BF16Codec,
    "fp16": FP16Codec,
    "fp32": FP32Codec,
}


def codec_for_rows(name: str) -> Codec:
    """A decoder for rows that ``EncodedRows.codec == name`` (rounding options don't matter)."""
    if name not in _CANDIDATES:
        raise ValueError(f"unknown codec {name!r}; choose one of {sorted(_CANDIDATES)}")
    return _CANDIDATES[name]()


def _exact(codec: Codec, x_NF: Tensor) -> bool:
    if codec.name == "binary":
        return is_binary(x_NF)
    try:
        return bool(torch.equal(codec.decode(codec.encode(x_NF)), x_NF.float()))
    except ValueError:  # e.g. fp16 overflow: not admissible
        return False


@dataclass(frozen=True, slots=True)
class AutoCodec:
    """Picks a concrete codec from the data.

    Attributes:
        lossy: Codec used when no candidate is exact (``int8``, ``int4``, ``fp16``, ``bf16``).
        stochastic: Stochastic rounding for an int8/int4 fallback.
        seed: Its seed.
    """

    lossy: str = "int8"
    stochastic: bool = False
    seed: int = 0
    name: str = "auto"

    def __post_init__(self) -> None:
        if self.lossy not in _CANDIDATES or self.lossy == "binary":
            raise ValueError(
                f"auto's lossy fallback {self.lossy!r} is not a general codec; choose one of "
                "int8, int4, bf16, fp16, fp32"
            )

    @property
    def lossless(self) -> bool:
        """Depends on the data; ``resolve`` tells."""
        return False

    @property
    def fused_aggregate(self) -> bool:
        """Unknown before resolving; the resolved codec tells."""
        return False

    @property
    def partial_sums(self) -> bool:
        """Unknown before resolving; the resolved codec tells."""
        return False

    def resolve(self, x_NF: Tensor) -> Codec:
        """The codec to use for features like ``x_NF``: smallest exact one, else ``lossy``."""
        check_features(x_NF, self.name)
        f = int(x_NF.shape[1])
        # fp32 is trivially exact on float32 input, so it is a fallback, never a candidate.
        tried = [n for n in _CANDIDATES if n != "fp32"]
        by_size = sorted(tried, key=lambda n: _CANDIDATES[n]().row_nbytes(f))
        for cand in by_size:
            codec = _CANDIDATES[cand]()
            if _exact(codec, x_NF):
                log.info("auto codec: %s is exact on %d rows", cand, x_NF.shape[0])
                return codec
        if self.lossy == "int8":
            return Int8Codec(stochastic=self.stochastic, seed=self.seed)
        if self.lossy == "int4":
            return Int4Codec(stochastic=self.stochastic, seed=self.seed)
        return _CANDIDATES[self.lossy]()

    def resolve_chunks(self, chunks: Callable[[], Iterable[Tensor]]) -> Codec:
        """``resolve`` of the row-concatenation of ``chunks()`` without building it.

        Each candidate's exactness is a per-row (affine codecs) or per-element property, so
        checking chunk by chunk gives the same answer as one check over all rows; a rejected
        candidate stops at its first inexact chunk. ``chunks`` is called once per candidate.
        """
        for cand in self._by_size(chunks):
            codec = _CANDIDATES[cand]()
            if all(_exact(codec, x) for x in chunks()):
                log.info("auto codec: %s is exact on every chunk", cand)
                return codec
        return self._fallback()

    def _by_size(self, chunks: Callable[[], Iterable[Tensor]]) -> list[str]:
        first = next(iter(chunks()))
        check_features(first, self.name)
        tried = [n for n in _CANDIDATES if n != "fp32"]
        return sorted(tried, key=lambda n: _CANDIDATES[n]().row_nbytes(int(first.shape[1])))

    def _fallback(self) -> Codec:
        if self.lossy == "int8":
            return Int8Codec(stochastic=self.stochastic, seed=self.seed)
        if self.lossy == "int4":
            return Int4Codec(stochastic=self.stochastic, seed=self.seed)
        return _CANDIDATES[self.lossy]()

    def encode(self, x_NF: Tensor) -> EncodedRows:
        """Encode with ``resolve(x_NF)``; the rows name the codec actually used."""
        return self.resolve(x_NF).encode(x_NF)

    def decode(self, enc: EncodedRows) -> Tensor:
        """Decode with the codec named in ``enc.codec``."""
        return codec_for_rows(enc.codec).decode(enc)

    def nbytes(self, enc: EncodedRows) -> int:
        """Exact bytes of ``enc``'s tensors."""
        return enc.nbytes

    def row_nbytes(self, num_cols: int) -> int:
        """Not fixed before resolving.

        Raises:
            ValueError: Always; call ``resolve(x)`` and use the codec it returns.
        """
        raise ValueError("codec 'auto' has no fixed row size; use AutoCodec().resolve(x) first")

    def empty(self, num_rows: int, num_cols: int) -> EncodedRows:
        """Not available before resolving.

        Raises:
            ValueError: Always; call ``resolve(x)`` and use the codec it returns.
        """
        raise ValueError("codec 'auto' has no storage layout; use AutoCodec().resolve(x) first")
