"""The shard owner: one process per part serving its structure and features to every worker.

Shape legend: ``M`` destinations, ``K`` requested rows, ``F`` features, ``G`` partial sums.
"""

from __future__ import annotations

import numpy as np
import torch

from gnnsys.cache.codecs import Codec, EncodedRows
from gnnsys.store.pages import ReadAhead, read_ahead_dense
from gnnsys.train.remote.client import NO_EDGE_IDS, EdgeType, SampleArrays
from gnnsys.train.threads import use_actor_threads
from gnnsys.types import PartitionBook

__all__ = ["LocalOwnerClient", "ShardOwner"]


class ShardOwner:
    """Holds one shard (memory-mapped) and answers neighbor and feature requests for its nodes.

    Used as a Ray actor (``ray.remote(ShardOwner)``); plain methods, so it also runs in-process.

    Args:
        root: Partition store directory.
        part: The part this owner serves.
        own_threads: Set torch's threads to the CPUs Ray assigned this actor (False when a
            trainer builds it in-process to read a co-located shard: ``--owner-reads local``).
        book: The store's partition book when the caller has loaded it already (a trainer
            building every part's owner); ``None`` loads it.
    """

    def __init__(
        self, root: str, part: int, *, own_threads: bool = True, book: PartitionBook | None = None
    ) -> None:
        from gnnsys.sampler import CSRNeighborSource
        from gnnsys.store import load_book, load_shard
        from gnnsys.store.pages import advise_random

        if own_threads:  # an actor of its own; not when a trainer reads through it in-process
            use_actor_threads()  # the CPUs Ray assigned (gnnsys.train.threads)
        shard = load_shard(root, part)
        book = load_book(root) if book is None else book
        advise_random(shard.x, shard.indptr, shard.indices_gid, shard.e_id)  # requested rows
        self.part = part
        self._lid_N = book.lid_N
        self._x = shard.x
        self._x_ahead = None if shard.x is None else ReadAhead(shard.x)  # scattered requests
        self._indptr = np.asarray(shard.indptr, dtype=np.int64)
        self._source = CSRNeighborSource.from_shard(shard, book.lid_N, edge_ids=False)

    def ping(self) -> int:
        """Liveness check; returns the part."""
        return self.part

    def sample(
        self,
        dst_gid: np.ndarray,
        fanout: int,
        seed: int,
        hop: int,
        replace: bool,
        edge_type: EdgeType | None = None,
    ) -> SampleArrays:
        """Draw in-neighbors of owned ``dst_gid`` (see ``NeighborSource.sample_neighbors``).

        ``edge_type`` must be ``None``: a homogeneous store has one relation.
        """
        _one_kind("relation", edge_type, self.part)
        got = self._source.sample_neighbors(
            torch.from_numpy(np.array(dst_gid, dtype=np.int64)),
            fanout,
            seed=seed,
            hop=hop,
            replace=replace,
        )
        return (got.count_M.numpy(), got.src_gid_E.numpy(), NO_EDGE_IDS)

    def degree(self, gid: np.ndarray) -> np.ndarray:
        """``[K]`` int64 whole-graph in-degrees of owned ``gid`` (a shard row holds every in-edge).

        Raises:
            ValueError: A gid this part does not own.
        """
        gid = np.asarray(gid, dtype=np.int64)
        rows = self._source.rows_of(gid)  # raises for a gid owned elsewhere
        out: np.ndarray = self._indptr[rows + 1] - self._indptr[rows]
        return out

    def fetch(self, gid: np.ndarray) -> np.ndarray:
        """Float32 rows ``[K, F]`` of owned ``gid``."""
        x, ahead = self._x, self._x_ahead
        if x is None or ahead is None:
            raise ValueError(f"part {self.part} has no features; the store was written without x")
        lid = self._lid_N[gid]
        if read_ahead_dense(x, lid):  # an evaluation's large sorted requests: one read
            rows: np.ndarray = np.take(x, lid, axis=0)  # (no memmap wrapper: cheaper)
        else:  # training's scattered rows: missing pages asked for together
            rows = ahead.take(lid)
        return rows.astype(np.float32, copy=False)

    def fetch_encoded(
        self, gid: np.ndarray, codec: Codec, node_type: str | None = None
    ) -> EncodedRows:
        """Rows of owned ``gid`` encoded with ``codec`` (what travels instead of float32).

        ``node_type`` must be ``None``: a homogeneous store has one node type.
        """
        _one_kind("node type", node_type, self.part)
        return codec.encode(torch.from_numpy(self.fetch(gid)))

    def partial_sums(
        self,
        group_rowptr: np.ndarray,
        src_gid: np.ndarray,
        src_weight: np.ndarray | None,
        codec: Codec,
        node_type: str | None = None,
    ) -> EncodedRows:
        """Owner-side first-layer aggregation (issue 8): one sum of owned rows per group.

        Row ``g`` of the answer is ``sum_{k in group g} w_k * x[src_gid[k]]`` (``w = 1`` without
        ``src_weight``), computed by ``gnnsys.kernels.aggregate`` over the gathered rows, so only
        ``G`` rows travel back instead of the ``K`` (or their distinct subset) requested.

        Args:
            group_rowptr: ``[G + 1]`` int64 grouping of the ``K`` pairs (by destination).
            src_gid: ``[K]`` int64 owned source gids.
            src_weight: ``[K]`` float32 per-pair weights (GCN's ``s_j``), or ``None``.
            codec: Encode the sums with it for the wire (``FP32Codec``: plain float32 rows).
            node_type: Must be ``None``: a homogeneous store has one node type.

        Returns:
            ``[G, F]`` sums as ``EncodedRows`` of ``codec``.

        Raises:
            ValueError: The store has no features, or the arrays do not fit together.
        """
        from gnnsys.train.layer0.plan import answer_partials

        _one_kind("node type", node_type, self.part)
        return answer_partials(self.fetch, group_rowptr, src_gid, src_weight, codec)


class LocalOwnerClient:
    """``OwnerClient`` over in-process ``ShardOwner`` objects: every call returns at once.

    The in-process executor's client, and a Ray trainer's with ``--owner-reads local``: the
    same ``ShardOwner`` code over the same mapped files, so the answers (and the ledger, which
    the routed sources keep) are those of the owner actors, without the copies and hand-offs
    of a call.
    """

    def __init__(self, owners: list[ShardOwner]) -> None:
        self.owners = owners

    def sample_many(
        self,
        dst_by_part: dict[int, np.ndarray],
        fanout: int,
        *,
        seed: int,
        hop: int,
        replace: bool,
        edge_type: EdgeType | None = None,
    ) -> dict[int, SampleArrays]:
        """Every owner's ``sample``, in turn."""
        return {
            p: self.owners[p].sample(dst, fanout, seed, hop, replace, edge_type)
            for p, dst in dst_by_part.items()
        }

    def fetch_encoded_many(
        self, gid_by_part: dict[int, np.ndarray], codec: Codec, node_type: str | None = None
    ) -> dict[int, EncodedRows]:
        """Every owner's ``fetch_encoded``, in turn."""
        return {
            p: self.owners[p].fetch_encoded(gid, codec, node_type) for p, gid in gid_by_part.items()
        }

    def degree_many(self, gid_by_part: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
        """``ShardOwner.degree`` of every part in turn."""
        return {p: self.owners[p].degree(gid) for p, gid in gid_by_part.items()}

    def partial_many(
        self,
        req_by_part: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray | None]],
        codec: Codec,
        node_type: str | None = None,
    ) -> dict[int, EncodedRows]:
        """``ShardOwner.partial_sums`` of every part in turn."""
        return {
            p: self.owners[p].partial_sums(rowptr, gid, weight, codec, node_type)
            for p, (rowptr, gid, weight) in req_by_part.items()
        }


def _one_kind(what: str, key: object, part: int) -> None:
    """Refuse a relation or node type named to a homogeneous owner (it has one of each)."""
    if key is not None:
        raise ValueError(
            f"part {part} holds a homogeneous shard: one {what}, so ask it with none (got {key!r})"
        )
