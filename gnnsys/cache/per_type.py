"""Per-node-type halo caches under one byte budget, each type in its own codec (issue #16).

API (what a heterogeneous worker wires; every id is in its node type's id space, the one its
admission policy's ``score_N`` indexes, e.g. type-local ids)::

    codecs = PerTypeCodecConfig.parse("paper=int8,*=fp16", node_types).resolve(x_by_type).codecs()
    budget = cache_config.budget_bytes(owned_feature_bytes=sum_t(M_own_t * F_t * 4))
    demand = {t: TypeDemand.of(score_N[t], codecs[t], feature_dims[t]) for t in scored_types}
    split = split_budget(budget, demand)                             # pure -> BudgetSplit
    cache = PerTypeHaloCache.build(split, feature_dims=feature_dims, codecs=codecs,
                                 policies={t: policy_t for t in scored_types})
    cache.of(t) -> HaloCache;  cache.node_types;  cache.budget_bytes;  cache.capacity_bytes
    cache.lookup(t, gid) / lookup_encoded / peek / contains / would_admit / insert(t, gid, rows)
    cache.stats -> PerTypeCacheStats (.by_type[t]: CacheStats, .total);  cache.reset_stats()
    fetcher = PerTypeHaloFetcher(cache, sources={t: FeatureSource}, wire=None)
    fetcher.of(t) -> HaloFetcher;  fetcher.gather(t, gid) / gather_encoded(t, gid)
    fetcher.warm_up() -> {t: rows stored}
    fetcher.counters() -> PerTypeCacheCounters (.by_type[t]: CacheCounters, .total,
                                              .since(before), + over ranks, .to_json())

"No cache" is ``PerTypeHaloCache.disabled(feature_dims=, codecs=)``: every type at capacity 0.

**How the budget is split** (:func:`split_budget`, pure, decided once before epoch 0). A row of
type ``t`` with score ``s`` (expected fetches per epoch: the policy's presample count, or its
degree score as a proxy) saves ``s * p_t`` bytes per epoch when cached, where ``p_t`` is the
type's encoded row size, and costs ``r_t = p_t + INDEX_BYTES_PER_ROW`` bytes of budget. Every
candidate row of every type is ranked by ``s * p_t / r_t`` (bytes saved per epoch per budget
byte; ties: earlier type, then higher score) and the longest prefix whose ``r_t`` sum fits the
budget is taken; type ``t`` gets ``rows_t * r_t`` bytes. That is the greedy knapsack optimum of
expected bytes saved (exact up to the one row that does not fit), and within a type it is the
top scores, the rows a static policy keeps. Types with no positive score (no remote traffic)
get 0, and ``sum_t rows_t * r_t <= budget`` always. The split is fixed for the run (no
re-split, hence no thrash); an adaptive policy adapts inside its type's share.

Each type's rows are stored in its own codec (``HaloCache`` slots in ``codecs[t]``'s layout).
A fetcher does one owner request per type per batch (a ``HaloFetcher`` per type).

Shape legend: ``K`` requested rows, ``R`` candidate rows of one type, ``C`` candidates of all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from gnnsys.cache.admission import AdmissionPolicy, NoAdmission
from gnnsys.cache.base import CacheCounters, FeatureSource
from gnnsys.cache.codecs.base import Codec, EncodedRows
from gnnsys.cache.fetcher import FetchStats, HaloFetcher
from gnnsys.cache.halo_cache import INDEX_BYTES_PER_ROW, CacheStats, EncodedLookup, HaloCache
from gnnsys.types import CacheLookup

__all__ = [
    "BudgetSplit",
    "TypeDemand",
    "PerTypeCacheCounters",
    "PerTypeCacheStats",
    "PerTypeHaloCache",
    "PerTypeHaloFetcher",
    "split_budget",
]


# ---- the split: pure --------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, eq=False)
class TypeDemand:
    """What caching one node type's halo rows would save: the input of :func:`split_budget`.

    Attributes:
        score: ``[R]`` expected fetches per epoch of the type's candidate rows, any order
            (a policy's dense ``score_N`` is fine: rows scoring 0 are never cached).
        payload_bytes: Encoded bytes of one row, ``codec.row_nbytes(F)``.
    """

    score: Tensor
    payload_bytes: int

    def __post_init__(self) -> None:
        if self.score.dim() != 1:
            raise ValueError(f"TypeDemand.score must be [R], got shape {tuple(self.score.shape)}")
        if self.score.numel() and not bool(torch.isfinite(self.score).all()):
            raise ValueError("TypeDemand.score has a NaN or inf; pass finite access counts")
        if self.payload_bytes < 0:
            raise ValueError(f"TypeDemand.payload_bytes={self.payload_bytes}; choose >= 0")

    @classmethod
    def of(cls, score: Tensor, codec: Codec, feature_dim: int) -> TypeDemand:
        """The demand of rows of ``feature_dim`` features kept in ``codec``."""
        return cls(score=score, payload_bytes=codec.row_nbytes(feature_dim))

    @property
    def row_bytes(self) -> int:
        """Budget bytes of one cached row: payload plus ``INDEX_BYTES_PER_ROW`` (as HaloCache)."""
        return self.payload_bytes + INDEX_BYTES_PER_ROW


@dataclass(frozen=True, slots=True)
class BudgetSplit:
    """One worker's cache budget split over node types (the output of :func:`split_budget`).

    Attributes:
        budget_bytes: The whole budget.
        rows: Node type -> rows its cache holds (types not listed: 0).
        row_bytes: Node type -> budget bytes per row (payload + index), for the listed types.
    """

    budget_bytes: int
    rows: Mapping[str, int]
    row_bytes: Mapping[str, int]

    def capacity_bytes(self, node_type: str) -> int:
        """``rows * row_bytes`` of ``node_type`` (0 for a type not in the split)."""
        return self.rows.get(node_type, 0) * self.row_bytes.get(node_type, 0)

    @property
    def used_bytes(self) -> int:
        """Sum of every type's capacity; never above ``budget_bytes``."""
        return sum(self.capacity_bytes(t) for t in self.rows)


def split_budget(budget_bytes: int, demand: Mapping[str, TypeDemand]) -> BudgetSplit:
    """Split ``budget_bytes`` over node types by bytes saved per budget byte (module docstring).

    Costs one sort of the ``C`` positive scores of all types (float64).

    Args:
        budget_bytes: One worker's byte budget (``CacheConfig.budget_bytes``).
        demand: Node type -> its candidate rows' scores and row size; types left out get 0.

    Returns:
        The rows per type; ``used_bytes <= budget_bytes``.

    Raises:
        ValueError: A negative budget.
    """
    if budget_bytes < 0:
        raise ValueError(f"cache budget_bytes={budget_bytes}; choose >= 0")
    types = list(demand)
    row_bytes = {t: demand[t].row_bytes for t in types}
    density, owner = [], []
    for i, t in enumerate(types):
        d = demand[t]
        score = torch.sort(d.score[d.score > 0].double(), descending=True, stable=True).values
        density.append(score * (d.payload_bytes / d.row_bytes))
        owner.append(torch.full(score.shape, i, dtype=torch.int64))
    rows = dict.fromkeys(types, 0)
    if budget_bytes == 0 or not types:
        return BudgetSplit(budget_bytes, rows, row_bytes)
    density_C, owner_C = torch.cat(density), torch.cat(owner)
    keep = density_C > 0  # a zero-byte payload saves nothing
    density_C, owner_C = density_C[keep], owner_C[keep]
    order = torch.argsort(-density_C, stable=True)  # ties: earlier type, then higher score
    ranked = owner_C[order]
    cost = torch.tensor([row_bytes[t] for t in types], dtype=torch.int64)[ranked]
    taken = ranked[torch.cumsum(cost, 0) <= budget_bytes]  # a prefix: costs are positive
    counts = torch.bincount(taken, minlength=len(types))
    rows = {t: int(counts[i]) for i, t in enumerate(types)}
    return BudgetSplit(budget_bytes, rows, row_bytes)


# ---- records ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PerTypeCacheStats:
    """``CacheStats`` of every node type's cache, and their field-wise total.

    Attributes:
        by_type: Node type -> its cache's counters, in the cache's type order.
    """

    by_type: Mapping[str, CacheStats]

    @property
    def total(self) -> CacheStats:
        """Field-wise sum over types (``total.hit_rate`` is the worker's hit rate)."""
        stats = list(self.by_type.values())
        fields = dataclasses.fields(CacheStats)
        return CacheStats(**{f.name: sum(getattr(s, f.name) for s in stats) for f in fields})


@dataclass(frozen=True, slots=True)
class PerTypeCacheCounters:
    """A worker's ``CacheCounters`` per node type: bytes per epoch by node type.

    Attributes:
        by_type: Node type -> its fetch counts and cache levels, in the cache's type order.
    """

    by_type: Mapping[str, CacheCounters]

    @property
    def total(self) -> CacheCounters:
        """Field-wise sum over types."""
        total = CacheCounters()
        for counters in self.by_type.values():
            total = total + counters
        return total

    def since(self, before: PerTypeCacheCounters) -> PerTypeCacheCounters:
        """Per type, counts accrued since ``before`` and levels as now (one epoch's report)."""
        empty = CacheCounters()
        return PerTypeCacheCounters(
            {t: c.since(before.by_type.get(t, empty)) for t, c in self.by_type.items()}
        )

    def __add__(self, other: PerTypeCacheCounters) -> PerTypeCacheCounters:
        """Per type sum (over ranks); a type only one side has keeps its counters."""
        empty = CacheCounters()
        types = list(self.by_type) + [t for t in other.by_type if t not in self.by_type]
        return PerTypeCacheCounters(
            {t: self.by_type.get(t, empty) + other.by_type.get(t, empty) for t in types}
        )

    def to_json(self) -> dict[str, object]:
        """``{"by_type": {type: CacheCounters.to_json()}, "total": {...}}``."""
        return {
            "by_type": {t: c.to_json() for t, c in self.by_type.items()},
            "total": self.total.to_json(),
        }


# ---- the caches -------------------------------------------------------------------------------
class PerTypeHaloCache:
    """A worker's halo caches, one ``HaloCache`` per node type, under one byte budget.

    Build with :meth:`build` (from a :class:`BudgetSplit`) or :meth:`disabled`.

    Args:
        caches: Node type -> its cache (its codec and feature dim), in the graph's type order.
        budget_bytes: The worker's whole budget.

    Raises:
        ValueError: No caches, or their capacities add up to more than ``budget_bytes``.
    """

    def __init__(self, caches: Mapping[str, HaloCache], *, budget_bytes: int) -> None:
        if not caches:
            raise ValueError("PerTypeHaloCache needs a cache for at least one node type")
        used = sum(c.config.capacity_bytes for c in caches.values())
        if used > budget_bytes:
            raise ValueError(
                f"node type caches hold {used} bytes > budget_bytes={budget_bytes}; "
                "size them with split_budget"
            )
        self._caches = dict(caches)
        self.budget_bytes = budget_bytes

    @classmethod
    def build(
        cls,
        split: BudgetSplit,
        *,
        feature_dims: Mapping[str, int],
        codecs: Mapping[str, Codec],
        policies: Mapping[str, AdmissionPolicy] | None = None,
        device: torch.device | str = "cpu",
    ) -> PerTypeHaloCache:
        """One cache per type of ``feature_dims``, sized by ``split``, rows in ``codecs[t]``.

        Args:
            split: From :func:`split_budget`; types it does not list get capacity 0.
            feature_dims: Node type -> ``F_t`` (the types with halo rows, in the graph's order).
            codecs: Node type -> its concrete codec (``PerTypeCodecConfig.codecs()``).
            policies: Node type -> its admission policy (``NoAdmission`` for types left out).
            device: Where every type's slots live (``HaloCache``'s ``device``).

        Raises:
            ValueError: ``codecs``, ``split`` or ``policies`` name other types than
                ``feature_dims``; a type with a share but no policy; or a split whose row size
                disagrees with the type's codec.
        """
        types = list(feature_dims)
        policies = dict(policies or {})
        _check_types("codecs", list(codecs), types, exact=True)
        _check_types("split", list(split.rows), types, exact=False)
        _check_types("policies", list(policies), types, exact=False)
        caches = {}
        for t in types:
            policy = policies.get(t, NoAdmission())
            config = HaloCache.Config(capacity_bytes=split.capacity_bytes(t), policy=policy.name)
            cache = HaloCache(
                config, feature_dim=feature_dims[t], codec=codecs[t], policy=policy, device=device
            )
            _check_share(t, split, cache)
            caches[t] = cache
        return cls(caches, budget_bytes=split.budget_bytes)

    @classmethod
    def disabled(
        cls,
        *,
        feature_dims: Mapping[str, int],
        codecs: Mapping[str, Codec],
        device: torch.device | str = "cpu",
    ) -> PerTypeHaloCache:
        """Every type at capacity 0, policy ``none``: each halo row is fetched, none kept."""
        empty = split_budget(0, {})
        return cls.build(empty, feature_dims=feature_dims, codecs=codecs, device=device)

    # ---- per type -----------------------------------------------------------------------------
    @property
    def node_types(self) -> list[str]:
        """Node types with a cache, in the graph's order."""
        return list(self._caches)

    def of(self, node_type: str) -> HaloCache:
        """The cache of ``node_type``.

        Raises:
            ValueError: No cache for ``node_type``.
        """
        cache = self._caches.get(node_type)
        if cache is None:
            raise ValueError(f"no halo cache for node type {node_type!r}; have {self.node_types}")
        return cache

    @property
    def capacity_bytes(self) -> dict[str, int]:
        """Node type -> its share of the budget (sums to at most ``budget_bytes``)."""
        return {t: c.config.capacity_bytes for t, c in self._caches.items()}

    def lookup(self, node_type: str, gid: Tensor) -> CacheLookup:
        """``HaloCache.lookup`` of ``node_type``'s cache (one policy step for that type)."""
        return self.of(node_type).lookup(gid)

    def lookup_encoded(self, node_type: str, gid: Tensor) -> EncodedLookup:
        """``HaloCache.lookup_encoded`` of ``node_type``'s cache."""
        return self.of(node_type).lookup_encoded(gid)

    def peek(self, node_type: str, gid: Tensor) -> CacheLookup:
        """``HaloCache.peek`` (no counters, no policy step)."""
        return self.of(node_type).peek(gid)

    def contains(self, node_type: str, gid: Tensor) -> Tensor:
        """``[K]`` bool: which ``gid`` of ``node_type`` are cached."""
        return self.of(node_type).contains(gid)

    def would_admit(self, node_type: str, gid: Tensor) -> Tensor:
        """``[K]`` bool: which uncached ``gid`` of ``node_type`` its policy would keep (pure)."""
        return self.of(node_type).would_admit(gid)

    def insert(self, node_type: str, gid: Tensor, rows: EncodedRows) -> int:
        """``HaloCache.insert`` into ``node_type``'s cache; ``rows`` in that type's codec."""
        return self.of(node_type).insert(gid, rows)

    # ---- accounting ---------------------------------------------------------------------------
    @property
    def stats(self) -> PerTypeCacheStats:
        """Every type's ``CacheStats`` and their total."""
        return PerTypeCacheStats({t: c.stats for t, c in self._caches.items()})

    def reset_stats(self) -> None:
        """Zero every type's counters (contents stay)."""
        for cache in self._caches.values():
            cache.reset_stats()


def _check_types(what: str, given: list[str], types: list[str], *, exact: bool) -> None:
    extra = [t for t in given if t not in types]
    missing = [t for t in types if t not in given] if exact else []
    if extra or missing:
        raise ValueError(
            f"{what} names node types {given} but the caches are for {types}"
            + (f" (unknown: {extra})" if extra else "")
            + (f" (missing: {missing})" if missing else "")
            + "; key it by the same node types"
        )


def _check_share(node_type: str, split: BudgetSplit, cache: HaloCache) -> None:
    if split.rows.get(node_type, 0) == 0:
        return
    if split.row_bytes[node_type] != cache.row_bytes:
        raise ValueError(
            f"split for node type {node_type!r} assumed {split.row_bytes[node_type]} bytes per "
            f"row but its {cache.codec.name} cache uses {cache.row_bytes}; build the TypeDemand "
            "with TypeDemand.of(score, codec, feature_dim)"
        )
    if cache.policy.name == "none":
        raise ValueError(
            f"node type {node_type!r} has a cache share of {split.rows[node_type]} rows but no "
            "admission policy; pass policies[type], or leave the type out of the demand"
        )


# ---- the fetchers -----------------------------------------------------------------------------
class PerTypeHaloFetcher:
    """Cache-backed halo fetch per node type: one ``HaloFetcher`` per type of ``cache``.

    Args:
        cache: The worker's typed cache.
        sources: Node type -> the owners of that type's rows (``EncodedFeatureSource`` to have
            them encoded by the owners in the type's codec).
        wire: Optional lossless wire stage for every type (``zstd`` / ``lz4``).

    Raises:
        ValueError: ``sources`` does not name exactly the cache's node types.
    """

    def __init__(
        self,
        cache: PerTypeHaloCache,
        sources: Mapping[str, FeatureSource],
        *,
        wire: str | None = None,
    ) -> None:
        _check_types("sources", list(sources), cache.node_types, exact=True)
        self.cache = cache
        self._fetchers = {
            t: HaloFetcher(cache.of(t), sources[t], cache.of(t).codec, wire=wire)
            for t in cache.node_types
        }

    def of(self, node_type: str) -> HaloFetcher:
        """The fetcher of ``node_type`` (raises ``ValueError`` for a type without a cache)."""
        self.cache.of(node_type)
        return self._fetchers[node_type]

    def gather(self, node_type: str, gid: Tensor) -> Tensor:
        """Float32 rows ``[K, F_t]`` of halo ``gid`` of ``node_type``, in request order."""
        return self.of(node_type).gather(gid)

    def gather_encoded(self, node_type: str, gid: Tensor) -> EncodedRows:
        """Rows of halo ``gid`` of ``node_type`` in its codec, in request order, not decoded."""
        return self.of(node_type).gather_encoded(gid)

    def warm_up(self) -> dict[str, int]:
        """Prefetch every type's warm-start rows (before epoch 0); rows stored per type."""
        return {t: f.warm_up() for t, f in self._fetchers.items()}

    @property
    def stats(self) -> dict[str, FetchStats]:
        """Node type -> its fetch ledger."""
        return {t: f.stats for t, f in self._fetchers.items()}

    def counters(self) -> PerTypeCacheCounters:
        """Per type fetch counts so far plus the caches' current levels."""
        return PerTypeCacheCounters({t: f.counters() for t, f in self._fetchers.items()})
