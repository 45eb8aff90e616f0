"""``NeighborLoader`` on heterogeneous graphs: ``HeteroData`` batches from the typed sampler.

``gnnsys.loader.NeighborLoader(data, ...)`` iterates :class:`TypedNodeSeeds` when ``data`` is a
``HeteroData``, a gnnsys ``HeteroGraph``, or a ``(FeatureStore, GraphStore)`` pair with a typed
``input_nodes`` (the loader class is the same). Arguments keep PyG's meaning:

* ``num_neighbors``: a list (the same fanouts for every relation) or a dict keyed by edge type
  (PyG's ``NumNeighbors`` resolves it: every relation needs an entry unless a default is given,
  and all must have the same number of hops);
* ``input_nodes``: ``"paper"`` (every node of the type) or ``("paper", None | mask | index)``;
* ``subgraph_type``: ``'directional'``, ``'bidirectional'`` (PyG's
  ``HeteroSamplerOutput.to_bidirectional``; ``num_sampled_nodes`` is kept, since the nodes do
  not change, and ``num_sampled_edges`` and ``e_id`` are dropped, as in PyG) or ``'induced'``
  (below);
* ``input_id``: as given, else a mask's node ids, else the seeds' positions (PyG's rule).

Batches have PyG's fields: per node type ``n_id`` and ``num_sampled_nodes`` (lists, seeds
first), per edge type ``edge_index`` (``[0]`` = local source in the source type, ``[1]`` = local
destination), ``e_id`` and ``num_sampled_edges``; on the input type ``input_id`` and
``batch_size``. Features are joined by PyG's own ``filter_hetero_data`` (``HeteroData``) or
``filter_custom_hetero_store`` (stores), so every node- and edge-level attribute is sliced as
PyG slices it and ``to_hetero`` models run unchanged.

Plain fanouts run on ``RelationalSampler`` (the distributed runtime's sampler, identical
batches); ``disjoint``, ``weight_attr`` and ``time_attr``/``input_time`` run on
``ExtendedSampler``, with PyG's rules: ``time_attr`` names a node-level attribute (on some
node types) or an edge-level one (on some relations), never both; types or relations without it
are not filtered; temporal sampling is disjoint, and ``batch[t].batch`` names each node's seed.
As PyG's ``sort_csc`` does, a temporal loader orders every destination's in-edges by time
(stable), so a ``HeteroData`` and a store holding the same graph give the same batches.

``subgraph_type='induced'``: every edge of every relation between the sampled nodes
(``typed_subgraph``), as PyG's torch-sparse path gives it; not with ``disjoint=True`` (PyG's
refusal).

Shape legend: ``N_t`` nodes of type ``t``, ``E`` edges of one relation, ``B`` seeds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from gnnsys.loader.base_loader import Sampling, input_gid, mask_ids, per_input
from gnnsys.loader.pyg_sampler import induced_edges
from gnnsys.sampler.candidates import check_strategy, time_sorted
from gnnsys.sampler.csr_source import CSRNeighborSource
from gnnsys.sampler.extended import ExtendedSampler
from gnnsys.sampler.neighbor import RelationalSampler, csr_sources
from gnnsys.types import EdgeType
from gnnsys.types.relations import HeteroGraph

__all__ = [
    "HeteroGraphView",
    "TypedNodeSeeds",
    "bidirectional",
    "hetero_output",
    "is_hetero_input",
    "join_hetero",
    "typed_sampler",
    "typed_subgraph",
    "typed_subgraph_type",
]


def is_hetero_input(data: Any, input_nodes: Any) -> bool:
    """Whether ``NeighborLoader(data, input_nodes=...)`` is a heterogeneous loader (PyG's rule).

    ``HeteroData`` and ``HeteroGraph`` always are; stores are when ``input_nodes`` names a type.
    """
    from torch_geometric.data import HeteroData

    named = isinstance(input_nodes, str) or (
        isinstance(input_nodes, tuple) and bool(input_nodes) and isinstance(input_nodes[0], str)
    )
    return isinstance(data, HeteroGraph | HeteroData) or (isinstance(data, tuple) and named)


@dataclass(frozen=True, slots=True, eq=False)
class HeteroGraphView:
    """The heterogeneous loader's view of its input graph.

    Attributes:
        sources: Relation -> neighbor source (type-local ids; ``e_id`` = column of the input's
            ``edge_index`` for a ``HeteroData``, CSR position for a ``HeteroGraph``).
        num_nodes: Node type -> ``N_t``, in the input's type order.
        data: The ``HeteroData`` batches are filtered from (for a ``HeteroGraph``, one holding
            its node arrays and empty ``edge_index`` placeholders), or the store pair.
        edge_types: The relations, in the input's order.
        attrs: The input format's attribute reader and batch filter, chosen once in ``of``.
    """

    sources: dict[EdgeType, CSRNeighborSource]
    num_nodes: dict[str, int]
    data: Any
    edge_types: list[EdgeType]
    attrs: _DataAttrs | _StoreAttrs
    """The input format's attribute reader and batch filter (``_DataAttrs``, ``_StoreAttrs``)."""

    @classmethod
    def of(cls, data: Any) -> HeteroGraphView:
        """Build from a ``HeteroData``, a ``HeteroGraph`` or ``(FeatureStore, GraphStore)``."""
        from torch_geometric.data import HeteroData

        formats = ((HeteroGraph, cls._of_graph), (HeteroData, cls._of_data))
        for kind, build in formats:  # the input formats, each read once into the one view
            if isinstance(data, kind):
                return build(data)
        if isinstance(data, tuple) and len(data) == 2:
            return cls._of_stores(data[0], data[1])
        raise TypeError(
            "heterogeneous data must be a HeteroData, a gnnsys HeteroGraph or a (FeatureStore, "
            f"GraphStore) tuple, got {type(data).__name__}"
        )

    @classmethod
    def _of_data(cls, data: Any) -> HeteroGraphView:
        num_nodes = {t: int(data[t].num_nodes) for t in data.node_types}
        sources = {
            et: _bipartite_source(data[et].edge_index, num_nodes[et[0]], num_nodes[et[2]])
            for et in data.edge_types
        }
        return cls(sources, num_nodes, data, list(data.edge_types), _DataAttrs(data))

    @classmethod
    def _of_graph(cls, graph: HeteroGraph) -> HeteroGraphView:
        from torch_geometric.data import HeteroData

        nodes_only = HeteroData()
        for node_type, node_set in graph.nodes.items():
            nodes_only[node_type].num_nodes = node_set.num_nodes
            for key, value in node_set.arrays().items():
                nodes_only[node_type][key] = torch.from_numpy(value)
        for edge_type in graph.edge_types:  # overwritten per batch by filter_hetero_data
            nodes_only[edge_type].edge_index = torch.zeros(2, 0, dtype=torch.int64)
        num_nodes = {t: s.num_nodes for t, s in graph.nodes.items()}
        attrs = _DataAttrs(nodes_only)
        return cls(csr_sources(graph), num_nodes, nodes_only, graph.edge_types, attrs)

    @classmethod
    def _of_stores(cls, feature_store: Any, graph_store: Any) -> HeteroGraphView:
        """PyG's remote-backend stores: each edge type read once as COO (``e_id`` = position)."""
        attrs = graph_store.get_all_edge_attrs()
        num_nodes: dict[str, int] = {}
        for tensor_attr in feature_store.get_all_tensor_attrs():
            size = feature_store.get_tensor_size(tensor_attr)
            num_nodes[tensor_attr.group_name] = int(size[0])
        for attr in attrs:  # a store's declared sizes win over the features' row counts
            size = getattr(attr, "size", None)
            if size is not None:
                num_nodes[attr.edge_type[0]], num_nodes[attr.edge_type[2]] = map(int, size)
        sources = {}
        for attr in attrs:
            row, col, _ = graph_store.coo([attr.edge_type])
            row, col = row[attr.edge_type], col[attr.edge_type]
            src, _, dst = attr.edge_type
            edge_index = torch.stack([row.long(), col.long()])
            sources[attr.edge_type] = _bipartite_source(edge_index, num_nodes[src], num_nodes[dst])
        edge_types = [attr.edge_type for attr in attrs]
        reader = _StoreAttrs(feature_store, graph_store)
        return cls(sources, num_nodes, (feature_store, graph_store), edge_types, reader)

    def node_attrs(self, name: str) -> dict[str, Tensor]:
        """Node type -> its ``[N_t]`` attribute ``name``, for the types that have it."""
        return self.attrs.node(name)

    def edge_attrs(self, name: str) -> dict[EdgeType, Tensor]:
        """Relation -> its ``[E]`` attribute ``name`` by edge id, for the relations with it."""
        return self.attrs.edge(name)

    def join(self, out: Any, custom_cls: Any = None) -> Any:
        """A ``HeteroSamplerOutput``'s nodes and edges with their attributes (PyG's filter)."""
        return self.attrs.join(out, custom_cls)


@dataclass(frozen=True, slots=True, eq=False)
class _DataAttrs:
    """Attributes and batches of a ``HeteroData`` (PyG's ``filter_hetero_data``)."""

    data: Any

    def node(self, name: str) -> dict[str, Tensor]:
        return {t: self.data[t][name] for t in self.data.node_types if name in self.data[t]}

    def edge(self, name: str) -> dict[EdgeType, Tensor]:
        stores = {et: self.data[et] for et in self.data.edge_types}
        return {et: store[name] for et, store in stores.items() if name in store}

    def join(self, out: Any, custom_cls: Any = None) -> Any:
        from torch_geometric.loader.utils import filter_hetero_data

        return filter_hetero_data(self.data, out.node, out.row, out.col, out.edge, None)


@dataclass(frozen=True, slots=True, eq=False)
class _StoreAttrs:
    """Attributes and batches of PyG's store pair (``filter_custom_hetero_store``)."""

    feature_store: Any
    graph_store: Any

    def node(self, name: str) -> dict[str, Tensor]:
        return self._tensors(name, str)

    def edge(self, name: str) -> dict[EdgeType, Tensor]:
        return self._tensors(name, tuple)

    def _tensors(self, name: str, group: type) -> dict[Any, Tensor]:
        """The feature store's tensors named ``name``, by group.

        ``group`` picks node types (``str`` group names) or edge types (``tuple``).
        """
        return {
            attr.group_name: self.feature_store.get_tensor(attr.group_name, name, None)
            for attr in self.feature_store.get_all_tensor_attrs()
            if attr.attr_name == name and isinstance(attr.group_name, group)
        }

    def join(self, out: Any, custom_cls: Any = None) -> Any:
        from torch_geometric.loader.utils import filter_custom_hetero_store

        return filter_custom_hetero_store(
            self.feature_store, self.graph_store, out.node, out.row, out.col, out.edge,
            custom_cls,
        )  # fmt: skip


def _bipartite_source(edge_index: Tensor, num_src: int, num_dst: int) -> CSRNeighborSource:
    """In-edge CSR of one relation's ``[2, E]`` COO, without dedup; ``e_id`` = COO column."""
    src_E, dst_E = edge_index[0].long(), edge_index[1].long()
    if dst_E.numel() and (int(dst_E.max()) >= num_dst or int(src_E.max()) >= num_src):
        raise ValueError(
            f"edge_index has ids up to ({int(src_E.max())}, {int(dst_E.max())}) but the types "
            f"have ({num_src}, {num_dst}) nodes; fix num_nodes"
        )
    _, perm_E = torch.sort(dst_E, stable=True)
    indptr = torch.zeros(num_dst + 1, dtype=torch.int64)
    torch.cumsum(torch.bincount(dst_E, minlength=num_dst), 0, out=indptr[1:])
    indices = src_E.index_select(0, perm_E)
    return CSRNeighborSource(indptr, indices.int() if num_src < 2**31 else indices, perm_E)


def _fanouts(num_neighbors: Any, edge_types: list[EdgeType]) -> dict[EdgeType, tuple[int, ...]]:
    """PyG's ``NumNeighbors`` resolution: a list for every relation, or a dict (+ default)."""
    from torch_geometric.sampler.base import NumNeighbors

    if not isinstance(num_neighbors, NumNeighbors):
        values = num_neighbors if isinstance(num_neighbors, dict) else list(num_neighbors)
        num_neighbors = NumNeighbors(values)
    resolved = num_neighbors.get_values(edge_types)
    return {et: tuple(resolved[et]) for et in edge_types}


def _input(input_nodes: Any, num_nodes: dict[str, int]) -> tuple[str, Tensor]:
    """``(input type, [S] type-local ids)`` from ``"type"`` or ``("type", None|mask|index)``."""
    if isinstance(input_nodes, str):
        input_nodes = (input_nodes, None)
    if not (isinstance(input_nodes, tuple) and len(input_nodes) == 2):
        raise TypeError(
            f"input_nodes={input_nodes!r}: a heterogeneous loader needs a node type, as "
            "'paper' or ('paper', None | bool mask | index tensor)"
        )
    node_type, index = input_nodes
    if node_type not in num_nodes:
        raise ValueError(f"input node type {node_type!r} not in {list(num_nodes)}")
    return node_type, input_gid(index, num_nodes[node_type])


class TypedNodeSeeds:
    """Seed nodes of one type of a heterogeneous graph: ``HeteroData`` batches.

    ``gnnsys.loader.NeighborLoader``'s seeds for typed inputs (see the module docstring).

    Raises:
        TypeError: ``input_nodes`` without a node type.
        ValueError: Unequal hop counts, unknown types, or an option not supported here.
    """

    def __init__(
        self,
        data: Any,
        sampling: Sampling,
        input_nodes: Any,
        input_time: Tensor | None,
        input_id: Tensor | None,
    ) -> None:
        self.subgraph_type = typed_subgraph_type(sampling)
        self.hetero_view = HeteroGraphView.of(data)
        self.node_sampler = typed_sampler(self.hetero_view, sampling)
        self.input_type, self.input_gid = _input(input_nodes, self.hetero_view.num_nodes)
        mask = input_nodes[1] if isinstance(input_nodes, tuple) else None
        self.input_id = per_input(
            "input_id", mask_ids(mask, input_id, self.input_gid), self.input_gid
        )
        self.input_time = per_input("input_time", input_time, self.input_gid)
        if self.input_time is None:
            _check_seeds_have_time(self.node_sampler, self.input_type, sampling.time_attr)
        self.num_inputs = int(self.input_gid.shape[0])

    def collate(self, index: Tensor, seed: int) -> Any:
        """PyG ``HeteroSamplerOutput`` for the seeds at positions ``index`` of ``input_nodes``."""
        seed_lid = self.input_gid.index_select(0, index)
        input_id = index if self.input_id is None else self.input_id.index_select(0, index)
        seed_time = None if self.input_time is None else self.input_time.index_select(0, index)
        times = None if seed_time is None else {self.input_type: seed_time}
        sub = self.node_sampler.sample_types(
            {self.input_type: seed_lid}, seed=seed, seed_time=times
        )
        out = hetero_output(sub, (input_id, seed_time))
        return typed_subgraph(out, self.subgraph_type, self.hetero_view)

    def join(self, out: Any, custom_cls: Any) -> Any:
        """PyG's hetero ``filter_fn``: features joined, PyG's per-type fields set."""
        batch = join_hetero(self.hetero_view, out, custom_cls)
        batch[self.input_type].input_id = out.metadata[0]
        batch[self.input_type].seed_time = out.metadata[1]
        batch[self.input_type].batch_size = int(out.metadata[0].shape[0])
        return batch


def join_hetero(view: HeteroGraphView, out: Any, custom_cls: Any = None) -> Any:
    """A ``HeteroSamplerOutput`` as a ``HeteroData`` batch, as PyG's node and link loaders do.

    PyG's ``filter_hetero_data`` (or ``filter_custom_hetero_store``), then ``n_id``, ``e_id``,
    ``batch`` and the per-hop counts.
    """
    batch = view.join(out, custom_cls)
    for key, node in out.node.items():
        if "n_id" not in batch[key]:
            batch[key].n_id = node
    for key, edge in (out.edge or {}).items():
        if edge is not None and "e_id" not in batch[key]:
            batch[key].e_id = edge.to(torch.long)
    batch.set_value_dict("batch", out.batch)
    batch.set_value_dict("num_sampled_nodes", out.num_sampled_nodes)
    batch.set_value_dict("num_sampled_edges", out.num_sampled_edges)
    return batch


def hetero_output(sub: Any, metadata: Any = None) -> Any:
    """PyG's ``HeteroSamplerOutput`` of a ``RelationalSubgraph``."""
    from torch_geometric.sampler import HeteroSamplerOutput

    return HeteroSamplerOutput(
        node=dict(sub.n_id),
        row={et: ei[0] for et, ei in sub.edge_index.items()},
        col={et: ei[1] for et, ei in sub.edge_index.items()},
        edge=dict(sub.e_id),
        num_sampled_nodes={t: list(n) for t, n in sub.num_sampled_nodes.items()},
        batch=sub.batch,
        num_sampled_edges={et: list(n) for et, n in sub.num_sampled_edges.items()},
        metadata=metadata,
    )


def bidirectional(out: Any) -> Any:
    """PyG's ``to_bidirectional`` (which relations pair up, coalescing), edges row-major.

    Adding reverse edges leaves the nodes as they are, so ``num_sampled_nodes`` stays true and
    is kept (PyG's test file expects it; PyG 2.8's ``to_bidirectional`` drops it). The edges of
    every converted relation are sorted by ``(source, destination)``, as PyG's test file
    (``edge_index == sort_edge_index(reverse.flip(0))``) and older PyG have them; PyG 2.8's
    coalesce sorts by destination instead. The edge set is the same either way.
    """
    from torch_geometric.utils import sort_edge_index

    both = out.to_bidirectional()
    both.num_sampled_nodes = out.num_sampled_nodes
    for edge_type, row in both.row.items():
        if both.edge[edge_type] is None:  # converted: coalesced, edge ids dropped
            edge_index = sort_edge_index(torch.stack([row, both.col[edge_type]]))
            both.row[edge_type], both.col[edge_type] = edge_index[0], edge_index[1]
    return both


def typed_subgraph_type(sampling: Sampling) -> str:
    """``sampling.subgraph_type``, checked as PyG checks it (no disjoint induced subgraphs).

    Raises:
        ValueError: ``'induced'`` with ``disjoint=True``.
    """
    if sampling.subgraph_type == "induced" and sampling.disjoint:
        raise ValueError(
            "'disjoint' sampling not supported for neighbor sampling with "
            "`subgraph_type='induced'`; use subgraph_type='directional'"
        )
    return sampling.subgraph_type


def typed_subgraph(out: Any, kind: str, view: HeteroGraphView) -> Any:
    """A typed batch's edges as ``subgraph_type`` asks (module docstring).

    ``'induced'``: every edge of every relation between the sampled nodes (PyG's torch-sparse
    path, also for ``directed=False``); ``num_sampled_*`` are ``None`` then, as in PyG.
    """
    if kind == "bidirectional":
        return bidirectional(out)
    if kind != "induced":
        return out
    for edge_type in view.edge_types:
        src, dst = out.node[edge_type[0]], out.node[edge_type[2]]
        edges = induced_edges(view.sources[edge_type], src, dst)
        out.row[edge_type], out.col[edge_type], out.edge[edge_type] = edges
    out.num_sampled_nodes = out.num_sampled_edges = None
    return out


def typed_sampler(view: HeteroGraphView, sampling: Sampling) -> RelationalSampler | ExtendedSampler:
    """The fast typed sampler for plain fanouts, else the extended one (PyG's attribute rules).

    Raises:
        ValueError: ``time_attr`` on both nodes and edges or on neither, ``weight_attr`` on no
            relation, or an unknown ``temporal_strategy``.
    """
    fanouts = _fanouts(sampling.num_neighbors, view.edge_types)
    replace, disjoint = sampling.replace, sampling.disjoint
    time_attr, weight_attr = sampling.time_attr, sampling.weight_attr
    if not (disjoint or time_attr or weight_attr):
        check_strategy(sampling.temporal_strategy)  # accepted, as in PyG; nothing is temporal
        return RelationalSampler(
            RelationalSampler.Config(fanouts=fanouts, replace=replace),
            sources=view.sources, node_types=list(view.num_nodes),
        )  # fmt: skip
    node_time = edge_time = weight = None
    if time_attr is not None:
        node_time, edge_time = view.node_attrs(time_attr), view.edge_attrs(time_attr)
        if node_time and edge_time:
            raise ValueError(
                f"The attribute {time_attr!r} appears both as node-level and edge-level time "
                "attribute; rename one of them"
            )
        if not node_time and not edge_time:
            raise ValueError(
                f"The time attribute {time_attr!r} is neither a node-level or edge-level "
                "attribute of any type"
            )
    if weight_attr is not None:
        weight = view.edge_attrs(weight_attr)
        if not weight:
            raise ValueError(f"weight_attr={weight_attr!r} is not an edge attribute of any type")
    sources = view.sources
    if node_time or edge_time:  # PyG's sort_csc; relations without times are left as they are
        sources = {
            et: time_sorted(
                source, src_time=(node_time or {}).get(et[0]), edge_time=(edge_time or {}).get(et)
            )
            for et, source in view.sources.items()
        }
    config = ExtendedSampler.Config(
        fanouts=fanouts,
        replace=replace,
        disjoint=disjoint,
        temporal_strategy=sampling.temporal_strategy,
    )
    return ExtendedSampler(
        config, sources=sources, num_nodes=view.num_nodes, edge_weight=weight,
        node_time=node_time or None, edge_time=edge_time or None,
    )  # fmt: skip


def _check_seeds_have_time(
    sampler: RelationalSampler | ExtendedSampler, input_type: str, time_attr: Any
) -> None:
    """Fail now, not at the first batch, when temporal seeds have no time.

    Without ``input_time``, a seed's time is its node time, so the input type must have one.
    """
    if isinstance(sampler, ExtendedSampler) and sampler.temporal:
        if input_type not in sampler.node_time:
            raise ValueError(
                f"time_attr={time_attr!r}: the input type {input_type!r} has no such node "
                "attribute, so its seeds have no time; pass input_time"
            )
