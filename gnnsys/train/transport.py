"""Remote neighbor sampling and feature fetch: routing (pure torch) plus the Ray executor.

A worker sees remote shards only through the stage protocols: :class:`RoutedNeighborSource` is
the sampler's ``NeighborSource`` and :class:`RoutedFeatureSource` the trainer's
``FeatureSource``. Each splits a request by owner, serves its own part locally, and sends one
message per remote owner (so one per hop per owner for sampling, one per mini-batch per owner for
features) through an :class:`OwnerClient`. The Ray client issues every owner's call before
waiting on any, so owners work in parallel, and every wait has a deadline.

The ledger counts the payload arrays of every message: ``dst_gid`` out and
``count/src_gid/e_id`` back for structure, ``gid`` out and the float32 rows back for features.

Shape legend: ``M`` destinations, ``E`` drawn edges, ``K`` requested rows, ``F`` features.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor

from gnnsys.cache.codecs import Codec, EncodedRows, concat
from gnnsys.errors import RemoteCallTimeoutError
from gnnsys.sampler.base import NeighborSource
from gnnsys.train.ledger import Ledger
from gnnsys.types import NeighborSample

__all__ = [
    "FetchSpec",
    "OwnerClient",
    "RayOwnerClient",
    "RoutedFeatureSource",
    "RoutedNeighborSource",
    "ShardOwner",
    "SplitRows",
    "group_by_owner",
]

log = logging.getLogger(__name__)

SampleArrays = tuple[np.ndarray, np.ndarray, np.ndarray]
"""``(count_M, src_gid_E, e_id_E)`` int64 arrays as an owner returns them."""


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


class OwnerClient(Protocol):
    """Sends one batched request to each owner and returns the answers keyed by part."""

    def sample_many(
        self, dst_by_part: dict[int, np.ndarray], fanout: int, *, seed: int, hop: int, replace: bool
    ) -> dict[int, SampleArrays]:
        """Sample in-neighbors of ``dst_by_part[p]`` at owner ``p``, for every ``p`` at once."""
        ...

    def fetch_many(self, gid_by_part: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
        """Feature rows ``[K, F]`` float32 of ``gid_by_part[p]`` from owner ``p``."""
        ...

    def fetch_encoded_many(
        self, gid_by_part: dict[int, np.ndarray], codec: Codec
    ) -> dict[int, EncodedRows]:
        """Rows of ``gid_by_part[p]`` encoded by owner ``p`` with ``codec`` before sending."""
        ...

    def partial_many(
        self,
        req_by_part: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray | None]],
        codec: Codec | None = None,
    ) -> dict[int, EncodedRows]:
        """Partial sums ``[G, F]`` of ``req_by_part[p]`` computed at owner ``p``, for every ``p``.

        Each request is ``(group_rowptr, src_gid, src_weight)`` (see ``ShardOwner.partial_sums``);
        answers are encoded with ``codec``, or plain float32 (codec ``fp32``) without one.
        """
        ...


def group_by_owner(part_M: np.ndarray, skip: int) -> dict[int, np.ndarray]:
    """Positions of each owner's entries in request order (one stable sort), except ``skip``."""
    order = np.argsort(part_M, kind="stable")
    parts, starts = np.unique(part_M[order], return_index=True)
    groups = np.split(order, starts[1:])
    return {int(p): g for p, g in zip(parts, groups, strict=True) if int(p) != skip}


class RoutedNeighborSource:
    """``NeighborSource`` over a partitioned graph: owned dsts locally, the rest at their owners.

    Args:
        part: This worker's part.
        part_N: ``[N]`` owner of every gid (from the partition book).
        local: Source over this part's shard (answers only owned gids).
        client: Executor for the remote calls.
        ledger: Counts ``structure_request`` / ``structure_response``.
    """

    def __init__(
        self,
        part: int,
        part_N: np.ndarray,
        local: NeighborSource,
        client: OwnerClient,
        ledger: Ledger,
    ) -> None:
        self.part, self.part_N, self.local = part, part_N, local
        self.client, self.ledger = client, ledger

    def sample_neighbors(
        self, dst_gid: Tensor, fanout: int, *, seed: int, hop: int, replace: bool = False
    ) -> NeighborSample:
        """Same contract as ``NeighborSource.sample_neighbors``; see the module docstring."""
        dst_np = dst_gid.numpy().astype(np.int64, copy=False)
        part_M = self.part_N[dst_np]
        local_pos = np.flatnonzero(part_M == self.part)
        remote_pos = group_by_owner(part_M, skip=self.part)
        requests = {p: dst_np[pos] for p, pos in remote_pos.items()}
        for req in requests.values():
            self.ledger.record("structure_request", req)
        answers = (
            self.client.sample_many(requests, fanout, seed=seed, hop=hop, replace=replace)
            if requests
            else {}
        )
        pieces: list[tuple[np.ndarray, SampleArrays]] = []
        for p, pos in remote_pos.items():
            self.ledger.record("structure_response", *answers[p])
            pieces.append((pos, answers[p]))
        if local_pos.size:
            mine = self.local.sample_neighbors(
                torch.from_numpy(dst_np[local_pos]), fanout, seed=seed, hop=hop, replace=replace
            )
            arrays = (mine.count_M.numpy(), mine.src_gid_E.numpy(), mine.e_id_E.numpy())
            pieces.append((local_pos, arrays))
        return _merge_samples(int(dst_np.shape[0]), pieces)


def _merge_samples(num_dst: int, pieces: list[tuple[np.ndarray, SampleArrays]]) -> NeighborSample:
    """Interleave per-owner answers back into request order (grouped by destination)."""
    count_M = np.zeros(num_dst, dtype=np.int64)
    for pos, (count, _, _) in pieces:
        count_M[pos] = count
    start_M = np.concatenate([[0], np.cumsum(count_M)[:-1]]).astype(np.int64)
    total = int(count_M.sum())
    src_E = np.empty(total, dtype=np.int64)
    eid_E = np.empty(total, dtype=np.int64)
    for pos, (count, src, eid) in pieces:
        count = count.astype(np.int64, copy=False)
        # Output slot of each drawn edge: its dst's start plus its rank within that dst.
        within = np.arange(src.shape[0], dtype=np.int64) - np.repeat(
            np.cumsum(count) - count, count
        )
        slots = np.repeat(start_M[pos], count) + within
        src_E[slots] = src
        eid_E[slots] = eid
    return NeighborSample(
        count_M=torch.from_numpy(count_M),
        src_gid_E=torch.from_numpy(src_E),
        e_id_E=torch.from_numpy(eid_E),
    )


@dataclass(frozen=True, slots=True, eq=False)
class SplitRows:
    """Rows of one request split by where they live: owned rows as floats, halo rows encoded.

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


class RoutedFeatureSource:
    """``FeatureSource`` over partitioned features: owned rows locally, the rest at owners.

    Args:
        part: This worker's part.
        part_N: ``[N]`` owner of every gid.
        lid_N: ``[N]`` lid of every gid inside its owner's shard.
        local_x: ``[M_own, F]`` this part's feature rows (memory-mapped is fine).
        client: Executor for the remote calls.
        ledger: Counts ``feature_request`` / ``feature_response``.
        codec: Owners encode rows with it before sending (``None``: plain float32 rows); the
            ledger then counts the encoded bytes (``EncodedRows.nbytes``).
    """

    def __init__(
        self,
        part: int,
        part_N: np.ndarray,
        lid_N: np.ndarray,
        local_x: np.ndarray,
        client: OwnerClient,
        ledger: Ledger,
        codec: Codec | None = None,
    ) -> None:
        self.part, self.part_N, self.lid_N, self.local_x = part, part_N, lid_N, local_x
        self.client, self.ledger, self.codec = client, ledger, codec

    def _route(
        self, gid_np: np.ndarray
    ) -> tuple[np.ndarray, dict[int, np.ndarray], dict[int, np.ndarray]]:
        """Owned positions, positions per remote owner, gids per remote owner (counted)."""
        part_K = self.part_N[gid_np]
        local_pos = np.flatnonzero(part_K == self.part)
        remote_pos = group_by_owner(part_K, skip=self.part)
        requests = {p: gid_np[pos] for p, pos in remote_pos.items()}
        for req in requests.values():
            self.ledger.record("feature_request", req)
        return local_pos, remote_pos, requests

    def fetch(self, gid: Tensor) -> Tensor:
        """Rows ``[K, F]`` float32 for ``gid`` in request order; one message per remote owner."""
        gid_np = gid.numpy().astype(np.int64, copy=False)
        local_pos, remote_pos, requests = self._route(gid_np)
        out_KF = np.empty((gid_np.shape[0], self.local_x.shape[1]), dtype=np.float32)
        out_KF[local_pos] = self.local_x[self.lid_N[gid_np[local_pos]]]
        if not requests:
            return torch.from_numpy(out_KF)
        if self.codec is None:
            answers = self.client.fetch_many(requests)
            for p, pos in remote_pos.items():
                self.ledger.record("feature_response", answers[p])
                out_KF[pos] = answers[p]
            return torch.from_numpy(out_KF)
        encoded = self.client.fetch_encoded_many(requests, self.codec)
        for p, pos in remote_pos.items():
            self.ledger.record_nbytes("feature_response", encoded[p].nbytes)
            out_KF[pos] = self.codec.decode(encoded[p]).numpy()
        return torch.from_numpy(out_KF)

    def fetch_split(self, gid: Tensor) -> SplitRows:
        """Owned rows as float32, remote rows as their owners encoded them (same messages).

        Raises:
            ValueError: The source has no codec (float32 rows need no split).
        """
        if self.codec is None:
            raise ValueError("fetch_split needs a codec; use fetch for float32 rows")
        gid_np = gid.numpy().astype(np.int64, copy=False)
        local_pos, remote_pos, requests = self._route(gid_np)
        rows_LF = np.asarray(self.local_x[self.lid_N[gid_np[local_pos]]], dtype=np.float32)
        local = torch.from_numpy(local_pos), torch.from_numpy(rows_LF)
        if not requests:
            empty = self.codec.empty(0, int(self.local_x.shape[1]))
            return SplitRows(*local, torch.zeros(0, dtype=torch.int64), empty)
        encoded = self.client.fetch_encoded_many(requests, self.codec)
        for p in requests:
            self.ledger.record_nbytes("feature_response", encoded[p].nbytes)
        order = np.concatenate(list(remote_pos.values()))
        remote = concat([encoded[p] for p in requests])
        return SplitRows(*local, torch.from_numpy(order), remote)


class ShardOwner:
    """Holds one shard (memory-mapped) and answers neighbor and feature requests for its nodes.

    Used as a Ray actor (``ray.remote(ShardOwner)``); plain methods, so it also runs in-process.

    Args:
        root: Partition store directory.
        part: The part this owner serves.
    """

    def __init__(self, root: str, part: int) -> None:
        from gnnsys.sampler import CSRNeighborSource
        from gnnsys.store import load_book, load_shard

        torch.set_num_threads(1)  # owners share the cores with the trainers
        shard = load_shard(root, part)
        book = load_book(root)
        self.part = part
        self._lid_N = book.lid_N
        self._x = shard.x
        self._source = CSRNeighborSource.from_shard(shard, book.lid_N)

    def ping(self) -> int:
        """Liveness check; returns the part."""
        return self.part

    def sample(
        self, dst_gid: np.ndarray, fanout: int, seed: int, hop: int, replace: bool
    ) -> SampleArrays:
        """Draw in-neighbors of owned ``dst_gid`` (see ``NeighborSource.sample_neighbors``)."""
        got = self._source.sample_neighbors(
            torch.from_numpy(np.array(dst_gid, dtype=np.int64)),
            fanout,
            seed=seed,
            hop=hop,
            replace=replace,
        )
        return (got.count_M.numpy(), got.src_gid_E.numpy(), got.e_id_E.numpy())

    def fetch(self, gid: np.ndarray) -> np.ndarray:
        """Float32 rows ``[K, F]`` of owned ``gid``."""
        if self._x is None:
            raise ValueError(f"part {self.part} has no features; the store was written without x")
        out: np.ndarray = np.asarray(self._x[self._lid_N[gid]], dtype=np.float32)
        return out

    def fetch_encoded(self, gid: np.ndarray, codec: Codec) -> EncodedRows:
        """Rows of owned ``gid`` encoded with ``codec`` (what travels instead of float32)."""
        return codec.encode(torch.from_numpy(self.fetch(gid)))

    def partial_sums(
        self,
        group_rowptr: np.ndarray,
        src_gid: np.ndarray,
        src_weight: np.ndarray | None = None,
        codec: Codec | None = None,
    ) -> EncodedRows:
        """Owner-side first-layer aggregation (issue 8): one sum of owned rows per group.

        Row ``g`` of the answer is ``sum_{k in group g} w_k * x[src_gid[k]]`` (``w = 1`` without
        ``src_weight``), computed by ``gnnsys.kernels.aggregate`` over the gathered rows, so only
        ``G`` rows travel back instead of the ``K`` (or their distinct subset) requested.

        Args:
            group_rowptr: ``[G + 1]`` int64 grouping of the ``K`` pairs (by destination).
            src_gid: ``[K]`` int64 owned source gids.
            src_weight: ``[K]`` float32 per-pair weights (GCN's ``s_j``), or ``None``.
            codec: Encode the sums with it for the wire (``None``: plain float32 rows).

        Returns:
            ``[G, F]`` sums as ``EncodedRows`` (codec ``fp32`` when ``codec`` is ``None``).

        Raises:
            ValueError: The store has no features, or the arrays do not fit together.
        """
        from gnnsys.train.partial_agg import owner_partial_sums

        rowptr = torch.from_numpy(np.asarray(group_rowptr, dtype=np.int64))
        if rowptr.numel() < 1 or int(rowptr[-1]) != len(src_gid):
            raise ValueError(
                f"group_rowptr ends at {int(rowptr[-1]) if rowptr.numel() else None} but "
                f"{len(src_gid)} src_gid were sent; pass one gid per pair"
            )
        rows_KF = torch.from_numpy(self.fetch(np.asarray(src_gid, dtype=np.int64)))
        weight = None if src_weight is None else torch.from_numpy(np.asarray(src_weight))
        pos_K = torch.arange(rows_KF.shape[0], dtype=torch.int64)
        sums_GF = owner_partial_sums(rows_KF, pos_K, rowptr, weight).float().contiguous()
        if codec is None:
            return EncodedRows("fp32", int(sums_GF.shape[1]), sums_GF)
        return codec.encode(sums_GF)


class RayOwnerClient:
    """:class:`OwnerClient` over ``ShardOwner`` actor handles, with a deadline on every wait.

    Args:
        owners: Actor handle of each part's owner, indexed by part.
        deadline_s: Seconds a batch of calls may take before ``RemoteCallTimeoutError``.
    """

    def __init__(self, owners: list[Any], deadline_s: float) -> None:
        self.owners, self.deadline_s = owners, deadline_s

    def _get(self, refs: dict[int, Any], what: str) -> dict[int, Any]:
        import ray

        try:
            values = ray.get(list(refs.values()), timeout=self.deadline_s)
        except ray.exceptions.GetTimeoutError as err:
            raise RemoteCallTimeoutError(
                f"{what} to parts {sorted(refs)} got no answer within {self.deadline_s}s; "
                "raise the deadline (--deadline) or check the owners' logs"
            ) from err
        return dict(zip(refs, values, strict=True))

    def sample_many(
        self, dst_by_part: dict[int, np.ndarray], fanout: int, *, seed: int, hop: int, replace: bool
    ) -> dict[int, SampleArrays]:
        """One ``ShardOwner.sample`` call per part, all in flight together."""
        refs = {
            p: self.owners[p].sample.remote(dst, fanout, seed, hop, replace)
            for p, dst in dst_by_part.items()
        }
        return self._get(refs, "sample_neighbors")

    def fetch_many(self, gid_by_part: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
        """One ``ShardOwner.fetch`` call per part, all in flight together."""
        refs = {p: self.owners[p].fetch.remote(gid) for p, gid in gid_by_part.items()}
        return self._get(refs, "fetch")

    def fetch_encoded_many(
        self, gid_by_part: dict[int, np.ndarray], codec: Codec
    ) -> dict[int, EncodedRows]:
        """One ``ShardOwner.fetch_encoded`` call per part, all in flight together."""
        refs = {
            p: self.owners[p].fetch_encoded.remote(gid, codec) for p, gid in gid_by_part.items()
        }
        return self._get(refs, "fetch_encoded")

    def partial_many(
        self,
        req_by_part: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray | None]],
        codec: Codec | None = None,
    ) -> dict[int, EncodedRows]:
        """One ``ShardOwner.partial_sums`` call per part, all in flight together."""
        refs = {
            p: self.owners[p].partial_sums.remote(rowptr, gid, weight, codec)
            for p, (rowptr, gid, weight) in req_by_part.items()
        }
        return self._get(refs, "partial_sums")
