"""What the loader needs from its input graph: a neighbor source and per-node/per-edge tensors.

A PyG ``Data`` is turned into an in-edge CSR *without* deduplication (as PyG does), keeping
``e_id`` = the column of ``data.edge_index``; a gnnsys ``Graph`` is used in place (its CSR
position is its edge id). Node tensors are sliced by ``n_id`` and edge tensors by ``e_id``.

Shape legend: ``N`` nodes, ``E`` edges, ``B`` seeds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from gnnsys.sampler import CSRNeighborSource
from gnnsys.types import Graph, SampledSubgraph

__all__ = ["GraphView", "edge_index_of", "to_pyg_data"]

_GRAPH_NODE_KEYS = ("x", "y", "train_mask", "val_mask", "test_mask")


@dataclass(frozen=True, slots=True, eq=False)
class GraphView:
    """The loader's view of its input graph.

    Attributes:
        source: Neighbor source over the whole graph.
        num_nodes: ``N``.
        node_attrs: Name -> ``[N, ...]`` tensor, sliced by ``n_id`` into every batch.
        edge_attrs: Name -> ``[E, ...]`` tensor, sliced by ``e_id`` into every batch.
        data: The PyG ``Data`` it came from, or ``None`` for a gnnsys ``Graph``. Attributes are
            read from it per batch, so ``del loader.data.x`` (PyG's examples do this for the
            inference loader) stops slicing ``x``.
    """

    source: CSRNeighborSource
    num_nodes: int
    node_attrs: dict[str, Tensor] = field(default_factory=dict)
    edge_attrs: dict[str, Tensor] = field(default_factory=dict)
    data: Any = None

    def attrs(self) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        """``(node_attrs, edge_attrs)`` as they are now (re-read from ``data`` when it is set)."""
        if self.data is None:
            return self.node_attrs, self.edge_attrs
        if isinstance(self.data, tuple):  # (FeatureStore, GraphStore): node features only
            store = self.data[0]
            return {a.attr_name: store.get_tensor(a) for a in store.get_all_tensor_attrs()}, {}
        return _split_attrs(self.data)

    def node_attr(self, name: str) -> Tensor | None:
        """The ``[N, ...]`` node attribute ``name`` (read now), or ``None`` if there is none."""
        return self.attrs()[0].get(name)

    def edge_attr(self, name: str) -> Tensor | None:
        """The ``[E, ...]`` edge attribute ``name`` (read now), or ``None`` if there is none."""
        return self.attrs()[1].get(name)

    @classmethod
    def of(cls, data: Any) -> GraphView:
        """Build from a gnnsys ``Graph``, a PyG ``Data`` or ``(FeatureStore, GraphStore)``.

        Raises:
            TypeError: ``data`` is none of these (e.g. a ``HeteroData``, not supported).
        """
        if isinstance(data, Graph):
            return cls._of_graph(data)
        from torch_geometric.data import Data, FeatureStore, GraphStore

        if isinstance(data, Data):
            return cls._of_pyg(data)
        if (
            isinstance(data, tuple)
            and len(data) == 2
            and isinstance(data[0], FeatureStore)
            and isinstance(data[1], GraphStore)
        ):
            return cls._of_stores(data[0], data[1])
        raise TypeError(
            "data must be a gnnsys Graph, a torch_geometric Data or a (FeatureStore, "
            f"GraphStore) tuple, got {type(data).__name__}; convert heterogeneous graphs to "
            "homogeneous first (HeteroData.to_homogeneous())"
        )

    @classmethod
    def _of_stores(cls, feature_store: Any, graph_store: Any) -> GraphView:
        """A homogeneous graph from PyG's remote-backend stores (one edge type, COO read)."""
        edge_attrs = graph_store.get_all_edge_attrs()
        if len(edge_attrs) != 1:
            raise ValueError(
                f"the GraphStore holds {len(edge_attrs)} edge types; the gnnsys loaders take "
                "homogeneous graphs (exactly one edge type)"
            )
        attr = edge_attrs[0]
        row, col, _ = graph_store.coo([attr.edge_type])
        if isinstance(row, dict):  # keyed by edge type unless the store is homogeneous
            row, col = row[attr.edge_type], col[attr.edge_type]
        src_E, dst_E = row.long().reshape(-1), col.long().reshape(-1)
        num_nodes = _store_num_nodes(feature_store, attr, src_E, dst_E)
        view = cls._of_edges(src_E, dst_E, num_nodes)
        return cls(view.source, num_nodes, data=(feature_store, graph_store))

    @classmethod
    def _of_graph(cls, graph: Graph) -> GraphView:
        attrs = {}
        for key in _GRAPH_NODE_KEYS:
            value = getattr(graph, key)
            if value is not None:
                attrs[key] = torch.from_numpy(np.ascontiguousarray(value))
        source = CSRNeighborSource.from_graph(graph)
        return cls(source=source, num_nodes=graph.num_nodes, node_attrs=attrs)

    @classmethod
    def _of_pyg(cls, data: Any) -> GraphView:
        num_nodes = int(data.num_nodes)
        edge_index = data.edge_index
        if edge_index is None:  # a graph without edges (PyG allows it): batches are the seeds
            edge_index = torch.zeros(2, 0, dtype=torch.int64)
        view = cls._of_edges(edge_index[0].long(), edge_index[1].long(), num_nodes)
        return cls(view.source, num_nodes, data=data)

    @classmethod
    def _of_edges(cls, src_E: Tensor, dst_E: Tensor, num_nodes: int) -> GraphView:
        """In-edge CSR of a COO edge list; edge id = position in the list."""
        if dst_E.numel() and int(torch.maximum(src_E, dst_E).max()) >= num_nodes:
            raise ValueError(
                f"edge_index has node id {int(torch.maximum(src_E, dst_E).max())} but "
                f"num_nodes={num_nodes}; fix data.num_nodes"
            )
        # Stable sort by destination: in-edge CSR in edge_index order; perm = original column.
        _, perm_E = torch.sort(dst_E, stable=True)
        indptr = torch.zeros(num_nodes + 1, dtype=torch.int64)
        torch.cumsum(torch.bincount(dst_E, minlength=num_nodes), 0, out=indptr[1:])
        indices = src_E.index_select(0, perm_E)
        if num_nodes < 2**31:
            indices = indices.int()  # halves the bytes the sampler's gathers touch
        source = CSRNeighborSource(indptr, indices, perm_E)
        return cls(source, num_nodes)


def _store_num_nodes(feature_store: Any, attr: Any, src_E: Tensor, dst_E: Tensor) -> int:
    size = getattr(attr, "size", None)
    if size is not None and size[0] is not None:
        return int(max(size[0], size[1]))
    for tensor_attr in feature_store.get_all_tensor_attrs():
        return int(feature_store.get_tensor_size(tensor_attr)[0])
    return int(torch.maximum(src_E, dst_E).max()) + 1 if src_E.numel() else 0


def _split_attrs(data: Any) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """Node-level and edge-level tensors of a PyG ``Data`` (``edge_index`` excluded)."""
    node_attrs, edge_attrs = {}, {}
    for key, value in data.items():
        if isinstance(value, np.ndarray):  # e.g. a read-only np.memmap: viewed, not copied
            value = _from_numpy(value)
        if key == "edge_index" or not isinstance(value, Tensor):
            continue
        if data.is_node_attr(key):
            node_attrs[key] = value
        elif data.is_edge_attr(key):
            edge_attrs[key] = value
    return node_attrs, edge_attrs


def _from_numpy(value: np.ndarray) -> Tensor:
    import warnings

    with warnings.catch_warnings():  # read-only memmaps: the loader only reads them
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(value)


def edge_index_of(sub: SampledSubgraph) -> Tensor:
    """``[2, E]`` local ``edge_index`` of all hops (row 0 = source, row 1 = destination).

    Messages flow toward the seeds; edges are grouped by hop, seed hop first, as PyG's
    ``trim_to_layer`` expects.
    """
    block = sub.blocks[0]  # the input layer holds every hop's edges
    deg = block.rowptr[1:] - block.rowptr[:-1]
    dst = torch.repeat_interleave(
        torch.arange(block.num_dst, dtype=torch.int64), deg, output_size=block.num_edges
    )
    return torch.stack([block.col, dst])


def to_pyg_data(sub: SampledSubgraph, x: Tensor | None, y: Tensor | None) -> Any:
    """A ``torch_geometric.data.Data`` with the fields of PyG's ``NeighborLoader`` batches.

    Args:
        sub: The sampled subgraph.
        x: ``[N_graph, F]`` features of the whole graph (sliced by ``n_id``), or ``None``.
        y: ``[N_graph]`` labels of the whole graph (sliced by ``n_id``), or ``None``.

    Returns:
        ``Data`` with ``x``, ``y``, ``edge_index``, ``n_id``, ``e_id``, ``batch_size``,
        ``num_sampled_nodes`` and ``num_sampled_edges`` (lists, as PyG has them).
    """
    from torch_geometric.data import Data

    out = Data(edge_index=edge_index_of(sub), num_nodes=int(sub.n_id.shape[0]))
    if x is not None:
        out.x = x.index_select(0, sub.n_id)
    if y is not None:
        out.y = y.index_select(0, sub.n_id)
    out.n_id = sub.n_id
    out.e_id = sub.blocks[0].e_id
    out.batch_size = sub.batch_size
    out.num_sampled_nodes = list(sub.num_sampled_nodes)
    out.num_sampled_edges = list(sub.num_sampled_edges)
    return out
