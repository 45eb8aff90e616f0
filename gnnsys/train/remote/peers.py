"""Rank-to-rank row requests: ``PeerClient`` and its two executors.

Two kinds of rows are served by the peer trainers, not by the shard owners:

* during evaluation, the rows a rank needs for layer ``l >= 1`` are embeddings its peers
  computed a moment ago (``serve_rows``; a table is a layer input, and for typed graphs a
  layer input of one node type: ``gnnsys.train.eval.sharded``);
* during training on a graph with featureless node types, the learnable embedding rows that a
  peer owns (``serve_embedding``, answered once the owner has applied the requester's step:
  ``gnnsys.train.embedding``).

As with the owners, a request carries one id array per peer, every peer's call is in flight
before any is awaited, and every wait has a deadline.

Shape legend: ``K`` requested rows, ``H`` embedding width.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from gnnsys.cache.codecs import Codec, EncodedRows
from gnnsys.train.remote.client import get_within

__all__ = ["LocalPeerClient", "PeerClient", "RayPeerClient", "RowServer"]


class RowServer(Protocol):
    """What a peer answers (``TrainWorker`` implements it)."""

    def serve_rows(self, table: int, gid: np.ndarray, codec: Codec) -> EncodedRows:
        """Rows of this rank's table ``table`` (layer input ``table``) for owned ``gid``."""
        ...

    def serve_degree(self, gid: np.ndarray) -> np.ndarray:
        """``[K]`` int64 in-degrees of owned ``gid`` in the whole graph."""
        ...

    def serve_embedding(
        self, node_type: str, lid: np.ndarray, step: int, codec: Codec
    ) -> EncodedRows:
        """Learnable rows of owned type-local ``lid`` after ``step`` updates."""
        ...


class PeerClient(Protocol):
    """Sends one batched request to each peer and returns the answers keyed by part."""

    def rows_many(
        self, table: int, gid_by_part: dict[int, np.ndarray], codec: Codec
    ) -> dict[int, EncodedRows]:
        """Rows of table ``table`` of ``gid_by_part[p]`` from peer ``p``, for every ``p``."""
        ...

    def degree_many(self, gid_by_part: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
        """In-degrees of ``gid_by_part[p]`` from peer ``p``, for every ``p``."""
        ...

    def embedding_many(
        self, node_type: str, step: int, lid_by_part: dict[int, np.ndarray], codec: Codec
    ) -> dict[int, EncodedRows]:
        """Embedding rows of ``lid_by_part[p]`` from peer ``p`` after ``step`` updates."""
        ...


class LocalPeerClient:
    """:class:`PeerClient` over in-process peers (the in-process executor): direct calls.

    Args:
        peers: The rank objects, indexed by rank; filled in after they are built.
    """

    def __init__(self, peers: list[RowServer] | None = None) -> None:
        self.peers: list[RowServer] = peers if peers is not None else []

    def rows_many(
        self, table: int, gid_by_part: dict[int, np.ndarray], codec: Codec
    ) -> dict[int, EncodedRows]:
        """Each peer's ``serve_rows``, called in turn."""
        return {p: self.peers[p].serve_rows(table, g, codec) for p, g in gid_by_part.items()}

    def degree_many(self, gid_by_part: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
        """Each peer's ``serve_degree``, called in turn."""
        return {p: self.peers[p].serve_degree(g) for p, g in gid_by_part.items()}

    def embedding_many(
        self, node_type: str, step: int, lid_by_part: dict[int, np.ndarray], codec: Codec
    ) -> dict[int, EncodedRows]:
        """Each peer's ``serve_embedding``, called in turn."""
        return {
            p: self.peers[p].serve_embedding(node_type, lid, step, codec)
            for p, lid in lid_by_part.items()
        }


class RayPeerClient:
    """:class:`PeerClient` over trainer actor handles, with a deadline on every wait.

    The trainers are threaded actors, so a peer answers while its own evaluation step runs.

    Args:
        peers: Actor handle of each rank, indexed by rank.
        deadline_s: Seconds a batch of calls may take before ``RemoteCallTimeoutError``.
    """

    def __init__(self, peers: list[Any], deadline_s: float) -> None:
        self.peers, self.deadline_s = peers, deadline_s

    def _get(self, refs: dict[int, Any], what: str) -> dict[int, Any]:
        return get_within(refs, self.deadline_s, f"{what} to ranks", "workers'")

    def rows_many(
        self, table: int, gid_by_part: dict[int, np.ndarray], codec: Codec
    ) -> dict[int, EncodedRows]:
        """One ``serve_rows`` call per peer, all in flight together."""
        refs = {p: self.peers[p].serve_rows.remote(table, g, codec) for p, g in gid_by_part.items()}
        return self._get(refs, "serve_rows")

    def degree_many(self, gid_by_part: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
        """One ``serve_degree`` call per peer, all in flight together."""
        refs = {p: self.peers[p].serve_degree.remote(g) for p, g in gid_by_part.items()}
        return self._get(refs, "serve_degree")

    def embedding_many(
        self, node_type: str, step: int, lid_by_part: dict[int, np.ndarray], codec: Codec
    ) -> dict[int, EncodedRows]:
        """One ``serve_embedding`` call per peer, all in flight together."""
        refs = {
            p: self.peers[p].serve_embedding.remote(node_type, lid, step, codec)
            for p, lid in lid_by_part.items()
        }
        return self._get(refs, "serve_embedding")
