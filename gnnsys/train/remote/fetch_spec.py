"""How remote feature rows travel: codec, halo cache, wire stage, aggregation placement."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from torch import Tensor

from gnnsys.cache.codecs import Codec

__all__ = ["FetchSpec"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class FetchSpec:
    """How remote feature rows travel: codec, halo cache, wire stage, aggregation placement."""

    codec: str = "fp32"
    """Codec in ``gnnsys.cache.CODECS`` the owners encode rows with (``fp32``: plain rows).
    ``auto`` is resolved once on the driver from the features (smallest lossless codec, else
    ``lossy_codec``) before the spec reaches the workers."""
    lossy_codec: str = "int8"
    """What ``auto`` picks when no lossless codec fits the features."""
    cache_policy: str = "none"
    """Halo cache admission: ``none``, ``degree``, ``presample`` or ``adaptive``."""
    cache_ratio: float = 0.0
    """Cache budget as a fraction of the worker's own feature bytes (``--cache-ratio``)."""
    cache_mb: float | None = None
    """Cache budget in MiB (``--cache-mb``); overrides ``cache_ratio`` when set."""
    presample_epochs: int = 1
    """Dry-run sampling epochs behind the ``presample`` and ``adaptive`` scores."""
    wire: str | None = None
    """Optional lossless wire stage over encoded rows: ``zstd`` or ``lz4`` (measured)."""
    aggregate_at: str = "requester"
    """Where layer 1's neighbor aggregation runs: ``requester``, ``owner`` or ``auto``."""
    fused_dequant: bool = True
    """With an ``int8``/``int4`` codec, ``requester`` placement and a linear first layer (SAGE
    mean/sum, GCN), sum halo rows straight from their codes (``gnnsys.kernels.aggregate`` with
    ``scale``/``zero``) instead of decoding them to float32 first (``--decode-halo`` turns it
    off). Same bytes on the wire; no float32 copy of the halo rows."""

    def __post_init__(self) -> None:
        from gnnsys.cache import ADMISSION_POLICIES
        from gnnsys.cache.codecs import CODECS

        if self.codec not in CODECS:
            raise ValueError(f"codec={self.codec!r}; choose one of {sorted(CODECS)}")
        if self.lossy_codec not in CODECS or self.lossy_codec in ("auto", "binary"):
            raise ValueError(f"lossy_codec={self.lossy_codec!r}; choose fp16, bf16, int8 or int4")
        if self.cache_policy not in ADMISSION_POLICIES:
            choices = sorted(ADMISSION_POLICIES)
            raise ValueError(f"cache_policy={self.cache_policy!r}; choose one of {choices}")
        if self.cache_ratio < 0 or (self.cache_mb is not None and self.cache_mb < 0):
            raise ValueError(
                f"cache_ratio={self.cache_ratio}, cache_mb={self.cache_mb}; budgets are >= 0"
            )
        if self.presample_epochs < 1:
            raise ValueError(f"presample_epochs={self.presample_epochs}; choose >= 1")
        if self.wire not in (None, "zstd", "lz4"):
            raise ValueError(f"wire={self.wire!r}; choose zstd, lz4 or leave it unset")
        if self.aggregate_at not in ("requester", "owner", "auto"):
            raise ValueError(f"aggregate_at={self.aggregate_at!r}; choose requester, owner or auto")

    @property
    def cached(self) -> bool:
        """Whether workers keep a halo cache (a policy other than ``none`` and a budget)."""
        budget = self.cache_mb if self.cache_mb is not None else self.cache_ratio
        return self.cache_policy != "none" and budget > 0

    def make(self) -> Codec | None:
        """The codec object, or ``None`` for plain float32 rows.

        Raises:
            ValueError: ``codec`` is still ``auto`` (resolve it on the driver first).
        """
        from gnnsys.cache.codecs import make_codec

        if self.codec == "auto":
            raise ValueError("FetchSpec.codec is 'auto'; resolve it with resolve_codec(x) first")
        return None if self.codec == "fp32" else make_codec(self.codec)

    def resolve_codec(self, x_NF: Tensor) -> FetchSpec:
        """This spec with ``auto`` replaced by the codec ``AutoCodec`` picks for ``x_NF``."""
        from gnnsys.cache.codecs import AutoCodec

        if self.codec != "auto":
            return self
        chosen = AutoCodec(lossy=self.lossy_codec).resolve(x_NF)
        log.info("codec auto -> %s", chosen.name)
        return replace(self, codec=chosen.name)
