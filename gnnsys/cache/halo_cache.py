"""Per-worker cache of halo feature rows, kept encoded, under a byte budget.

Storage is a fixed set of ``S`` slots allocated once in the codec's layout (``Codec.empty``), so
rows stay compressed in memory and a hit costs one decode of just the rows asked for. Which gids
occupy the slots is decided by an ``AdmissionPolicy`` (``admission.py``); this class only
executes its plans and counts.

Budget accounting (documented contract, checked by tests): every slot costs
``codec.row_nbytes(F) + INDEX_BYTES_PER_ROW`` bytes, where the index overhead is the three int64
arrays of the gid index (``slot -> gid``, and the sorted ``gid`` / ``slot`` pair searched on
lookup). ``S = capacity_bytes // that``, so ``bytes_held <= capacity_bytes`` always. The dense
``[N]`` score arrays of the scored policies are policy state, reported by the policy, not here.

Call ``lookup`` once per batch with all of the batch's halo gids: adaptive policies count one
``lookup`` as one step of decay.

Shape legend: ``K`` requested rows, ``F`` feature dim, ``S`` slots, ``A`` admitted rows.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from torch import Tensor

from gnnsys.cache.admission import AdmissionPlan, AdmissionPolicy, make_policy
from gnnsys.cache.codecs.base import Codec, EncodedRows, put, take
from gnnsys.types import CacheLookup

__all__ = ["INDEX_BYTES_PER_ROW", "CacheStats", "EncodedLookup", "HaloCache"]

log = logging.getLogger(__name__)

INDEX_BYTES_PER_ROW = 24
"""Index bytes per slot: int64 ``slot -> gid``, plus the int64 sorted gid and its int64 slot."""


@dataclass(frozen=True, slots=True)
class CacheStats:
    """Counters of one cache since construction (or ``reset_stats``).

    Attributes:
        hits: Requested rows served from the cache.
        misses: Requested rows not in the cache.
        bytes_saved: ``hits * codec.row_nbytes(F)``: encoded bytes not fetched thanks to hits.
        bytes_held: ``rows_held * row_bytes`` (payload + index), never above ``capacity_bytes``.
        rows_held: Occupied slots.
        capacity_rows: Slots.
        capacity_bytes: The byte budget.
        admitted: Rows stored.
        evicted: Rows dropped to make room.
    """

    hits: int
    misses: int
    bytes_saved: int
    bytes_held: int
    rows_held: int
    capacity_rows: int
    capacity_bytes: int
    admitted: int
    evicted: int

    @property
    def hit_rate(self) -> float:
        """``hits / (hits + misses)``, 0 before any lookup."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


@dataclass(frozen=True, slots=True, eq=False)
class EncodedLookup:
    """Result of ``HaloCache.lookup_encoded``: hits still encoded (for a fused dequant kernel).

    Attributes:
        hit_pos: ``[H]`` positions in the request that hit.
        hit_rows: ``H`` encoded rows, in ``hit_pos`` order.
        miss_pos: ``[K - H]`` positions that missed.
        miss_gid: ``[K - H]`` gids to fetch.
    """

    hit_pos: Tensor
    hit_rows: EncodedRows
    miss_pos: Tensor
    miss_gid: Tensor


class HaloCache:
    """A worker's cache of encoded halo rows under a byte budget.

    Args:
        config: Budget and policy name.
        feature_dim: ``F``.
        codec: A concrete codec (``auto`` must be resolved first).
        policy: Admission policy; required unless ``config.policy == "none"`` (scored policies
            need scores: see ``admission.make_policy``). Its ``name`` must equal ``config.policy``.
        device: Where the slots live (``CacheConfig.placement``): the host, or the trainer's
            GPU, where the budget is then device memory and ``lookup_encoded`` hands the fused
            layer 0 its hits without a host round trip. Lookups of decoded rows (``lookup``,
            ``peek``) always return host rows.

    Raises:
        ValueError: Negative budget, a policy that disagrees with the config, or ``auto`` codec.
    """

    @dataclass(frozen=True, kw_only=True, slots=True)
    class Config:
        """Cache budget and admission policy."""

        capacity_bytes: int = 0
        """Byte budget: encoded rows plus ``INDEX_BYTES_PER_ROW`` per row."""
        policy: str = "none"
        """Admission policy: ``none``, ``degree``, ``presample`` or ``adaptive``."""

        def __post_init__(self) -> None:
            if self.capacity_bytes < 0:
                raise ValueError(f"capacity_bytes={self.capacity_bytes}; choose >= 0")

        @classmethod
        def from_ratio(
            cls, ratio: float, *, owned_feature_bytes: int, policy: str = "none"
        ) -> HaloCache.Config:
            """Budget = ``ratio`` x the bytes of the worker's own feature matrix.

            Args:
                ratio: E.g. 0.25 (``--cache-ratio``); 1.0 with fp32 holds as many rows as owned
                    (minus index overhead), and a smaller codec holds proportionally more.
                owned_feature_bytes: ``shard.x.nbytes`` (as stored, usually fp32).
                policy: Admission policy name.

            Raises:
                ValueError: A negative ratio.
            """
            if ratio < 0:
                raise ValueError(f"cache ratio={ratio}; choose ratio >= 0")
            return cls(capacity_bytes=int(ratio * owned_feature_bytes), policy=policy)

    def __init__(
        self,
        config: Config,
        *,
        feature_dim: int,
        codec: Codec,
        policy: AdmissionPolicy | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        if codec.name == "auto":
            raise ValueError("HaloCache needs a concrete codec; pass AutoCodec().resolve(x)")
        policy = policy if policy is not None else make_policy(config.policy)
        if policy.name != config.policy:
            raise ValueError(f"policy {policy.name!r} differs from config.policy={config.policy!r}")
        self.config = config
        self.codec = codec
        self.policy = policy
        self.feature_dim = feature_dim
        self.row_bytes = codec.row_nbytes(feature_dim) + INDEX_BYTES_PER_ROW
        self.capacity_rows = config.capacity_bytes // self.row_bytes
        # the slots (encoded rows) live on ``device``; the gid index stays on the host
        self.device = torch.device(device)
        self._store = codec.empty(self.capacity_rows, feature_dim).to(self.device)
        self._slot_gid = torch.full((self.capacity_rows,), -1, dtype=torch.int64)
        self._free_slots = torch.arange(self.capacity_rows - 1, -1, -1, dtype=torch.int64)
        self._num_free = self.capacity_rows
        self._sorted_gid = torch.empty(0, dtype=torch.int64)
        self._sorted_slot = torch.empty(0, dtype=torch.int64)
        self.reset_stats()

    # ---- queries --------------------------------------------------------------------------
    @property
    def cached_gid(self) -> Tensor:
        """``[rows_held]`` cached gids, ascending."""
        return self._sorted_gid

    def contains(self, gid: Tensor) -> Tensor:
        """``[K]`` bool: which ``gid`` are cached (no counters, no policy step)."""
        return self._find(torch.as_tensor(gid, dtype=torch.int64))[0]

    def would_admit(self, gid: Tensor) -> Tensor:
        """``[K]`` bool: which uncached ``gid`` the policy would store if fetched now.

        Pure: asks ``policy.decide`` with the counts it has so far; stores and counts nothing.
        A cache of capacity 0 admits nothing (no policy call).
        """
        gid = torch.as_tensor(gid, dtype=torch.int64)
        if self.capacity_rows == 0 or gid.shape[0] == 0:
            return torch.zeros(gid.shape[0], dtype=torch.bool)
        plan = self.policy.decide(gid, self._sorted_gid, self.capacity_rows)
        return torch.isin(gid, plan.admit_gid)

    def peek(self, gid: Tensor) -> CacheLookup:
        """``lookup`` without side effects: no counters, no policy step (exact evaluation)."""
        gid = torch.as_tensor(gid, dtype=torch.int64)
        hit, slot = self._find(gid)
        return self._decoded(gid, hit, slot)

    def _decoded(self, gid: Tensor, hit: Tensor, slot: Tensor) -> CacheLookup:
        """Host float32 rows of the hits (decoded where they live, then copied to the host)."""
        values = torch.zeros(gid.shape[0], self.feature_dim, dtype=torch.float32)
        if slot.shape[0]:
            rows = take(self._store, slot.to(self.device))
            values[hit] = self.codec.decode(rows).to(values.device)
        miss_pos = torch.nonzero(~hit).flatten()
        return CacheLookup(values_NF=values, miss_pos=miss_pos, miss_gid=gid[miss_pos])

    def _find(self, gid: Tensor) -> tuple[Tensor, Tensor]:
        """(hit mask ``[K]``, slot of each hit) for ``gid``; one binary search per gid."""
        if self._sorted_gid.shape[0] == 0:
            return torch.zeros(gid.shape[0], dtype=torch.bool), torch.empty(0, dtype=torch.int64)
        pos = torch.searchsorted(self._sorted_gid, gid).clamp_(max=self._sorted_gid.shape[0] - 1)
        hit = self._sorted_gid[pos] == gid
        return hit, self._sorted_slot[pos[hit]]

    def _split(self, gid: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        gid = torch.as_tensor(gid, dtype=torch.int64)
        hit, slot = self._find(gid)
        self.policy.observe(gid)
        n_hit = int(slot.shape[0])
        self._hits += n_hit
        self._misses += int(gid.shape[0]) - n_hit
        return hit, slot, gid

    def count_misses(self, gid: Tensor) -> None:
        """Record a lookup of ``gid`` that can find nothing (capacity 0), without one.

        The stats and the policy's observation are what ``lookup`` would record; no rows are
        returned, so the caller needs no ``[K, F]`` of zeros.
        """
        gid = torch.as_tensor(gid, dtype=torch.int64)
        self.policy.observe(gid)
        self._misses += int(gid.shape[0])

    def lookup(self, gid: Tensor) -> CacheLookup:
        """Decoded float32 rows for the cached ``gid``; misses listed for the caller to fetch.

        Args:
            gid: ``[K]`` int64 halo gids of one batch.

        Returns:
            ``CacheLookup`` with ``values_NF`` ``[K, F]`` (rows at ``miss_pos`` are zero).
        """
        hit, slot, gid = self._split(gid)
        return self._decoded(gid, hit, slot)

    def lookup_encoded(self, gid: Tensor) -> EncodedLookup:
        """Like ``lookup`` but leaves hit rows encoded (for a fused dequantizing aggregation).

        The hit rows are on the cache's ``device``: with the slots on a GPU they never cross
        back to the host.
        """
        hit, slot, gid = self._split(gid)
        miss_pos = torch.nonzero(~hit).flatten()
        hit_rows = take(self._store, slot.to(self.device))
        return EncodedLookup(torch.nonzero(hit).flatten(), hit_rows, miss_pos, gid[miss_pos])

    # ---- updates --------------------------------------------------------------------------
    def warm_plan(self) -> AdmissionPlan:
        """The policy's prefetch list for this cache's capacity."""
        return self.policy.warm_start(self.capacity_rows)

    def insert(self, gid: Tensor, rows: EncodedRows) -> int:
        """Offer fetched rows; the policy decides which to store and what to evict.

        Args:
            gid: ``[A]`` int64 distinct gids of ``rows`` (already-cached gids are ignored).
            rows: Their encoded rows, in ``gid`` order, in this cache's codec.

        Returns:
            Rows stored.

        Raises:
            ValueError: ``gid`` and ``rows`` lengths differ, or the codec differs.
        """
        gid = torch.as_tensor(gid, dtype=torch.int64)
        if gid.shape[0] != rows.num_rows:
            raise ValueError(f"insert got {gid.shape[0]} gids for {rows.num_rows} rows")
        if rows.codec != self.codec.name:
            raise ValueError(f"insert got {rows.codec} rows; this cache holds {self.codec.name}")
        if self.capacity_rows == 0 or gid.shape[0] == 0:
            return 0
        fresh = ~self._find(gid)[0]
        plan = self.policy.decide(gid[fresh], self._sorted_gid, self.capacity_rows)
        self._evict(plan.evict_gid)
        admit = plan.admit_gid[: self._num_free]
        if admit.shape[0] == 0:
            if plan.evict_gid.shape[0]:
                self._reindex()
            return 0
        order = torch.argsort(gid)
        src_pos = order[torch.searchsorted(gid[order], admit)]
        slots = self._free_slots[self._num_free - admit.shape[0] : self._num_free].flip(0)
        self._num_free -= int(admit.shape[0])
        put(self._store, slots.to(self.device), take(rows, src_pos).to(self.device))
        self._slot_gid[slots] = admit
        self._admitted += int(admit.shape[0])
        self._reindex()
        return int(admit.shape[0])

    def _evict(self, evict_gid: Tensor) -> None:
        if evict_gid.shape[0] == 0:
            return
        _, slot = self._find(evict_gid)
        self._slot_gid[slot] = -1
        self._free_slots[self._num_free : self._num_free + slot.shape[0]] = slot
        self._num_free += int(slot.shape[0])
        self._evicted += int(slot.shape[0])  # the caller reindexes once after admitting

    def _reindex(self) -> None:
        """Rebuild the sorted gid index (O(S log S); once per insert or eviction)."""
        used = torch.nonzero(self._slot_gid >= 0).flatten()
        self._sorted_gid, order = torch.sort(self._slot_gid[used])
        self._sorted_slot = used[order]

    # ---- accounting -----------------------------------------------------------------------
    def reset_stats(self) -> None:
        """Zero the hit, miss, admission and eviction counters (contents stay)."""
        self._hits = self._misses = self._admitted = self._evicted = 0

    @property
    def stats(self) -> CacheStats:
        """A snapshot of the counters."""
        held = int(self._sorted_gid.shape[0])
        return CacheStats(
            hits=self._hits,
            misses=self._misses,
            bytes_saved=self._hits * (self.row_bytes - INDEX_BYTES_PER_ROW),
            bytes_held=held * self.row_bytes,
            rows_held=held,
            capacity_rows=self.capacity_rows,
            capacity_bytes=self.config.capacity_bytes,
            admitted=self._admitted,
            evicted=self._evicted,
        )
