"""Remote neighbor sampling routed by owner (pure torch; the client does the I/O).

A worker sees remote shards only through the stage protocols: :class:`RoutedNeighborSource` is
the sampler's ``NeighborSource`` (``gnnsys.train.remote.features.RoutedFeatureSource`` is the
feature side). It splits a request by owner (:func:`group_by_owner`), serves its own part
locally, and sends one message per remote owner per hop through an :class:`OwnerClient`. The Ray
client issues every owner's call before waiting on any, so owners work in parallel, and every
wait has a deadline.

The ledger counts the payload arrays of every message: ``dst_gid`` out and ``count/src_gid``
back (owners send no edge ids: ``NO_EDGE_IDS``; the merged sample carries ``NO_EDGE_ID``).

Shape legend: ``M`` destinations, ``E`` drawn edges.
"""

from __future__ import annotations

import logging

import numpy as np
import torch
from torch import Tensor

from gnnsys.sampler.base import NeighborSource
from gnnsys.sampler.csr_source import NO_EDGE_ID
from gnnsys.train.remote.client import OwnerClient, SampleArrays
from gnnsys.train.remote.ledger import Ledger
from gnnsys.types import EdgeType, NeighborSample

__all__ = ["RoutedNeighborSource", "group_by_owner", "message_pieces"]

log = logging.getLogger(__name__)


def group_by_owner(part_M: np.ndarray, skip: int) -> dict[int, np.ndarray]:
    """Positions of each owner's entries in request order (one stable sort), except ``skip``."""
    if part_M.size == 0:
        return {}
    order = np.argsort(part_M, kind="stable")
    parts, starts = np.unique(part_M[order], return_index=True)
    groups = np.split(order, starts[1:])
    return {int(p): g for p, g in zip(parts, groups, strict=True) if int(p) != skip}


def message_pieces(
    by_part: dict[int, np.ndarray], width: int, message_mb: float
) -> list[dict[int, np.ndarray]]:
    """``by_part`` (positions per owner) cut into rounds of bounded messages.

    Each round asks each owner for at most ``message_mb`` of float32 rows of ``width``.
    """
    max_rows = max(1, int(message_mb * 2**20) // (4 * width))
    rounds = max((-(-pos.shape[0] // max_rows) for pos in by_part.values()), default=0)
    return [
        {
            p: pos[r * max_rows : (r + 1) * max_rows]
            for p, pos in by_part.items()
            if pos.shape[0] > r * max_rows
        }
        for r in range(rounds)
    ]


class RoutedNeighborSource:
    """``NeighborSource`` over a partitioned graph: owned dsts locally, the rest at their owners.

    Args:
        part: This worker's part.
        part_N: ``[N]`` owner of every gid (from the partition book).
        local: Source over this part's shard (answers only owned gids).
        client: Executor for the remote calls.
        ledger: Counts ``structure_request`` / ``structure_response``.
        edge_type: The relation asked for in a typed store (ids type-local); ``None`` for a
            homogeneous store's one relation.
    """

    def __init__(
        self,
        part: int,
        part_N: np.ndarray,
        local: NeighborSource,
        client: OwnerClient,
        ledger: Ledger,
        edge_type: EdgeType | None = None,
    ) -> None:
        self.part, self.part_N, self.local = part, part_N, local
        self.client, self.ledger, self.edge_type = client, ledger, edge_type

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
            self.client.sample_many(
                requests, fanout, seed=seed, hop=hop, replace=replace, edge_type=self.edge_type
            )
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
        eid_E[slots] = eid if eid.shape[0] == src.shape[0] else NO_EDGE_ID  # ids not read
    return NeighborSample(
        count_M=torch.from_numpy(count_M),
        src_gid_E=torch.from_numpy(src_E),
        e_id_E=torch.from_numpy(eid_E),
    )
