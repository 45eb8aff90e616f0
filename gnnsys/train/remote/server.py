"""The shard owner: one process per part serving its structure and features to every worker.

Shape legend: ``M`` destinations, ``K`` requested rows, ``F`` features, ``G`` partial sums.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gnnsys.cache.codecs import Codec, EncodedRows
from gnnsys.sampler.csr_source import CSRNeighborSource
from gnnsys.store.pages import ReadAhead, read_ahead_dense
from gnnsys.train.remote.client import NO_EDGE_IDS, SampleArrays
from gnnsys.train.threads import use_actor_threads
from gnnsys.types import EdgeType, PartitionBook

__all__ = ["LocalOwnerClient", "ShardOwner"]


@dataclass(frozen=True, slots=True, eq=False)
class _TypeRows:
    """One node type's rows at an owner: where each id sits, and its feature rows."""

    lid_N: np.ndarray
    """``[N_t]`` int64 position of every id of the type in its owner's shard."""
    x: np.ndarray | None
    """``[M_t, F_t]`` owned feature rows (memory-mapped), or ``None`` (featureless)."""
    ahead: ReadAhead | None


class ShardOwner:
    """Holds one shard (memory-mapped) and answers neighbor and feature requests for its nodes.

    One owner for stores of either kind: every call names its relation or node type, ``None``
    for the one relation and the one node type of a homogeneous store (ids are gids), a name of
    a typed one (ids are type-local; ``gnnsys.store.load_books``). The store's kind is read
    once, when the owner is built (``_tables``).

    Used as a Ray actor (``ray.remote(ShardOwner)``); plain methods, so it also runs in-process.

    Args:
        root: Partition store directory.
        part: The part this owner serves.
        own_threads: Set torch's threads to the CPUs Ray assigned this actor (False when a
            trainer builds it in-process to read a co-located shard: ``--owner-reads local``).
        books: The store's ``load_books`` when the caller has loaded them already (a trainer or
            the in-process executor building every part's owner); ``None`` loads them.
    """

    def __init__(
        self,
        root: str,
        part: int,
        *,
        own_threads: bool = True,
        books: Mapping[Any, PartitionBook] | None = None,
    ) -> None:
        if own_threads:  # an actor of its own; not when a trainer reads through it in-process
            use_actor_threads()  # the CPUs Ray assigned (gnnsys.train.threads)
        self.part = part
        self._types, self._relations = _tables(root, part, books)

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
        """Draw in-neighbors over ``edge_type`` of owned ``dst_gid`` (``sample_neighbors``)."""
        got = self._relation(edge_type).sample_neighbors(
            torch.from_numpy(np.array(dst_gid, dtype=np.int64)),
            fanout,
            seed=seed,
            hop=hop,
            replace=replace,
        )
        return (got.count_M.numpy(), got.src_gid_E.numpy(), NO_EDGE_IDS)

    def degree(self, gid: np.ndarray, edge_type: EdgeType | None = None) -> np.ndarray:
        """``[K]`` int64 in-degrees over ``edge_type`` of owned ``gid`` (a shard row's length).

        Raises:
            ValueError: A gid this part does not own.
        """
        source = self._relation(edge_type)
        rows = source.rows_of(np.asarray(gid, dtype=np.int64))  # raises if owned elsewhere
        indptr = source.indptr.numpy()  # int64, the source's own (no copy)
        out: np.ndarray = indptr[rows + 1] - indptr[rows]
        return out

    def fetch(self, gid: np.ndarray, node_type: str | None = None) -> np.ndarray:
        """Float32 rows ``[K, F]`` of owned ``gid`` of ``node_type``.

        Raises:
            ValueError: The type has no stored features.
        """
        rows_of = self._type(node_type)
        x, ahead = rows_of.x, rows_of.ahead
        if x is None or ahead is None:
            raise ValueError(
                f"part {self.part}: node type {node_type!r} has no stored features (a store "
                "written without x, or a featureless type whose rows the trainers learn)"
            )
        lid = rows_of.lid_N[gid]
        if read_ahead_dense(x, lid):  # an evaluation's large sorted requests: one read
            rows: np.ndarray = np.take(x, lid, axis=0)  # (no memmap wrapper: cheaper)
        else:  # training's scattered rows: missing pages asked for together
            rows = ahead.take(lid)
        return rows.astype(np.float32, copy=False)

    def fetch_encoded(
        self, gid: np.ndarray, codec: Codec, node_type: str | None = None
    ) -> EncodedRows:
        """Rows of owned ``gid`` of ``node_type``, encoded with ``codec`` for the wire."""
        return codec.encode(torch.from_numpy(self.fetch(gid, node_type)))

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
            src_gid: ``[K]`` int64 owned source ids of ``node_type``.
            src_weight: ``[K]`` float32 per-pair weights (GCN's ``s_j``), or ``None``.
            codec: Encode the sums with it for the wire (``FP32Codec``: plain float32 rows).
            node_type: The sources' node type (``None``: a homogeneous store's one type).

        Returns:
            ``[G, F]`` sums as ``EncodedRows`` of ``codec``.

        Raises:
            ValueError: The type has no features, or the arrays do not fit together.
        """
        from gnnsys.train.layer0.plan import answer_partials

        def rows(gid: np.ndarray) -> np.ndarray:
            return self.fetch(gid, node_type)

        self._type(node_type)  # an unknown type is refused before any work
        return answer_partials(rows, group_rowptr, src_gid, src_weight, codec)

    def _type(self, node_type: str | None) -> _TypeRows:
        if node_type not in self._types:
            raise ValueError(
                f"part {self.part}: node type {node_type!r} is not in the store; ask for one of "
                f"{list(self._types)} (None: the one type of a homogeneous store)"
            )
        return self._types[node_type]

    def _relation(self, edge_type: EdgeType | None) -> CSRNeighborSource:
        key = None if edge_type is None else tuple(edge_type)
        if key not in self._relations:
            raise ValueError(
                f"part {self.part}: relation {edge_type!r} is not in the store; ask for one of "
                f"{list(self._relations)} (None: the one relation of a homogeneous store)"
            )
        return self._relations[key]


def _tables(
    root: str, part: int, books: Mapping[Any, PartitionBook] | None
) -> tuple[dict[str | None, _TypeRows], dict[EdgeType | None, CSRNeighborSource]]:
    """Part ``part``'s rows per node type and in-edges per relation, of a store of either kind.

    Keyed by the names the store files them under; a homogeneous store's one type and relation
    (``ONE_TYPE``, ``ONE_RELATION``) are also keyed ``None``.
    """
    from gnnsys.store import load_books, read_shard
    from gnnsys.store.pages import advise_random
    from gnnsys.types import ONE_RELATION, ONE_TYPE

    def rows(lid_N: np.ndarray, x: np.ndarray | None) -> _TypeRows:
        advise_random(x)  # requested rows
        return _TypeRows(lid_N, x, None if x is None else ReadAhead(x))  # scattered requests

    books = load_books(root) if books is None else books
    shard = read_shard(root, part)
    one = None in books  # a homogeneous store: one book, keyed None

    def book(node_type: str) -> PartitionBook:
        return books[None if one else node_type]

    sources: dict[EdgeType | None, CSRNeighborSource] = {}
    for et, rel in shard.relations.items():
        advise_random(rel.indptr, rel.indices_lid, rel.e_id)
        sources[et] = CSRNeighborSource.from_relation(shard, et, book(et[2]).lid_N, edge_ids=False)
    types: dict[str | None, _TypeRows] = {
        t: rows(book(t).lid_N, nodes.data.get("x")) for t, nodes in shard.nodes.items()
    }
    if one:  # the one type and relation answer to None too (the homogeneous protocol)
        types[None], sources[None] = types[ONE_TYPE], sources[ONE_RELATION]
    return types, sources


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

    def degree_many(
        self, gid_by_part: dict[int, np.ndarray], edge_type: EdgeType | None = None
    ) -> dict[int, np.ndarray]:
        """``ShardOwner.degree`` of every part in turn."""
        return {p: self.owners[p].degree(gid, edge_type) for p, gid in gid_by_part.items()}

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
