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

**Clients.** :class:`HeteroOwnerClient` is the owner protocol; :func:`relation_client` and
:func:`type_client` bind an edge or node type and present the homogeneous ``OwnerClient``
methods the routed sources call. The Ray client issues every owner's call before waiting on
any, with the run deadline on every wait (``remote.client.get_within``).

Shape legend: ``N_t`` nodes of type ``t``, ``M`` destinations, ``K`` requested rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from gnnsys.cache.codecs import Codec, EncodedRows
from gnnsys.datasets.hetero import EdgeType
from gnnsys.train.remote.client import SampleArrays, get_within
from gnnsys.train.threads import use_actor_threads

__all__ = [
    "HeteroOwnerClient",
    "HeteroStoreInfo",
    "HeteroShardOwner",
    "LocalHeteroOwnerClient",
    "RayHeteroOwnerClient",
    "TypeBook",
    "relation_client",
    "type_client",
]


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
    """

    num_parts: int
    num_classes: int
    feature_dims: dict[str, int]
    node_types: tuple[str, ...]
    edge_types: tuple[EdgeType, ...]

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
    """

    def __init__(self, root: str, part: int) -> None:
        from gnnsys.sampler import CSRNeighborSource
        from gnnsys.store import read_hetero_shard

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
            )
            for et, rel in shard.relations.items()
        }

    def ping(self) -> int:
        """Liveness check; returns the part."""
        return self.part

    def sample(
        self,
        edge_type: EdgeType,
        dst_lid: np.ndarray,
        fanout: int,
        seed: int,
        hop: int,
        replace: bool,
    ) -> SampleArrays:
        """Draw in-neighbors over ``edge_type`` of owned ``dst_lid`` (type-local ids)."""
        got = self._sources[tuple(edge_type)].sample_neighbors(  # type: ignore[index]
            torch.from_numpy(np.array(dst_lid, dtype=np.int64)),
            fanout,
            seed=seed,
            hop=hop,
            replace=replace,
        )
        return (got.count_M.numpy(), got.src_gid_E.numpy(), got.e_id_E.numpy())

    def fetch_encoded(self, node_type: str, lid: np.ndarray, codec: Codec) -> EncodedRows:
        """Feature rows of owned ``lid`` of ``node_type``, encoded with ``codec``.

        Raises:
            ValueError: ``node_type`` has no features in the store.
        """
        if node_type not in self._x:
            raise ValueError(
                f"part {self.part}: node type {node_type!r} has no features; its rows are "
                "learnable embeddings served by the trainers"
            )
        rows = np.asarray(self._x[node_type][self._lid[node_type][lid]], dtype=np.float32)
        return codec.encode(torch.from_numpy(rows))


class HeteroOwnerClient(Protocol):
    """Sends one batched request to each heterogeneous owner, answers keyed by part."""

    def sample_many(
        self,
        edge_type: EdgeType,
        dst_by_part: dict[int, np.ndarray],
        fanout: int,
        *,
        seed: int,
        hop: int,
        replace: bool,
    ) -> dict[int, SampleArrays]:
        """``HeteroShardOwner.sample`` at every part of ``dst_by_part`` at once."""
        ...

    def fetch_encoded_many(
        self, node_type: str, lid_by_part: dict[int, np.ndarray], codec: Codec
    ) -> dict[int, EncodedRows]:
        """``HeteroShardOwner.fetch_encoded`` at every part of ``lid_by_part`` at once."""
        ...


class LocalHeteroOwnerClient:
    """:class:`HeteroOwnerClient` over in-process owners (the in-process executor)."""

    def __init__(self, owners: list[HeteroShardOwner]) -> None:
        self.owners = owners

    def sample_many(
        self,
        edge_type: EdgeType,
        dst_by_part: dict[int, np.ndarray],
        fanout: int,
        *,
        seed: int,
        hop: int,
        replace: bool,
    ) -> dict[int, SampleArrays]:
        """Every owner's ``sample``, in turn."""
        return {
            p: self.owners[p].sample(edge_type, dst, fanout, seed, hop, replace)
            for p, dst in dst_by_part.items()
        }

    def fetch_encoded_many(
        self, node_type: str, lid_by_part: dict[int, np.ndarray], codec: Codec
    ) -> dict[int, EncodedRows]:
        """Every owner's ``fetch_encoded``, in turn."""
        return {
            p: self.owners[p].fetch_encoded(node_type, lid, codec) for p, lid in lid_by_part.items()
        }


class RayHeteroOwnerClient:
    """:class:`HeteroOwnerClient` over owner actor handles, a deadline on every wait.

    Args:
        owners: Actor handle of each part's owner, indexed by part.
        deadline_s: Seconds a batch of calls may take before ``RemoteCallTimeoutError``.
    """

    def __init__(self, owners: list[Any], deadline_s: float) -> None:
        self.owners, self.deadline_s = owners, deadline_s

    def sample_many(
        self,
        edge_type: EdgeType,
        dst_by_part: dict[int, np.ndarray],
        fanout: int,
        *,
        seed: int,
        hop: int,
        replace: bool,
    ) -> dict[int, SampleArrays]:
        """One ``sample`` call per part, all in flight together."""
        refs = {
            p: self.owners[p].sample.remote(edge_type, dst, fanout, seed, hop, replace)
            for p, dst in dst_by_part.items()
        }
        return get_within(refs, self.deadline_s, "sample_neighbors to parts", "owners'")

    def fetch_encoded_many(
        self, node_type: str, lid_by_part: dict[int, np.ndarray], codec: Codec
    ) -> dict[int, EncodedRows]:
        """One ``fetch_encoded`` call per part, all in flight together."""
        refs = {
            p: self.owners[p].fetch_encoded.remote(node_type, lid, codec)
            for p, lid in lid_by_part.items()
        }
        return get_within(refs, self.deadline_s, "fetch_encoded to parts", "owners'")


class _RelationClient:
    """The homogeneous ``OwnerClient.sample_many`` of one relation."""

    def __init__(self, client: HeteroOwnerClient, edge_type: EdgeType) -> None:
        self.client, self.edge_type = client, edge_type

    def sample_many(
        self, dst_by_part: dict[int, np.ndarray], fanout: int, *, seed: int, hop: int, replace: bool
    ) -> dict[int, SampleArrays]:
        """``HeteroOwnerClient.sample_many`` of the bound relation."""
        return self.client.sample_many(
            self.edge_type, dst_by_part, fanout, seed=seed, hop=hop, replace=replace
        )


class _TypeClient:
    """The homogeneous ``OwnerClient.fetch_encoded_many`` of one node type."""

    def __init__(self, client: HeteroOwnerClient, node_type: str) -> None:
        self.client, self.node_type = client, node_type

    def fetch_encoded_many(
        self, gid_by_part: dict[int, np.ndarray], codec: Codec
    ) -> dict[int, EncodedRows]:
        """``HeteroOwnerClient.fetch_encoded_many`` of the bound type (ids are type-local)."""
        return self.client.fetch_encoded_many(self.node_type, gid_by_part, codec)


def relation_client(client: HeteroOwnerClient, edge_type: EdgeType) -> Any:
    """``client`` bound to ``edge_type``, as the ``OwnerClient`` ``RoutedNeighborSource`` calls."""
    return _RelationClient(client, edge_type)


def type_client(client: HeteroOwnerClient, node_type: str) -> Any:
    """``client`` bound to ``node_type``, as the ``OwnerClient`` ``RoutedFeatureSource`` calls."""
    return _TypeClient(client, node_type)
