"""Feature-source interfaces: where the feature rows of halo nodes come from, and the records.

The cache and the fetcher see owners only through ``FeatureSource``; ``gnnsys.train.remote``
implements it over Ray, and an in-process implementation serves tests and single-worker runs.

``EncodedFeatureSource`` adds an encoded fetch: the owner encodes the requested rows once per
request with the requester's codec, and the rows stay encoded on the wire and in the cache.

``HaloFeatureSource`` is what a worker's trainer and its layer-0 helpers use: every row of a
batch (own rows locally, halo rows through the cache and the owners), optionally split into own
float rows and encoded halo rows, plus residency, warm-up and counters. It emits
:class:`SplitRows` and :class:`CacheCounters`.

Shape legend: ``K`` requested rows, ``F`` features, ``L`` own rows, ``H`` halo rows.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from torch import Tensor

from gnnsys.cache.codecs.base import Codec, EncodedRows

__all__ = [
    "CacheCounters",
    "EncodedFeatureSource",
    "FeatureSource",
    "HaloFeatureSource",
    "SplitRows",
]


class FeatureSource(Protocol):
    """Returns feature rows for gids (owned by one or several remote parts)."""

    def fetch(self, gid: Tensor) -> Tensor:
        """Rows ``[K, F]`` (float32) for ``gid`` ``[K]`` int64, in request order."""
        ...


@runtime_checkable
class EncodedFeatureSource(Protocol):
    """A ``FeatureSource`` whose owners can encode before sending."""

    def fetch(self, gid: Tensor) -> Tensor:
        """Rows ``[K, F]`` (float32) for ``gid`` ``[K]`` int64, in request order."""
        ...

    def fetch_encoded(self, gid: Tensor, codec: Codec) -> EncodedRows:
        """Rows for ``gid`` ``[K]`` encoded by the owner with ``codec``, in request order.

        ``codec`` is a small frozen object, cheap to pickle to a Ray actor per request.
        """
        ...


@dataclass(frozen=True, slots=True, eq=False)
class SplitRows:
    """Rows of one request split by where they live: own rows as floats, halo rows encoded.

    Attributes:
        local_pos: ``[L]`` int64 positions in the request of the rows this worker owns.
        local_LF: ``[L, F]`` float32 rows at ``local_pos``.
        remote_pos: ``[H]`` int64 positions of the other rows.
        remote: ``H`` rows at ``remote_pos`` in the run codec's format, never decoded.
    """

    local_pos: Tensor
    local_LF: Tensor
    remote_pos: Tensor
    remote: EncodedRows


LEVELS = ("rows_held", "capacity_rows", "bytes_held", "capacity_bytes")
"""Fields of :class:`CacheCounters` that are levels (kept by ``since``), not running counts."""


@dataclass(frozen=True, slots=True)
class CacheCounters:
    """A worker's halo cache and fetcher counters (the ``cache`` object of ``metrics.jsonl``).

    The first nine fields are ``gnnsys.cache.FetchStats`` (running counts since the worker
    started); the last four are ``CacheStats`` levels at the time of reading.
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
    rows_held: int = 0
    capacity_rows: int = 0
    bytes_held: int = 0
    capacity_bytes: int = 0

    def since(self, before: CacheCounters) -> CacheCounters:
        """Counts accrued since ``before``; levels as they are now (one epoch's report)."""
        diff = {
            f.name: getattr(self, f.name) - (0 if f.name in LEVELS else getattr(before, f.name))
            for f in dataclasses.fields(self)
        }
        return CacheCounters(**diff)

    def __add__(self, other: CacheCounters) -> CacheCounters:
        """Field-wise sum (over ranks: levels add up to the whole run's)."""
        fields = dataclasses.fields(self)
        return CacheCounters(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields}
        )

    def to_json(self) -> dict[str, int]:
        """Plain dict in field order (the keys and order of ``metrics.jsonl``'s ``cache``)."""
        return {f.name: int(getattr(self, f.name)) for f in dataclasses.fields(self)}


class HaloFeatureSource(Protocol):
    """A worker's feature rows: own rows locally, halo rows through its cache and the owners.

    The trainer calls ``fetch``; layer-0 helpers call ``fetch_split`` (fused dequantization) or
    ``resident_mask`` and ``would_admit`` (owner-side partial sums); the worker calls
    ``warm_up`` before epoch 0 and ``counters`` around each epoch.
    """

    def fetch(self, gid: Tensor) -> Tensor:
        """Rows ``[K, F]`` float32 for ``gid`` ``[K]`` int64, in request order."""
        ...

    def fetch_distinct(self, gid: Tensor) -> Tensor:
        """``fetch`` of a request that never repeats a gid (a sampled ``n_id``)."""
        ...

    def fetch_split(self, gid: Tensor) -> SplitRows:
        """Own rows as float32 and halo rows left in the run codec (the same messages)."""
        ...

    def resident_mask(self, gid: Tensor) -> Tensor:
        """``[K]`` bool: rows owned here or cached, i.e. fetching them costs no traffic."""
        ...

    def would_admit(self, gid: Tensor) -> Tensor:
        """``[K]`` bool: halo rows the cache would keep if they were fetched now (pure)."""
        ...

    def warm_up(self) -> int:
        """Prefetch the cache's warm-start rows (before epoch 0); returns rows stored."""
        ...

    def counters(self) -> CacheCounters | None:
        """Cache and fetcher counters so far; ``None`` when the worker keeps no cache."""
        ...
