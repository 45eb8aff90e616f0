"""Whole-graph in-degrees on a partitioned rank: a table fetched once, owners for the rest.

GCN's normalisation needs every sampled node's in-degree in the *whole* graph (see
``gnnsys.sampler.degree``). A rank knows its owned nodes' degrees (a shard row holds every
in-edge); the degrees of its halo nodes live with their owners. Choice made here: **fetch once
per run, at start**, one ``ShardOwner.degree`` call per owner for the whole k-hop halo of the
shard's destination type (``TypeShard.halo_lid``), and keep a per-rank :class:`DegreeTable` of
``owned + halo`` entries (``16 (M + H)`` bytes). Shipping degrees with every structure response
instead would cost 8 bytes per drawn source per batch for the whole run, for numbers that never
change; the one-off fetch is ``16 H`` bytes (gids out, int64 degrees back) in the warm-up
traffic. The sampler reaches beyond the k-hop halo only when the store was written with fewer
hops than the model has layers; such gids are asked of their owners per batch (and counted),
with a warning once per rank.

Ledger: ``structure_request`` (the gids sent) and ``structure_response`` (the degrees back).

Shape legend: ``M`` owned nodes, ``H`` k-hop halo nodes, ``K`` looked-up gids.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from gnnsys.sampler.degree import DegreeTable
from gnnsys.train.remote.client import OwnerClient
from gnnsys.train.remote.ledger import Ledger
from gnnsys.train.remote.routed import group_by_owner
from gnnsys.types import EdgeType

if TYPE_CHECKING:
    from gnnsys.store.shard import Shard


__all__ = ["RoutedDegreeSource", "fetch_degrees"]

log = logging.getLogger(__name__)


def fetch_degrees(
    part: int,
    part_N: np.ndarray,
    gid_K: np.ndarray,
    client: OwnerClient,
    ledger: Ledger,
    edge_type: EdgeType | None = None,
) -> np.ndarray:
    """``[K]`` int64 in-degrees of ``gid_K`` (none owned by ``part``), one call per owner.

    ``edge_type``: the relation (ids type-local); ``None``: a homogeneous store's one relation.
    """
    gid_K = np.asarray(gid_K, dtype=np.int64)
    out_K = np.zeros(gid_K.shape[0], dtype=np.int64)
    part_K = part_N[gid_K]
    assert not bool(np.any(part_K == part)), "own degrees come from the shard, not a call"
    by_part = group_by_owner(part_K, skip=part)
    requests = {p: gid_K[pos] for p, pos in by_part.items()}
    for gid in requests.values():
        ledger.record("structure_request", gid)
    answers = client.degree_many(requests, edge_type) if requests else {}
    for p, pos in by_part.items():
        degree = np.asarray(answers[p], dtype=np.int64)
        ledger.record("structure_response", degree)
        out_K[pos] = degree
    return out_K


class RoutedDegreeSource:
    """``DegreeSource`` of one partitioned rank; see the module docstring.

    Args:
        part: This rank's part.
        part_N: ``[N]`` owner of every gid (``PartitionBook.part_N``).
        table: Degrees of the owned and halo nodes.
        client: Asks owners for gids outside ``table``.
        ledger: Counts those calls.
        edge_type: The relation whose in-degrees these are (type-local ids), or ``None``: a
            homogeneous store's one relation.
    """

    def __init__(
        self,
        part: int,
        part_N: np.ndarray,
        table: DegreeTable,
        client: OwnerClient,
        ledger: Ledger,
        edge_type: EdgeType | None = None,
    ) -> None:
        self.part, self.part_N, self.table = part, part_N, table
        self.client, self.ledger, self.edge_type = client, ledger, edge_type
        self._warned = False

    @classmethod
    def of_relation(
        cls,
        shard: Shard,
        edge_type: EdgeType,
        part_N: np.ndarray,
        client: OwnerClient,
        ledger: Ledger,
    ) -> RoutedDegreeSource:
        """The in-degrees over ``edge_type`` of the owned and halo nodes of its destination type.

        Owned degrees from the shard, halo degrees from their owners (one call per owner).
        ``part_N``: the destination type's ``PartitionBook.part_N``. A homogeneous store's one
        relation is ``gnnsys.types.ONE_RELATION``.
        """
        nodes = shard.nodes[edge_type[2]]
        owned_M = np.asarray(nodes.owned_lid, dtype=np.int64)
        halo_H = np.asarray(nodes.halo_lid, dtype=np.int64)
        degree_M = np.diff(np.asarray(shard.relations[edge_type].indptr, dtype=np.int64))
        degree_H = fetch_degrees(shard.part, part_N, halo_H, client, ledger, edge_type)
        table = DegreeTable.from_pairs(
            np.concatenate([owned_M, halo_H]), np.concatenate([degree_M, degree_H])
        )
        return cls(shard.part, part_N, table, client, ledger, edge_type)

    def in_degree(self, gid: Tensor) -> Tensor:
        """``[K]`` int64 whole-graph in-degrees of ``gid``; gids outside the table cost a call."""
        gid_K = gid.long().numpy()
        got = self.table.lookup(gid_K)
        if got.miss_pos.size:
            if not self._warned:
                self._warned = True
                log.warning(
                    "part %d: %d sampled nodes lie beyond the store's halo (written with fewer "
                    "hops than the model has layers); asking their owners for GCN degrees every "
                    "batch. Re-partition with --hops equal to the number of layers to avoid it.",
                    self.part,
                    got.miss_pos.size,
                )
            missing = gid_K[got.miss_pos]
            got.degree_K[got.miss_pos] = fetch_degrees(
                self.part, self.part_N, missing, self.client, self.ledger, self.edge_type
            )
        return torch.from_numpy(got.degree_K)
