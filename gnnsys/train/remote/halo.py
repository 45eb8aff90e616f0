"""Halo features in the runtime: each worker's cache and codec in front of the shard owners.

With a cache configured (``FetchSpec.cached``), a worker's ``FeatureSource`` is a
:class:`CachedFeatureSource`: owned rows come from its own shard; halo rows go through
``HaloFetcher.gather`` once per batch (cache lookup -> one encoded request per owner for the
distinct misses -> the admission policy decides what to keep). Before epoch 0 the policy's
warm-start rows are prefetched (:meth:`CachedFeatureSource.warm_up`); that traffic, and the
dry-run sampling behind ``presample`` / ``adaptive`` scores, is reported apart from the epochs.

Scores per policy (all from what the worker holds, no driver round trip):

- ``degree``: in-edges from each halo node into the owned nodes (``shard.indices_gid``);
- ``presample``: halo accesses per epoch in ``presample_epochs`` dry-run epochs of this worker's
  own sampler over its train seeds (remote sampling included, counted as warm-up traffic),
  ties broken by the degree scores;
- ``adaptive``: online decayed counts, warm-started from the presample scores.

Shape legend: ``K`` requested rows, ``F`` features, ``N`` nodes of the whole graph.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import numpy as np
import torch
from torch import Tensor

from gnnsys.cache import (
    AdaptiveAdmission,
    FetchStats,
    HaloCache,
    HaloFetcher,
    degree_scores,
    make_policy,
    presample_scores,
    tie_break,
)
from gnnsys.cache.codecs import Codec, EncodedRows, concat, make_codec, take
from gnnsys.sampler.base import Sampler
from gnnsys.train.remote.client import OwnerClient
from gnnsys.train.remote.fetch_spec import FetchSpec
from gnnsys.train.remote.ledger import Ledger
from gnnsys.train.remote.routed import SplitRows, group_by_owner
from gnnsys.types import PartitionBook, PartitionShard

__all__ = ["CachedFeatureSource", "OwnerRows", "build_cached_source", "cache_report"]

log = logging.getLogger(__name__)

MIB = 1 << 20


class OwnerRows:
    """``EncodedFeatureSource`` over the owners of remote gids; one message per owner.

    Args:
        part: This worker's part (its own gids are never requested).
        part_N: ``[N]`` owner of every gid.
        client: Executor of the remote calls.
        ledger: Counts ``feature_request`` (gids) and ``feature_response`` (encoded bytes).
    """

    def __init__(self, part: int, part_N: np.ndarray, client: OwnerClient, ledger: Ledger) -> None:
        self.part, self.part_N, self.client, self.ledger = part, part_N, client, ledger

    def _requests(self, gid: Tensor) -> tuple[np.ndarray, dict[int, np.ndarray]]:
        gid_np = gid.numpy().astype(np.int64, copy=False)
        by_part = group_by_owner(self.part_N[gid_np], skip=-1)
        if self.part in by_part:
            raise ValueError(f"OwnerRows got gids owned by part {self.part}; read them locally")
        requests = {p: gid_np[pos] for p, pos in by_part.items()}
        for req in requests.values():
            self.ledger.record("feature_request", req)
        order = np.concatenate(list(by_part.values())) if by_part else np.empty(0, np.int64)
        return order, requests

    def fetch(self, gid: Tensor) -> Tensor:
        """Float32 rows ``[K, F]`` of remote ``gid``, in request order."""
        order, requests = self._requests(gid)
        answers = self.client.fetch_many(requests) if requests else {}
        rows = [answers[p] for p in requests]
        for r in rows:
            self.ledger.record("feature_response", r)
        out = np.empty((order.shape[0], rows[0].shape[1] if rows else 0), dtype=np.float32)
        if rows:
            out[order] = np.concatenate(rows)
        return torch.from_numpy(out)

    def fetch_encoded(self, gid: Tensor, codec: Codec) -> EncodedRows:
        """Rows of remote ``gid`` encoded by their owners with ``codec``, in request order."""
        order, requests = self._requests(gid)
        if not requests:
            raise ValueError("fetch_encoded got no gids; call it with at least one")
        answers = self.client.fetch_encoded_many(requests, codec)
        for p in requests:
            self.ledger.record_nbytes("feature_response", answers[p].nbytes)
        stacked = concat([answers[p] for p in requests])
        return take(stacked, torch.from_numpy(np.argsort(order, kind="stable")))


class CachedFeatureSource:
    """``FeatureSource`` of one worker: own rows locally, halo rows through the cache.

    Args:
        part: This worker's part.
        part_N: ``[N]`` owner of every gid.
        lid_N: ``[N]`` lid of every gid inside its owner's shard.
        local_x: ``[M_own, F]`` this part's rows.
        fetcher: Cache + owners for the halo rows.
    """

    def __init__(
        self,
        part: int,
        part_N: np.ndarray,
        lid_N: np.ndarray,
        local_x: np.ndarray,
        fetcher: HaloFetcher,
    ) -> None:
        self.part, self.part_N, self.lid_N, self.local_x = part, part_N, lid_N, local_x
        self.fetcher = fetcher

    @property
    def cache(self) -> HaloCache:
        """This worker's cache."""
        return self.fetcher.cache

    def fetch(self, gid: Tensor) -> Tensor:
        """Rows ``[K, F]`` float32 for ``gid`` in request order (one cache lookup per call)."""
        gid_np = gid.numpy().astype(np.int64, copy=False)
        out_KF = np.empty((gid_np.shape[0], self.local_x.shape[1]), dtype=np.float32)
        mine = self.part_N[gid_np] == self.part
        out_KF[mine] = self.local_x[self.lid_N[gid_np[mine]]]
        remote = np.flatnonzero(~mine)
        if remote.size:
            out_KF[remote] = self.fetcher.gather(torch.from_numpy(gid_np[remote])).numpy()
        return torch.from_numpy(out_KF)

    def fetch_split(self, gid: Tensor) -> SplitRows:
        """Owned rows as float32; halo rows through the cache, left in the cache's codec."""
        gid_np = gid.numpy().astype(np.int64, copy=False)
        mine = self.part_N[gid_np] == self.part
        local_pos, remote_pos = np.flatnonzero(mine), np.flatnonzero(~mine)
        rows_LF = np.asarray(self.local_x[self.lid_N[gid_np[local_pos]]], dtype=np.float32)
        remote_gid = torch.from_numpy(gid_np[remote_pos])
        if remote_pos.size:  # as in fetch: a batch without halo rows is no fetcher call
            remote = self.fetcher.gather_encoded(remote_gid)
        else:
            remote = self.fetcher.codec.empty(0, int(self.local_x.shape[1]))
        return SplitRows(
            torch.from_numpy(local_pos),
            torch.from_numpy(rows_LF),
            torch.from_numpy(remote_pos),
            remote,
        )

    def resident_mask(self, gid: Tensor) -> Tensor:
        """``[K]`` bool: rows owned here or cached, i.e. fetching them costs no traffic."""
        gid = torch.as_tensor(gid, dtype=torch.int64)
        mine = torch.from_numpy(self.part_N[gid.numpy()] == self.part)
        return mine | self.cache.contains(gid)

    def warm_up(self) -> int:
        """Prefetch the policy's warm-start rows (before epoch 0); returns rows stored."""
        return self.fetcher.warm_up()


def _scores(
    fetch: FetchSpec,
    shard: PartitionShard,
    sampler: Sampler,
    train_gid: Tensor,
    owned_N: Tensor,
    *,
    batch_size: int,
    seed: int,
) -> Tensor | None:
    """``[N]`` admission scores of ``fetch.cache_policy`` (``None`` for ``none``)."""
    if fetch.cache_policy == "none":
        return None
    degree = degree_scores(shard.indices_gid, shard.owned_gid, shard.num_nodes)
    if fetch.cache_policy == "degree":
        return degree
    counts = presample_scores(
        sampler,
        train_gid,
        owned_N,
        batch_size=batch_size,
        epochs=fetch.presample_epochs,
        seed=seed,
    )
    return tie_break(counts, degree)  # one dry-run epoch leaves many ties at counts 0 and 1


def build_cached_source(
    fetch: FetchSpec,
    *,
    shard: PartitionShard,
    book: PartitionBook,
    client: OwnerClient,
    ledger: Ledger,
    sampler: Sampler,
    train_gid: Tensor,
    batch_size: int,
    seed: int,
) -> CachedFeatureSource:
    """The cache, policy and fetcher of one worker, wired per ``fetch`` (not yet warmed up).

    Raises:
        ValueError: The shard has no features, or ``fetch.codec`` is still ``auto``.
    """
    if shard.x is None:
        raise ValueError(f"part {shard.part} has no features; rewrite the store with x")
    if fetch.codec == "auto":
        raise ValueError("FetchSpec.codec is 'auto'; resolve it on the driver first")
    codec = make_codec(fetch.codec)
    feature_dim = int(shard.x.shape[1])
    if fetch.cache_mb is not None:
        config = HaloCache.Config(
            capacity_bytes=int(fetch.cache_mb * MIB), policy=fetch.cache_policy
        )
    else:
        config = HaloCache.Config.from_ratio(
            fetch.cache_ratio,
            owned_feature_bytes=shard.num_owned * feature_dim * 4,
            policy=fetch.cache_policy,
        )
    owned_N = torch.zeros(shard.num_nodes, dtype=torch.bool)
    owned_N[torch.from_numpy(np.asarray(shard.owned_gid, dtype=np.int64))] = True
    score_N = _scores(fetch, shard, sampler, train_gid, owned_N, batch_size=batch_size, seed=seed)
    kwargs: dict[str, Any] = {"score_N": score_N, "owned_N": owned_N}
    if fetch.cache_policy == "adaptive":
        kwargs["config"] = AdaptiveAdmission.Config()
    policy = make_policy(fetch.cache_policy, **kwargs)
    cache = HaloCache(config, feature_dim=feature_dim, codec=codec, policy=policy)
    log.info(
        "part %d: %s cache, %d rows of %s (%.1f MiB)",
        shard.part,
        fetch.cache_policy,
        cache.capacity_rows,
        codec.name,
        config.capacity_bytes / MIB,
    )
    rows = OwnerRows(shard.part, book.part_N, client, ledger)
    fetcher = HaloFetcher(cache, rows, codec, wire=fetch.wire)
    return CachedFeatureSource(shard.part, book.part_N, book.lid_N, shard.x, fetcher)


def cache_report(source: object) -> dict[str, int]:
    """Counters of a worker's cache and fetcher (empty when ``source`` has no cache)."""
    if not isinstance(source, CachedFeatureSource):
        return {}
    fetched: FetchStats = source.fetcher.stats
    report = {k: int(v) for k, v in dataclasses.asdict(fetched).items()}
    stats = source.cache.stats
    report |= {"rows_held": stats.rows_held, "capacity_rows": stats.capacity_rows}
    report |= {"bytes_held": stats.bytes_held, "capacity_bytes": stats.capacity_bytes}
    return report
