"""Fills a batch's halo rows: cache first, then the owners for the misses.

``HaloFetcher.gather(gid)`` = ``cache.lookup`` -> fetch the distinct missed gids (encoded by the
owner when the source supports it) -> offer them to the cache -> decode into request order.
Every byte is counted in a ``FetchStats`` ledger, with the no-cache fp32 cost alongside so a run
reports its reduction directly.

Shape legend: ``K`` requested rows, ``U`` distinct missed gids, ``F`` feature dim, ``N`` nodes.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

import torch
from torch import Tensor

from gnnsys.cache.base import CacheCounters, EncodedFeatureSource, FeatureSource
from gnnsys.cache.codecs.base import Codec, EncodedRows, put, take
from gnnsys.cache.codecs.wire import wire_compress, wire_decompress
from gnnsys.cache.halo_cache import HaloCache

__all__ = ["FetchStats", "HaloFetcher", "LocalFeatureSource"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FetchStats:
    """Ledger of one fetcher since construction.

    Attributes:
        batches: ``gather`` calls.
        rows_requested: Rows asked for (with repeats).
        rows_hit: Rows served by the cache.
        rows_fetched: Distinct rows fetched from owners (the remote vertices).
        bytes_received: Encoded bytes fetched (codec ``nbytes``, before any wire stage).
        bytes_wire: Bytes after the lossless wire stage (== ``bytes_received`` without one).
        bytes_fp32: What the same rows would cost as fp32 with no cache: ``rows_requested``
            distinct per batch x ``F`` x 4 (the baseline of the ratio).
        prefetch_rows: Rows fetched by ``warm_up`` (not in the per-batch counts).
        prefetch_bytes: Their encoded bytes.
    """

    batches: int = 0
    rows_requested: int = 0
    rows_hit: int = 0
    rows_fetched: int = 0
    bytes_received: int = 0
    bytes_wire: int = 0
    bytes_fp32: int = 0
    prefetch_rows: int = 0
    prefetch_bytes: int = 0


class LocalFeatureSource:
    """In-process owners: serves rows of parts other than ``part`` from a full feature matrix.

    Args:
        x_NF: ``[N, F]`` features of the whole graph (tensor or numpy array, float32/float16).
        owner_N: ``[N]`` owner part of every gid.
        part: The requesting worker's part; asking for its own rows is an error.
    """

    def __init__(self, x_NF: Tensor, owner_N: Tensor, part: int) -> None:
        self.x_NF = torch.as_tensor(x_NF)
        self.owner_N = torch.as_tensor(owner_N)
        self.part = part
        self.requests = 0
        self.rows_served = 0

    def _rows(self, gid: Tensor) -> Tensor:
        gid = torch.as_tensor(gid, dtype=torch.int64)
        if gid.numel() and bool((self.owner_N[gid] == self.part).any()):
            bad = int(gid[self.owner_N[gid] == self.part][0])
            raise ValueError(
                f"gid {bad} is owned by part {self.part}; read it from the local shard"
            )
        self.requests += 1
        self.rows_served += int(gid.shape[0])
        return self.x_NF[gid].float()

    def fetch(self, gid: Tensor) -> Tensor:
        """Float32 rows ``[K, F]`` of ``gid``, in request order."""
        return self._rows(gid)

    def fetch_encoded(self, gid: Tensor, codec: Codec) -> EncodedRows:
        """Rows of ``gid`` encoded once with ``codec``, in request order."""
        return codec.encode(self._rows(gid))


class HaloFetcher:
    """Cache-backed halo feature fetch for one worker.

    Args:
        cache: This worker's cache (its codec must equal ``codec``).
        source: The owners; ``fetch_encoded`` is used when available, else fp32 ``fetch``
            (then the fp32 bytes are what is counted as received).
        codec: Codec of the cache and the wire.
        wire: Optional lossless wire stage, ``"zstd"`` or ``"lz4"`` (measured into
            ``bytes_wire``; applied and undone in-process here).

    Raises:
        ValueError: ``codec`` differs from the cache's.
    """

    def __init__(
        self, cache: HaloCache, source: FeatureSource, codec: Codec, *, wire: str | None = None
    ) -> None:
        if codec.name != cache.codec.name:
            raise ValueError(f"fetcher codec {codec.name!r} != cache codec {cache.codec.name!r}")
        self.cache = cache
        self.source = source
        self.codec = codec
        self.wire = wire
        self._stats = FetchStats()

    def _fetch(self, gid: Tensor) -> tuple[EncodedRows, int, int]:
        """(encoded rows, bytes received, bytes on the wire) for distinct ``gid``."""
        if isinstance(self.source, EncodedFeatureSource):
            enc = self.source.fetch_encoded(gid, self.codec)
            received = self.codec.nbytes(enc)
        else:
            raw = self.source.fetch(gid)
            received = raw.numel() * 4  # fp32 on the wire; encoded here only for the cache
            enc = self.codec.encode(raw)
        wire_bytes = received
        if self.wire is not None:
            frame = wire_compress(enc, self.wire)
            wire_bytes = frame.wire_nbytes
            enc = wire_decompress(frame)
        return enc, received, wire_bytes

    def gather(self, gid: Tensor, *, distinct: bool = False) -> Tensor:
        """Float32 rows ``[K, F]`` of halo ``gid`` ``[K]``, in request order.

        Missed gids are fetched once each even if repeated in the request. ``distinct``: the
        caller guarantees no gid repeats, so a request with nothing cached is fetched in its
        own order and decoded as it comes (no sort, no second copy).
        """
        gid = torch.as_tensor(gid, dtype=torch.int64)
        if self.cache.capacity_rows or not gid.shape[0]:
            found = self.cache.lookup(gid)
            values, miss_pos, miss_gid = found.values_NF, found.miss_pos, found.miss_gid
        else:  # nothing can be cached: every row is a miss, and no zeros are needed
            self.cache.count_misses(gid)
            values, miss_pos, miss_gid = None, torch.arange(gid.shape[0]), gid
        uniq = torch.empty(0, dtype=torch.int64)
        received = wire_bytes = 0
        all_missed = miss_pos.shape[0] == gid.shape[0]  # nothing cached: uniq is gid's
        if miss_pos.shape[0] and all_missed and distinct:  # fetched in request order
            uniq = gid
            enc, received, wire_bytes = self._fetch(uniq)
            values = self.codec.decode(enc)
            self.cache.insert(uniq, enc)
        elif miss_pos.shape[0]:
            uniq, inverse = torch.unique(miss_gid, return_inverse=True)
            enc, received, wire_bytes = self._fetch(uniq)
            if values is None or all_missed:  # no scatter into the zeros
                values = self.codec.decode(enc)[inverse]
            else:
                values[miss_pos] = self.codec.decode(enc)[inverse]
            self.cache.insert(uniq, enc)
        count = int(gid.shape[0]) if distinct else int(uniq.shape[0]) if all_missed else None
        misses = int(miss_pos.shape[0])
        self._count(gid, misses, int(uniq.shape[0]), received, wire_bytes, count)
        assert values is not None  # a non-empty request fetched, an empty one looked up
        return values

    def gather_encoded(self, gid: Tensor) -> EncodedRows:
        """Rows of halo ``gid`` ``[K]`` in the codec's format, in request order, never decoded.

        Same cache lookups, fetches, admissions and counters as ``gather``; for a fused
        dequantizing aggregation (``gnnsys.kernels.aggregate`` with ``scale``/``zero``). The
        rows are on the cache's device (fetched ones copied there once, then stored).
        """
        gid = torch.as_tensor(gid, dtype=torch.int64)
        found = self.cache.lookup_encoded(gid)
        on = self.cache.device  # the rows come out where the cache keeps its slots
        out = self.codec.empty(int(gid.shape[0]), self.cache.feature_dim).to(on)
        if found.hit_pos.shape[0]:
            put(out, found.hit_pos.to(on), found.hit_rows)
        uniq = torch.empty(0, dtype=torch.int64)
        received = wire_bytes = 0
        if found.miss_pos.shape[0]:
            uniq, inverse = torch.unique(found.miss_gid, return_inverse=True)
            enc, received, wire_bytes = self._fetch(uniq)
            put(out, found.miss_pos.to(on), take(enc, inverse).to(on))
            self.cache.insert(uniq, enc)
        self._count(gid, int(found.miss_pos.shape[0]), int(uniq.shape[0]), received, wire_bytes)
        return out

    def _count(
        self,
        gid: Tensor,
        misses: int,
        fetched: int,
        received: int,
        wire: int,
        distinct: int | None = None,
    ) -> None:
        """Add one batch to the stats; ``distinct``: ``gid``'s distinct count when known."""
        if distinct is None:
            distinct = int(torch.unique(gid).shape[0])
        s = self._stats
        self._stats = FetchStats(
            batches=s.batches + 1,
            rows_requested=s.rows_requested + int(gid.shape[0]),
            rows_hit=s.rows_hit + int(gid.shape[0]) - misses,
            rows_fetched=s.rows_fetched + fetched,
            bytes_received=s.bytes_received + received,
            bytes_wire=s.bytes_wire + wire,
            bytes_fp32=s.bytes_fp32 + distinct * self.cache.feature_dim * 4,
            prefetch_rows=s.prefetch_rows,
            prefetch_bytes=s.prefetch_bytes,
        )

    def warm_up(self) -> int:
        """Prefetch the policy's warm-start rows into the cache; returns rows stored.

        Costs one fetch of up to ``capacity_rows`` rows, counted as ``prefetch_*``.
        """
        plan = self.cache.warm_plan()
        if plan.admit_gid.shape[0] == 0:
            return 0
        gid = torch.sort(plan.admit_gid).values
        enc, received, _ = self._fetch(gid)
        stored = self.cache.insert(gid, enc)
        s = self._stats
        self._stats = dataclasses.replace(
            s,
            prefetch_rows=s.prefetch_rows + int(gid.shape[0]),
            prefetch_bytes=s.prefetch_bytes + received,
        )
        log.info("warm-up prefetched %d rows, stored %d", gid.shape[0], stored)
        return stored

    @property
    def stats(self) -> FetchStats:
        """The ledger so far."""
        return self._stats

    def counters(self) -> CacheCounters:
        """The fetch counts so far plus the cache's current levels (one record)."""
        held = self.cache.stats
        return CacheCounters(
            **dataclasses.asdict(self._stats),
            rows_held=held.rows_held,
            capacity_rows=held.capacity_rows,
            bytes_held=held.bytes_held,
            capacity_bytes=held.capacity_bytes,
        )
