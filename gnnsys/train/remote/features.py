"""A worker's feature rows: own rows from its shard, halo rows per owner through its cache.

:class:`RoutedFeatureSource` is the one feature source of the runtime (the trainer's
``FeatureSource`` and the layer-0 helpers' ``HaloFeatureSource``). Per batch::

    own rows  <- the worker's memory-mapped shard (no traffic)
    halo rows <- HaloFetcher.gather: cache lookup -> the distinct misses, one encoded request
                 per owner, all in flight -> the admission policy decides what to keep

"No cache" is a cache of capacity 0 with policy ``none``: every halo row is a miss, fetched
once per batch, one message per remote owner; nothing is stored and no counters are reported.
Before epoch 0 the policy's warm-start rows are prefetched (:meth:`RoutedFeatureSource.warm_up`);
that traffic, and the dry-run sampling behind ``presample`` / ``adaptive`` scores, is reported
apart from the epochs. The codec is always an object (``FP32Codec`` for float32 rows), so the
owners always encode and the ledger counts ``EncodedRows.nbytes`` (``K * F * 4`` for fp32).

The rank builds one source per featured node type, its cache and the cache's admission policy
scored from what the worker holds, no driver round trip (``gnnsys.train.rank.rank_caches``):

- ``degree``: in-edges from each halo node of the type into the part's owned nodes;
- ``presample``: halo accesses per epoch in ``presample_epochs`` dry-run epochs of this worker's
  own sampler over its train seeds (remote sampling included, counted as warm-up traffic),
  ties broken by the degree scores;
- ``adaptive``: online decayed counts, warm-started from the presample scores.

Shape legend: ``K`` requested rows, ``F`` features, ``N`` nodes of the whole graph, ``L`` own
rows of a request, ``H`` its halo rows.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from torch import Tensor

from gnnsys.cache import CacheCounters, HaloCache, HaloFetcher, SplitRows
from gnnsys.cache.codecs import Codec, EncodedRows, FP32Codec, put
from gnnsys.store.pages import ReadAhead
from gnnsys.train.remote.client import OwnerClient
from gnnsys.train.remote.ledger import Ledger
from gnnsys.train.remote.routed import group_by_owner

__all__ = ["RoutedFeatureSource"]

FP32 = FP32Codec()


class _OwnerRows:
    """The owners of remote gids as an ``EncodedFeatureSource``; one message per owner.

    Counts ``feature_request`` (the gids sent) and ``feature_response`` (encoded bytes).
    """

    def __init__(
        self,
        part: int,
        part_N: np.ndarray,
        client: OwnerClient,
        ledger: Ledger,
        node_type: str | None = None,
    ) -> None:
        self.part, self.part_N, self.client, self.ledger = part, part_N, client, ledger
        self.node_type = node_type

    def fetch(self, gid: Tensor) -> Tensor:
        """Float32 rows ``[K, F]`` of remote ``gid`` (through the fp32 codec), request order."""
        return FP32.decode(self.fetch_encoded(gid, FP32))

    def fetch_encoded(self, gid: Tensor, codec: Codec) -> EncodedRows:
        """Rows of remote ``gid`` encoded by their owners with ``codec``, in request order.

        Raises:
            ValueError: No gids, or gids this worker owns (read those from the shard).
        """
        gid_np = gid.numpy().astype(np.int64, copy=False)
        by_part = group_by_owner(self.part_N[gid_np], skip=-1)
        if self.part in by_part:
            raise ValueError(f"owner fetch got gids owned by part {self.part}; read them locally")
        if not by_part:
            raise ValueError("owner fetch got no gids; call it with at least one")
        requests = {p: gid_np[pos] for p, pos in by_part.items()}
        for req in requests.values():
            self.ledger.record("feature_request", req)
        answers = self.client.fetch_encoded_many(requests, codec, self.node_type)
        for p in requests:
            self.ledger.record_nbytes("feature_response", answers[p].nbytes)
        if len(by_part) == 1:  # one owner: its answer is already in request order
            return answers[next(iter(by_part))]
        out = codec.empty(gid_np.shape[0], answers[next(iter(by_part))].num_cols)
        for p, pos in by_part.items():  # each owner's rows written once, at their positions
            put(out, torch.from_numpy(pos), answers[p])
        return out


class RoutedFeatureSource:
    """``HaloFeatureSource`` of one worker: own rows locally, halo rows per owner via the cache.

    Args:
        part: This worker's part.
        part_N: ``[N]`` owner of every gid.
        lid_N: ``[N]`` lid of every gid inside its owner's shard.
        local_x: ``[M_own, F]`` this part's feature rows (memory-mapped is fine).
        client: Executor for the owner calls.
        ledger: Counts ``feature_request`` / ``feature_response``.
        codec: Owners encode halo rows with it; the cache keeps them so (``FP32Codec`` default).
        cache: This worker's halo cache in ``codec``; ``None`` is a cache of capacity 0.
        wire: Optional lossless wire stage measured over fetched rows (``zstd`` / ``lz4``).
        node_type: The node type asked for in a typed store (ids type-local); ``None`` for a
            homogeneous store's one type.
        own_device: Keep a float32 copy of ``local_x`` on this device and gather own rows
            there (``CacheConfig.placement == "device"``); every row a fetch returns is then
            on it (halo rows copied up). ``None``: own rows are read from ``local_x``.
    """

    def __init__(
        self,
        part: int,
        part_N: np.ndarray,
        lid_N: np.ndarray,
        local_x: np.ndarray,
        client: OwnerClient,
        ledger: Ledger,
        *,
        codec: Codec = FP32,
        cache: HaloCache | None = None,
        wire: str | None = None,
        node_type: str | None = None,
        own_device: torch.device | str | None = None,
    ) -> None:
        self.part, self.part_N, self.lid_N, self.local_x = part, part_N, lid_N, local_x
        self._own_dev: Tensor | None = None  # own rows on the trainer's device (one copy)
        if own_device is not None:  # on a CPU run: the mapped rows themselves, no copy
            with warnings.catch_warnings():  # a read-only map; these rows are only ever read
                warnings.simplefilter("ignore", UserWarning)
                host = torch.from_numpy(np.asarray(local_x, dtype=np.float32))
            self._own_dev = host.to(own_device)
        self.codec = codec
        self._x_ahead = ReadAhead(local_x)  # scattered rows of a mapped shard: pages asked first
        if cache is None:
            cache = HaloCache(HaloCache.Config(), feature_dim=int(local_x.shape[1]), codec=codec)
        owners = _OwnerRows(part, part_N, client, ledger, node_type)
        self.fetcher = HaloFetcher(cache, owners, codec, wire=wire)

    @property
    def cache(self) -> HaloCache:
        """This worker's cache (capacity 0 without one)."""
        return self.fetcher.cache

    def _split(self, gid: Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``gid`` as int64 numpy, positions of own rows, positions of halo rows."""
        gid_np = gid.numpy().astype(np.int64, copy=False)
        mine = self.part_N[gid_np] == self.part
        return gid_np, np.flatnonzero(mine), np.flatnonzero(~mine)

    def _own_rows(self, lid: np.ndarray) -> np.ndarray:
        """Own rows ``lid`` of the shard (their missing pages requested together first)."""
        return self._x_ahead.take(lid)

    def fetch(self, gid: Tensor) -> Tensor:
        """Rows ``[K, F]`` float32 for ``gid`` in request order (one cache lookup per call)."""
        return self._rows(gid, distinct=False)

    def fetch_distinct(self, gid: Tensor) -> Tensor:
        """``fetch`` of a request that never repeats a gid (a sampled ``n_id``).

        Its halo rows need no de-duplication: with nothing cached they are fetched in request
        order and decoded as they come.
        """
        return self._rows(gid, distinct=True)

    def _rows(self, gid: Tensor, *, distinct: bool) -> Tensor:
        """``fetch``: own rows gathered straight into the output in one pass.

        A halo position first reads own row 0 as a placeholder and is then overwritten by its
        fetched row, so no own row is copied twice.
        """
        if self._own_dev is not None:
            return self._device_rows(gid, distinct=distinct)
        gid_np = gid.numpy().astype(np.int64, copy=False)
        mine = self.part_N[gid_np] == self.part
        lid = self.lid_N[gid_np]
        if bool(mine.all()):  # every row is own (one part, or no halo): one gather, no scatter
            rows_KF = self._own_rows(lid)
            return torch.from_numpy(rows_KF.astype(np.float32, copy=False))
        remote_pos = np.flatnonzero(~mine)
        if self.local_x.shape[0]:  # own rows in place; halo positions read row 0 for now
            lid = lid.astype(np.int64, copy=False)  # a fresh array (fancy-indexed): ours to edit
            lid[remote_pos] = 0
            out_KF = self._own_rows(lid).astype(np.float32, copy=False)
        else:  # a part that owns no node: only halo rows
            out_KF = np.empty((gid_np.shape[0], self.local_x.shape[1]), dtype=np.float32)
        halo = torch.from_numpy(gid_np[remote_pos])
        out_KF[remote_pos] = self.fetcher.gather(halo, distinct=distinct).numpy()
        return torch.from_numpy(out_KF)

    def _device_rows(self, gid: Tensor, *, distinct: bool) -> Tensor:
        """``fetch`` on the own rows' device: own rows gathered there, halo rows copied up."""
        assert self._own_dev is not None  # the caller checked
        on = self._own_dev.device
        gid_np, local_pos, remote_pos = self._split(gid)
        out_KF = torch.empty(gid_np.shape[0], self._own_dev.shape[1], device=on)
        if local_pos.size:
            out_KF[torch.from_numpy(local_pos).to(on)] = self._own_dev_rows(gid_np[local_pos])
        if remote_pos.size:
            halo = self.fetcher.gather(torch.from_numpy(gid_np[remote_pos]), distinct=distinct)
            out_KF[torch.from_numpy(remote_pos).to(on)] = halo.to(on)
        return out_KF

    def _own_dev_rows(self, own_gid: np.ndarray) -> Tensor:
        """Rows of owned ``own_gid`` from the device copy (gathered on its device)."""
        assert self._own_dev is not None  # the callers checked
        lid = torch.from_numpy(self.lid_N[own_gid].astype(np.int64, copy=False))
        return self._own_dev[lid.to(self._own_dev.device)]

    def fetch_split(self, gid: Tensor) -> SplitRows:
        """Own rows as float32; halo rows through the cache, left in the codec's format."""
        gid_np, local_pos, remote_pos = self._split(gid)
        if self._own_dev is not None:  # gathered on the own rows' device
            local_LF = self._own_dev_rows(gid_np[local_pos])
        else:
            own = self._own_rows(self.lid_N[gid_np[local_pos]])
            local_LF = torch.from_numpy(own.astype(np.float32, copy=False))
        if remote_pos.size:  # as in fetch
            remote = self.fetcher.gather_encoded(torch.from_numpy(gid_np[remote_pos]))
        else:
            remote = self.codec.empty(0, int(self.local_x.shape[1]))
        return SplitRows(
            torch.from_numpy(local_pos), local_LF, torch.from_numpy(remote_pos), remote
        )

    def resident_mask(self, gid: Tensor) -> Tensor:
        """``[K]`` bool: rows owned here or cached, i.e. fetching them costs no traffic."""
        gid = torch.as_tensor(gid, dtype=torch.int64)
        mine = torch.from_numpy(self.part_N[gid.numpy()] == self.part)
        return mine | self.cache.contains(gid)

    def would_admit(self, gid: Tensor) -> Tensor:
        """``[K]`` bool: halo ``gid`` the cache's policy would keep if fetched now (pure)."""
        return self.cache.would_admit(gid)

    def warm_up(self) -> int:
        """Prefetch the policy's warm-start rows (before epoch 0); returns rows stored."""
        return self.fetcher.warm_up()

    def counters(self) -> CacheCounters | None:
        """Cache and fetch counters; ``None`` when the cache admits nothing (policy ``none``)."""
        if self.cache.policy.name == "none":
            return None
        return self.fetcher.counters()
