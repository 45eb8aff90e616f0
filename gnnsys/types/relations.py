"""``HeteroGraph``: a heterogeneous graph as typed nodes and one in-edge CSR per relation.

Vocabulary (PyG's): a *node type* is a string (``"paper"``); an *edge type* or *relation* is a
triple ``(src, rel, dst)`` (``("author", "writes", "paper")``). Node ids are per type: a node's
*type-local id* (``lid`` below) lies in ``[0, num_nodes[type])``, as in ``HeteroData``.

Every relation is held as a CSR over the *in*-edges of its destination type, like ``Graph``:
for a destination ``v`` of type ``dst``, ``indices[indptr[v]:indptr[v+1]]`` are the type-local
ids of the ``src`` nodes ``u`` of the edges ``u -> v``. An edge's position in its relation's CSR
is its edge id (``e_id``) within that relation.

**Global id space** (for a partitioner: one assignment over all node types). Node types are
ordered as in ``node_types`` (insertion order, as ``HeteroData.node_types``); type ``t`` owns
the global ids ``[offset[t], offset[t] + num_nodes[t])`` with ``offset`` the running sum of the
earlier types' counts. This is the id space of PyG's ``HeteroData.to_homogeneous()`` and of DGL's
``to_homogeneous``, so ``gid = offset[t] + lid``. ``to_homogeneous()`` returns the merged
``Graph`` (every relation's edges, in global ids) plus the type of every node, which is what a
partitioner needs; an ``Assignment`` over it then covers every node type at once.

Shape legend: ``N_t`` nodes of type ``t``, ``M`` destination nodes of a relation, ``E`` edges of
a relation, ``F_t`` feature width of type ``t``, ``G`` nodes of all types together.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from gnnsys.types import EdgeType, Graph

if TYPE_CHECKING:
    from torch_geometric.data import HeteroData

__all__ = ["HeteroGraph", "NodeSet", "Relation", "relation_from_coo"]

_NODE_KEYS = ("x", "y", "train_mask", "val_mask", "test_mask")


@dataclass(frozen=True, slots=True, eq=False)
class NodeSet:
    """The nodes of one type: their count and optional per-node arrays.

    Attributes:
        num_nodes: ``N_t``.
        x: ``[N_t, F_t]`` float32/float16 features, or ``None`` (types without features).
        y: ``[N_t]`` int64 labels (``-1`` = unlabeled), or ``None``.
        train_mask: ``[N_t]`` bool, or ``None``; likewise ``val_mask``, ``test_mask``.
        attrs: Other per-node arrays (first dim ``N_t``), e.g. ogbn-mag's ``year``.
    """

    num_nodes: int
    x: np.ndarray | None = None
    y: np.ndarray | None = None
    train_mask: np.ndarray | None = None
    val_mask: np.ndarray | None = None
    test_mask: np.ndarray | None = None
    attrs: dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Check every array against ``num_nodes`` (a ``ValueError`` naming the bad one)."""
        if not isinstance(self.num_nodes, int | np.integer) or self.num_nodes < 0:
            raise ValueError(f"num_nodes must be a non-negative int, got {self.num_nodes!r}")
        object.__setattr__(self, "num_nodes", int(self.num_nodes))
        # Graph's validation covers x, y and the masks; an edgeless CSR costs N_t + 1 int64.
        Graph(
            indptr=np.zeros(self.num_nodes + 1, dtype=np.int64),
            indices=np.zeros(0, dtype=np.int32),
            num_nodes=self.num_nodes,
            **{key: getattr(self, key) for key in _NODE_KEYS},
        )
        for key, value in self.attrs.items():
            if not isinstance(value, np.ndarray) or value.shape[:1] != (self.num_nodes,):
                shape = getattr(value, "shape", None)
                raise ValueError(
                    f"attrs[{key!r}] has shape {shape}; expected ({self.num_nodes}, ...)"
                )

    def arrays(self) -> dict[str, np.ndarray]:
        """Every per-node array by name (``x``, ``y``, masks, then ``attrs``), ``None`` left out."""
        out = {key: getattr(self, key) for key in _NODE_KEYS if getattr(self, key) is not None}
        return out | self.attrs


@dataclass(frozen=True, slots=True, eq=False)
class Relation:
    """One edge type as a CSR over the in-edges of its destination type.

    Attributes:
        indptr: ``[M + 1]`` int64 row pointer, ``M = num_nodes[dst]``.
        indices: ``[E]`` int32/int64 type-local ids of the source nodes, each in ``[0, num_src)``.
        num_src: Nodes of the source type (bounds ``indices``).
    """

    indptr: np.ndarray
    indices: np.ndarray
    num_src: int

    def __post_init__(self) -> None:
        """Validate the CSR (monotone ``indptr`` from 0, ids within ``num_src``)."""
        indptr, indices = self.indptr, self.indices
        if not isinstance(indptr, np.ndarray) or indptr.ndim != 1 or indptr.dtype != np.int64:
            raise ValueError("indptr must be a 1-D int64 numpy array (a CSR row pointer)")
        if indptr.shape[0] < 1 or indptr[0] != 0 or np.any(np.diff(indptr) < 0):
            raise ValueError("indptr must start at 0 and be non-decreasing")
        if not isinstance(indices, np.ndarray) or indices.dtype not in (np.int32, np.int64):
            raise ValueError("indices must be an int32 or int64 numpy array")
        if indices.shape != (int(indptr[-1]),):
            raise ValueError(f"indices has shape {indices.shape}; indptr[-1] = {int(indptr[-1])}")
        if indices.size and (int(indices.min()) < 0 or int(indices.max()) >= self.num_src):
            raise ValueError(
                f"indices has source ids in [{int(indices.min())}, {int(indices.max())}] but "
                f"the source type has {self.num_src} nodes"
            )

    @property
    def num_dst(self) -> int:
        """``M``, nodes of the destination type."""
        return int(self.indptr.shape[0]) - 1

    @property
    def num_edges(self) -> int:
        """``E``."""
        return int(self.indptr[-1])

    def dst_of_edges(self) -> np.ndarray:
        """``[E]`` int64 destination id of every edge, in CSR order."""
        return np.repeat(np.arange(self.num_dst, dtype=np.int64), np.diff(self.indptr))

    def transposed(self) -> Relation:
        """The reverse relation: in-edges of the source type (stable: CSR order kept per row)."""
        dst_E = self.dst_of_edges()
        return relation_from_coo(
            dst_E, self.indices.astype(np.int64), self.num_dst, self.num_src, dedup=False
        )


def relation_from_coo(
    src_E: np.ndarray, dst_E: np.ndarray, num_src: int, num_dst: int, *, dedup: bool
) -> Relation:
    """In-edge CSR of one relation from COO type-local ids.

    Args:
        src_E: ``[E]`` source ids in ``[0, num_src)``.
        dst_E: ``[E]`` destination ids in ``[0, num_dst)``.
        num_src: Nodes of the source type.
        num_dst: Nodes of the destination type.
        dedup: Drop repeated ``(src, dst)`` pairs and sort each row by source (one sort of
            ``E`` int64 keys); ``False`` keeps every edge in input order within its row
            (a stable sort by destination), so ``HeteroData`` edge order survives a round trip
            when the input is sorted by destination.

    Raises:
        ValueError: An id out of range.
    """
    src_E, dst_E = np.asarray(src_E, dtype=np.int64), np.asarray(dst_E, dtype=np.int64)
    if src_E.size and (int(src_E.min()) < 0 or int(src_E.max()) >= num_src):
        raise ValueError(f"source ids must lie in [0, {num_src}); got max {int(src_E.max())}")
    if dst_E.size and (int(dst_E.min()) < 0 or int(dst_E.max()) >= num_dst):
        raise ValueError(f"destination ids must lie in [0, {num_dst}); got max {int(dst_E.max())}")
    if dedup:
        # sort + neighbour compare, not np.unique: numpy 2.4's hash-based unique took 16 s on
        # 3.7 M int64 keys where the sort takes 0.5 s.
        key_E = np.sort(dst_E * max(num_src, 1) + src_E)
        if key_E.size:
            key_E = key_E[np.concatenate([[True], key_E[1:] != key_E[:-1]])]
        dst_E = key_E // max(num_src, 1)
        src_E = key_E - dst_E * max(num_src, 1)
    else:
        order_E = np.argsort(dst_E, kind="stable")
        dst_E, src_E = dst_E[order_E], src_E[order_E]
    indptr = np.zeros(num_dst + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst_E, minlength=num_dst), out=indptr[1:])
    id_dtype = np.int32 if num_src < 2**31 else np.int64
    return Relation(indptr=indptr, indices=src_E.astype(id_dtype), num_src=num_src)


@dataclass(frozen=True, slots=True, eq=False)
class HeteroGraph:
    """A heterogeneous graph: typed node sets and one in-edge CSR per relation.

    Construct with :meth:`from_pyg` or directly (``relation_from_coo`` builds relations).

    Attributes:
        nodes: Node type -> its ``NodeSet``; the order fixes the global id space.
        relations: Edge type ``(src, rel, dst)`` -> its in-edge ``Relation``.
        name: Dataset name, for logs.
        num_classes_hint: Classes of the labelled type(s) when some have no labelled node.
    """

    nodes: dict[str, NodeSet]
    relations: dict[EdgeType, Relation]
    name: str = "hetero"
    num_classes_hint: int | None = None

    def __post_init__(self) -> None:
        """Check that every relation joins known types with matching sizes."""
        for edge_type, rel in self.relations.items():
            if not (isinstance(edge_type, tuple) and len(edge_type) == 3):
                raise ValueError(f"edge type {edge_type!r} must be a (src, rel, dst) triple")
            src, _, dst = edge_type
            for node_type in (src, dst):
                if node_type not in self.nodes:
                    raise ValueError(f"edge type {edge_type} names unknown node type {node_type!r}")
            if rel.num_src != self.nodes[src].num_nodes or rel.num_dst != self.nodes[dst].num_nodes:
                raise ValueError(
                    f"relation {edge_type} is {rel.num_src} x {rel.num_dst} but the types have "
                    f"{self.nodes[src].num_nodes} and {self.nodes[dst].num_nodes} nodes"
                )

    # ---- sizes and the global id space -------------------------------------------------------
    @property
    def node_types(self) -> list[str]:
        """Node types in id-space order."""
        return list(self.nodes)

    @property
    def edge_types(self) -> list[EdgeType]:
        """Edge types in insertion order (the sampler's order)."""
        return list(self.relations)

    def num_nodes(self, node_type: str | None = None) -> int:
        """Nodes of ``node_type``, or of every type (``G``) when it is ``None``."""
        if node_type is None:
            return sum(s.num_nodes for s in self.nodes.values())
        return self.nodes[node_type].num_nodes

    @property
    def num_edges(self) -> int:
        """Edges of every relation together."""
        return sum(rel.num_edges for rel in self.relations.values())

    @property
    def num_classes(self) -> int:
        """Classes: the hint if given, else ``max(y) + 1`` over the labelled types."""
        if self.num_classes_hint is not None:
            return self.num_classes_hint
        labels = [s.y for s in self.nodes.values() if s.y is not None and s.y.size]
        return max((int(y.max()) + 1 for y in labels), default=0)

    def node_offsets(self) -> dict[str, int]:
        """Type -> first global id of that type (``gid = offset[type] + lid``)."""
        counts = [s.num_nodes for s in self.nodes.values()]
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        return dict(zip(self.nodes, (int(s) for s in starts), strict=True))

    def node_type_of(self) -> np.ndarray:
        """``[G]`` int16 index (into ``node_types``) of every global id's type."""
        counts = [s.num_nodes for s in self.nodes.values()]
        return np.repeat(np.arange(len(counts), dtype=np.int16), counts)

    @property
    def nbytes(self) -> int:
        """Bytes held by the arrays of this graph."""
        total = sum(int(r.indptr.nbytes + r.indices.nbytes) for r in self.relations.values())
        return total + sum(int(a.nbytes) for s in self.nodes.values() for a in s.arrays().values())

    def metadata(self) -> tuple[list[str], list[EdgeType]]:
        """``(node_types, edge_types)``, what ``torch_geometric.nn.to_hetero`` takes."""
        return self.node_types, self.edge_types

    # ---- derived graphs ----------------------------------------------------------------------
    def to_homogeneous(self) -> tuple[Graph, np.ndarray]:
        """Every relation merged into one ``Graph`` over global ids, and every node's type.

        Edges keep their direction (``src -> dst``) and duplicates across relations are
        merged. Features are not carried (their widths differ by type). This is what a
        partitioner takes: an ``Assignment`` of the returned graph assigns every node of every
        type (``part_N[offset[t] + lid]``).

        Returns:
            ``(graph, node_type_G)``: the merged graph and ``[G]`` int16 type indices.
        """
        offsets = self.node_offsets()
        src_parts, dst_parts = [], []
        for (src, _, dst), rel in self.relations.items():
            src_parts.append(rel.indices.astype(np.int64) + offsets[src])
            dst_parts.append(rel.dst_of_edges() + offsets[dst])
        graph = Graph.from_edge_index(
            np.stack([np.concatenate(src_parts or [np.zeros(0, np.int64)]),
                      np.concatenate(dst_parts or [np.zeros(0, np.int64)])]),
            self.num_nodes(),
            name=f"{self.name}/homogeneous",
        )  # fmt: skip
        return graph, self.node_type_of()

    def with_reverse(self) -> HeteroGraph:
        """PyG's ``ToUndirected()``: reverse relations added, same-type relations symmetrized.

        ``(src, rel, dst)`` with ``src != dst`` gains ``(dst, "rev_" + rel, src)`` (skipped when
        it exists); ``(t, rel, t)`` becomes the deduplicated union of its edges and their
        reverses, as ``to_undirected`` coalesces them. Node data is shared, not copied.
        """
        relations: dict[EdgeType, Relation] = {}
        for (src, rel_name, dst), rel in self.relations.items():
            if src == dst:
                dst_E, src_E = rel.dst_of_edges(), rel.indices.astype(np.int64)
                both_src, both_dst = np.concatenate([src_E, dst_E]), np.concatenate([dst_E, src_E])
                relations[(src, rel_name, dst)] = relation_from_coo(
                    both_src, both_dst, rel.num_src, rel.num_dst, dedup=True
                )
            else:
                relations[(src, rel_name, dst)] = rel
        for (src, rel_name, dst), rel in self.relations.items():
            reverse = (dst, f"rev_{rel_name}", src)
            if src != dst and reverse not in relations:
                relations[reverse] = rel.transposed()
        return replace(self, relations=relations)

    # ---- PyG conversion ------------------------------------------------------------------------
    @classmethod
    def from_pyg(cls, data: HeteroData, name: str = "pyg") -> HeteroGraph:
        """Build from a ``torch_geometric.data.HeteroData``.

        Node-level tensors of each type (``x``, ``y``, masks and any other with first dim
        ``num_nodes``) are taken as numpy arrays; each ``edge_index`` becomes an in-edge CSR by a
        stable sort on the destination (no deduplication). Edge attributes are not carried.

        Raises:
            ValueError: Inconsistent sizes, or a type whose node count cannot be told.
        """
        nodes: dict[str, NodeSet] = {}
        for node_type in data.node_types:
            store = data[node_type]
            num = int(store.num_nodes)
            arrays: dict[str, Any] = {}
            for key, value in store.items():
                if isinstance(value, torch.Tensor) and value.dim() >= 1 and value.shape[0] == num:
                    arrays[key] = value.detach().cpu().numpy()
            attrs = {k: v for k, v in arrays.items() if k not in _NODE_KEYS}
            known = {k: v for k, v in arrays.items() if k in _NODE_KEYS}
            nodes[node_type] = NodeSet(num_nodes=num, attrs=attrs, **known)
        relations: dict[EdgeType, Relation] = {}
        for edge_type in data.edge_types:
            src, _, dst = edge_type
            edge_index = data[edge_type].edge_index.detach().cpu().long().numpy()
            relations[edge_type] = relation_from_coo(
                edge_index[0], edge_index[1], nodes[src].num_nodes, nodes[dst].num_nodes,
                dedup=False,
            )  # fmt: skip
        return cls(nodes=nodes, relations=relations, name=name)

    def to_pyg(self) -> HeteroData:
        """A ``HeteroData`` with ``num_nodes`` and every array of every type.

        ``edge_index`` is in CSR order (sorted by destination); node tensors share memory with
        this graph where possible.
        """
        from torch_geometric.data import HeteroData

        out = HeteroData()
        for node_type, node_set in self.nodes.items():
            out[node_type].num_nodes = node_set.num_nodes
            for key, value in node_set.arrays().items():
                out[node_type][key] = torch.from_numpy(np.ascontiguousarray(value))
        for edge_type, rel in self.relations.items():
            src_E = torch.from_numpy(rel.indices.astype(np.int64))
            dst_E = torch.from_numpy(rel.dst_of_edges())
            out[edge_type].edge_index = torch.stack([src_E, dst_E])
        return out
