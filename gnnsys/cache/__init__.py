"""Stage 5, cache: halo feature rows for every block's source nodes, cached and compressed.

``HaloCache`` (one per worker, byte budget, encoded slots), admission policies in
``admission`` (pure decisions: ``none``, ``degree``, ``presample``, ``adaptive``), codecs in
``codecs`` (``CODECS``), and ``HaloFetcher`` that fills misses from a ``FeatureSource``.
The run settings of this stage are ``CacheConfig`` (budget, policy, adaptive knobs) and
``CodecConfig`` (codec, ``auto`` fallback, wire stage). Heterogeneous graphs: per-type codecs
(``PerTypeCodecConfig``) and per-type caches under one budget (``PerTypeHaloCache``, ``typed``).
"""

from __future__ import annotations

from gnnsys.cache.admission import (
    ADMISSION_POLICIES,
    AdaptiveAdmission,
    AdmissionPlan,
    AdmissionPolicy,
    NoAdmission,
    StaticAdmission,
    degree_scores,
    inclusion_scores,
    make_policy,
    presample_scores,
    tie_break,
)
from gnnsys.cache.base import (
    CacheCounters,
    EncodedFeatureSource,
    FeatureSource,
    HaloFeatureSource,
    SplitRows,
)
from gnnsys.cache.codecs import (
    CODECS,
    AutoCodec,
    Codec,
    CodecConfig,
    EncodedRows,
    PerTypeCodecConfig,
    make_codec,
)
from gnnsys.cache.config import CacheConfig
from gnnsys.cache.fetcher import FetchStats, HaloFetcher, LocalFeatureSource
from gnnsys.cache.halo_cache import INDEX_BYTES_PER_ROW, CacheStats, EncodedLookup, HaloCache
from gnnsys.cache.per_type import (
    BudgetSplit,
    PerTypeCacheCounters,
    PerTypeCacheStats,
    PerTypeHaloCache,
    PerTypeHaloFetcher,
    TypeDemand,
    split_budget,
)

__all__ = [
    "ADMISSION_POLICIES",
    "CODECS",
    "INDEX_BYTES_PER_ROW",
    "AdaptiveAdmission",
    "AdmissionPlan",
    "AdmissionPolicy",
    "AutoCodec",
    "BudgetSplit",
    "CacheConfig",
    "CacheCounters",
    "CacheStats",
    "Codec",
    "CodecConfig",
    "EncodedFeatureSource",
    "EncodedLookup",
    "EncodedRows",
    "FeatureSource",
    "FetchStats",
    "HaloCache",
    "HaloFeatureSource",
    "HaloFetcher",
    "LocalFeatureSource",
    "NoAdmission",
    "SplitRows",
    "StaticAdmission",
    "TypeDemand",
    "PerTypeCacheCounters",
    "PerTypeCacheStats",
    "PerTypeCodecConfig",
    "PerTypeHaloCache",
    "PerTypeHaloFetcher",
    "degree_scores",
    "inclusion_scores",
    "make_codec",
    "make_policy",
    "presample_scores",
    "split_budget",
    "tie_break",
]
