"""One part's shard, as records, and its pure construction from the whole graph (then saved).

Per relation, the in-edges of every owned destination are kept in the relation's CSR order, with
``e_id`` their CSR positions: the sampler's randomness contract (``gnnsys.sampler.base``)
depends on it, so that sampling a node at its owner draws what the whole-graph sampler draws.
:func:`build_shard`, the one shard builder, builds the shard of a graph of any number of types
(``Shard``: ``TypeShard`` per node type, ``RelationShard`` per relation); a one-type store's
record is ``Shard.one_type`` (``PartitionShard``), which the streaming writer saves without
building a shard at all (``gnnsys.store.writer``).

Shape legend: ``N`` nodes, ``G`` nodes of all types, ``M``/``M_t`` owned nodes (of type
``t``), ``E`` owned in-edges (of a relation), ``H``/``H_t`` halo nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gnnsys.partitioners.base import csr_positions
from gnnsys.partitioners.halo import halo_of_part
from gnnsys.store.layout import SHARD_DATA
from gnnsys.types import EdgeType, Graph, PartitionBook, PartitionShard
from gnnsys.types.relations import HeteroGraph

__all__ = [
    "Shard",
    "RelationShard",
    "TypeShard",
    "build_shard",
    "data_arrays",
    "local_index",
]


def local_index(
    src_gid_E: np.ndarray, book: PartitionBook, part: int, halo_gid: np.ndarray, num_owned: int
) -> np.ndarray:
    """``[E]`` int64: lid for owned sources, ``num_owned + j`` for ``halo_gid[j]``.

    Raises:
        ValueError: A source is neither owned by ``part`` nor in ``halo_gid``.
    """
    owned_E = book.part_N[src_gid_E] == part
    halo_pos = np.searchsorted(halo_gid, src_gid_E)
    halo_pos = np.minimum(halo_pos, max(halo_gid.shape[0] - 1, 0))
    in_halo = halo_gid.shape[0] > 0 and halo_gid[halo_pos] == src_gid_E
    if not np.all(owned_E | in_halo):
        raise ValueError(f"part {part}: an edge source is neither owned nor in the halo")
    out: np.ndarray = np.where(owned_E, book.lid_N[src_gid_E], num_owned + halo_pos)
    return out.astype(np.int64)


@dataclass(frozen=True, slots=True, eq=False)
class TypeShard:
    """The nodes of one type that a part owns, its halo of that type, and the owned rows.

    Attributes:
        node_type: The type.
        num_nodes: ``N_t``, nodes of this type in the whole graph.
        offset: First global id of the type (``gid = offset + lid``).
        owned_lid: ``[M_t]`` int64 owned type-local ids, ascending (shard position = index).
        halo_lid: ``[H_t]`` int64 k-hop halo nodes of this type owned elsewhere, ascending.
        halo_part: ``[H_t]`` int32 owner of each halo node.
        data: Owned rows of every per-node array (``x``, ``y``, masks, ``attr-<name>``).
    """

    node_type: str
    num_nodes: int
    offset: int
    owned_lid: np.ndarray
    halo_lid: np.ndarray
    halo_part: np.ndarray
    data: dict[str, np.ndarray]

    @property
    def num_owned(self) -> int:
        """``M_t``."""
        return int(self.owned_lid.shape[0])


@dataclass(frozen=True, slots=True, eq=False)
class RelationShard:
    """A relation's in-edges of the part's owned destinations.

    Attributes:
        edge_type: ``(src, rel, dst)``.
        indptr: ``[M_dst + 1]`` int64 CSR row pointer over the owned ``dst`` nodes.
        indices_lid: ``[E]`` int64 type-local id of each edge's source.
        indices_local: ``[E]`` int64 source position: ``< M_src`` in ``owned_lid[src]``, else
            ``M_src + j`` for ``halo_lid[src][j]``.
        e_id: ``[E]`` int64 position of each edge in the relation's CSR.
    """

    edge_type: EdgeType
    indptr: np.ndarray
    indices_lid: np.ndarray
    indices_local: np.ndarray
    e_id: np.ndarray


@dataclass(frozen=True, slots=True, eq=False)
class Shard:
    """Everything one part holds, per node type and relation (a store of either kind)."""

    part: int
    num_parts: int
    nodes: dict[str, TypeShard]
    relations: dict[EdgeType, RelationShard]

    def one_type(self) -> PartitionShard:
        """This shard as a homogeneous ``PartitionShard``: the same arrays, no copy.

        The one type's ids are its gids (offset 0).

        Raises:
            ValueError: The shard has more than one node type or relation.
        """
        if len(self.nodes) != 1 or len(self.relations) != 1:
            raise ValueError(
                f"part {self.part} has {len(self.nodes)} node types and {len(self.relations)} "
                "relations; only a one-type shard has a homogeneous view"
            )
        ((nodes,), (edges,)) = (self.nodes.values(), self.relations.values())
        return PartitionShard(
            part=self.part,
            num_parts=self.num_parts,
            num_nodes=nodes.num_nodes,
            owned_gid=nodes.owned_lid,
            indptr=edges.indptr,
            indices_gid=edges.indices_lid,
            e_id=edges.e_id,
            halo_gid=nodes.halo_lid,
            halo_part=nodes.halo_part,
            indices_local=edges.indices_local,
            **{k: nodes.data.get(k) for k in SHARD_DATA},
        )


def data_arrays(graph: HeteroGraph, node_type: str) -> dict[str, np.ndarray]:
    """A type's per-node arrays by store name (``attrs[k]`` is stored as ``attr-<k>``)."""
    node_set = graph.nodes[node_type]
    arrays = node_set.arrays()
    return {(k if k not in node_set.attrs else f"attr-{k}"): v for k, v in arrays.items()}


def build_shard(
    graph: HeteroGraph,
    part_N: np.ndarray,
    num_parts: int,
    part: int,
    num_hops: int,
    directed: Graph,
    *,
    with_data: bool = True,
) -> Shard:
    """The shard of ``part``: per type owned ids, k-hop halo and rows; per relation in-edges.

    Args:
        graph: The whole heterogeneous graph.
        part_N: ``[G]`` owner of every global id.
        num_parts: ``P``.
        part: Which part, in ``[0, P)``.
        num_hops: ``k`` of the halo (GNN layers).
        directed: ``graph.to_homogeneous()[0]``: the halo follows every relation's in-edges.
        with_data: Also gather the owned rows of the per-node arrays (copies).
    """
    owned_gid = np.flatnonzero(part_N == part).astype(np.int64)
    halo_gid = halo_of_part(directed, part_N, part, num_hops, seeds=owned_gid)
    nodes = {}
    for node_type, offset in graph.node_offsets().items():
        n = graph.num_nodes(node_type)
        owned = owned_gid[(owned_gid >= offset) & (owned_gid < offset + n)] - offset
        halo = halo_gid[(halo_gid >= offset) & (halo_gid < offset + n)] - offset
        rows = {k: np.asarray(v[owned]) for k, v in data_arrays(graph, node_type).items()}
        nodes[node_type] = TypeShard(
            node_type=node_type,
            num_nodes=n,
            offset=offset,
            owned_lid=owned,
            halo_lid=halo,
            halo_part=part_N[halo + offset].astype(np.int32),
            data=rows if with_data else {},
        )
    relations = {et: _relation(graph, et, nodes) for et in graph.relations}
    return Shard(part=part, num_parts=num_parts, nodes=nodes, relations=relations)


def _relation(
    graph: HeteroGraph, edge_type: EdgeType, nodes: dict[str, TypeShard]
) -> RelationShard:
    src, _, dst = edge_type
    rel = graph.relations[edge_type]
    pos_E, count_M = csr_positions(rel.indptr, nodes[dst].owned_lid)
    indptr = np.zeros(count_M.shape[0] + 1, dtype=np.int64)
    np.cumsum(count_M, out=indptr[1:])
    src_lid = rel.indices[pos_E].astype(np.int64)
    return RelationShard(
        edge_type=edge_type,
        indptr=indptr,
        indices_lid=src_lid,
        indices_local=local_positions(src_lid, nodes[src]),
        e_id=pos_E,
    )


def local_positions(src_lid: np.ndarray, shard: TypeShard) -> np.ndarray:
    """``[E]`` int64 position of each source among ``[owned_lid | halo_lid]`` of its type.

    Raises:
        ValueError: A source is neither owned nor in the halo (the halo is too small).
    """
    owned, halo = shard.owned_lid, shard.halo_lid
    pos_owned, is_owned = _find(owned, src_lid)
    pos_halo, is_halo = _find(halo, src_lid)
    if not np.all(is_owned | is_halo):
        raise ValueError(f"an edge source of type {shard.node_type!r} is neither owned nor halo")
    out: np.ndarray = np.where(is_owned, pos_owned, owned.shape[0] + pos_halo)
    return out.astype(np.int64)


def _find(sorted_ids: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Position of each of ``ids`` in ``sorted_ids`` and whether it is there."""
    pos = np.searchsorted(sorted_ids, ids)
    if sorted_ids.shape[0] == 0:
        return pos, np.zeros(ids.shape[0], dtype=bool)
    found: np.ndarray = sorted_ids[np.minimum(pos, sorted_ids.shape[0] - 1)] == ids
    return pos, found
