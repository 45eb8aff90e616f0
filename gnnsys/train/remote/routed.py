"""Remote neighbor sampling and feature fetch routed by owner (pure torch; the client does I/O).

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
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from gnnsys.cache.codecs import Codec, EncodedRows, concat
from gnnsys.sampler.base import NeighborSource
from gnnsys.train.remote.client import OwnerClient, SampleArrays
from gnnsys.train.remote.ledger import Ledger
from gnnsys.types import NeighborSample

__all__ = ["RoutedFeatureSource", "RoutedNeighborSource", "SplitRows", "group_by_owner"]

log = logging.getLogger(__name__)


def group_by_owner(part_M: np.ndarray, skip: int) -> dict[int, np.ndarray]:
    """Positions of each owner's entries in request order (one stable sort), except ``skip``."""
    if part_M.size == 0:
        return {}
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
