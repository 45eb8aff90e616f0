"""Per-type partition book, the heterogeneous shard owner and the clients that call it.

**Book.** ``node_to_part.npy`` assigns global ids (``offset[t] + lid``); :class:`TypeBook`
slices it per node type (``part_N``: owner of every type-local id) and numbers each owner's
nodes of a type in ascending order (``lid_N``: position in the owner's ``owned_lid``), so the
homogeneous routing code (``RoutedNeighborSource``, ``RoutedFeatureSource``) runs unchanged
per relation and per type with type-local ids in place of gids.

**Owner.** :class:`HeteroShardOwner` memory-maps one part of a heterogeneous store and answers,
for the nodes it owns, ``sample(edge type, dst, ...)`` from that relation's in-edges (kept in
the relation's CSR order with global edge ids, so the typed sampler's randomness contract holds)
and ``fetch_encoded(node type, lid, codec)`` of its feature rows.

**Clients.** The owner protocol is the homogeneous one (``gnnsys.train.remote.client.
OwnerClient``, its Ray and in-process clients): each call names the relation or node type it
asks for, which a homogeneous owner, with one of each, is asked with ``None``.

Shape legend: ``N_t`` nodes of type ``t``, ``M`` destinations, ``K`` requested rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from gnnsys.cache.codecs import Codec, EncodedRows
from gnnsys.datasets.hetero import EdgeType
from gnnsys.train.remote.client import NO_EDGE_IDS, SampleArrays
from gnnsys.train.threads import use_actor_threads

__all__ = ["HeteroShardOwner", "HeteroStoreInfo", "TypeBook", "load_books"]


@dataclass(frozen=True, slots=True, eq=False)
class TypeBook:
    """Owner and in-owner position of every type-local id of one node type.

    Attributes:
        part_N: ``[N_t]`` int32 owner of each id.
        lid_N: ``[N_t]`` int64 position of each id in its owner's ``owned_lid`` of this type.
    """

    part_N: np.ndarray
    lid_N: np.ndarray

    @classmethod
    def of(cls, node_to_part: np.ndarray, offset: int, num_nodes: int) -> TypeBook:
        """Slice ``node_to_part`` for one type and number each owner's ids ascending."""
        part_N = np.asarray(node_to_part[offset : offset + num_nodes], dtype=np.int32)
        order = np.argsort(part_N, kind="stable")  # ascending ids within each owner
        sorted_parts = part_N[order]
        starts = np.searchsorted(sorted_parts, sorted_parts, side="left")
        lid_N = np.empty(num_nodes, dtype=np.int64)
        lid_N[order] = np.arange(num_nodes, dtype=np.int64) - starts
        return cls(part_N=part_N, lid_N=lid_N)


@dataclass(frozen=True, slots=True)
class HeteroStoreInfo:
    """What the driver knows of a heterogeneous store from its manifest alone.

    Attributes:
        num_parts: ``P``.
        num_classes: ``C`` of the labelled type.
        feature_dims: Featured node type -> ``F_t``.
        node_types: Every node type, in store order.
        edge_types: Every relation, in store order.
        num_nodes: Nodes of every type.
        num_edges: Edges of every relation.
    """

    num_parts: int
    num_classes: int
    feature_dims: dict[str, int]
    node_types: tuple[str, ...]
    edge_types: tuple[EdgeType, ...]
    num_nodes: int = 0
    num_edges: int = 0

    @classmethod
    def read(cls, root: str) -> HeteroStoreInfo:
        """Parse ``root``'s manifest (checksummed); reads no array."""
        from gnnsys.store import read_hetero_manifest

        manifest = read_hetero_manifest(root)
        return cls(
            num_parts=manifest.num_parts,
            num_classes=manifest.num_classes,
            feature_dims={
                t.name: int(t.data["x"][1][0]) for t in manifest.node_types if "x" in t.data
            },
            node_types=tuple(t.name for t in manifest.node_types),
            edge_types=tuple(r.edge_type for r in manifest.relations),
            num_nodes=manifest.num_nodes,
            num_edges=manifest.num_edges,
        )


def load_books(root: str) -> dict[str, TypeBook]:
    """A :class:`TypeBook` per node type of the store at ``root``."""
    from gnnsys.store import read_hetero_manifest
    from gnnsys.store.layout import NODE_TO_PART

    manifest = read_hetero_manifest(root)
    node_to_part = np.load(f"{root}/{NODE_TO_PART}", mmap_mode="r", allow_pickle=False)
    return {t.name: TypeBook.of(node_to_part, t.offset, t.num_nodes) for t in manifest.node_types}


class HeteroShardOwner:
    """Holds one heterogeneous shard (memory-mapped); answers for the nodes it owns.

    Used as a Ray actor (``ray.remote(HeteroShardOwner)``); plain methods, so it also runs
    in-process.

    Args:
        root: Heterogeneous partition store directory.
        part: The part this owner serves.
        own_threads: Set the process's torch threads (an actor of its own); ``False`` when a
            trainer reads through it in-process (``WorkerSpec.owner_reads == "local"``).
    """

    def __init__(self, root: str, part: int, *, own_threads: bool = True) -> None:
        from gnnsys.sampler import CSRNeighborSource
        from gnnsys.store import read_hetero_shard

        if own_threads:
            use_actor_threads()  # the CPUs Ray assigned (gnnsys.train.threads)
        shard = read_hetero_shard(root, part)
        books = load_books(root)
        self.part = part
        self._lid = {t: b.lid_N for t, b in books.items()}
        self._x = {t: s.data["x"] for t, s in shard.nodes.items() if "x" in s.data}
        self._sources = {
            et: CSRNeighborSource(
                rel.indptr,
                rel.indices_lid,
                rel.e_id,
                books[et[2]].lid_N,
                owned_gid=shard.nodes[et[2]].owned_lid,
                edge_ids=False,
            )
            for et, rel in shard.relations.items()
        }

    def ping(self) -> int:
        """Liveness check; returns the part."""
        return self.part

    def sample(
        self,
        dst_lid: np.ndarray,
        fanout: int,
        seed: int,
        hop: int,
        replace: bool,
        edge_type: EdgeType | None = None,
    ) -> SampleArrays:
        """Draw in-neighbors over ``edge_type`` of owned ``dst_lid`` (type-local ids).

        Raises:
            ValueError: ``edge_type`` is not a relation of the store (or not given).
        """
        key = None if edge_type is None else tuple(edge_type)
        if key not in self._sources:
            raise ValueError(
                f"part {self.part}: relation {edge_type!r} is not in the store; name one of "
                f"{sorted(self._sources)}"
            )
        got = self._sources[key].sample_neighbors(
            torch.from_numpy(np.array(dst_lid, dtype=np.int64)),
            fanout,
            seed=seed,
            hop=hop,
            replace=replace,
        )
        return (got.count_M.numpy(), got.src_gid_E.numpy(), NO_EDGE_IDS)

    def fetch_encoded(
        self, lid: np.ndarray, codec: Codec, node_type: str | None = None
    ) -> EncodedRows:
        """Feature rows of owned ``lid`` of ``node_type``, encoded with ``codec``.

        Raises:
            ValueError: ``node_type`` has no features in the store (or is not given).
        """
        return codec.encode(torch.from_numpy(self._rows(lid, node_type)))

    def _rows(self, lid: np.ndarray, node_type: str | None) -> np.ndarray:
        """``[K, F_t]`` float32 feature rows of owned type-local ``lid`` of ``node_type``."""
        if node_type is None or node_type not in self._x:
            raise ValueError(
                f"part {self.part}: node type {node_type!r} has no features; its rows are "
                "learnable embeddings served by the trainers"
            )
        rows = np.take(self._x[node_type], self._lid[node_type][lid], axis=0)
        out: np.ndarray = rows.astype(np.float32, copy=False)
        return out

    def partial_sums(
        self,
        group_rowptr: np.ndarray,
        src_lid: np.ndarray,
        src_weight: np.ndarray | None,
        codec: Codec,
        node_type: str | None = None,
    ) -> EncodedRows:
        """``ShardOwner.partial_sums`` over the owned rows of ``node_type`` (type-local ids).

        Raises:
            ValueError: ``node_type`` has no features, or the arrays do not fit together.
        """
        from gnnsys.train.layer0.plan import answer_partials

        def rows(lid: np.ndarray) -> np.ndarray:
            return self._rows(lid, node_type)

        return answer_partials(rows, group_rowptr, src_lid, src_weight, codec)
