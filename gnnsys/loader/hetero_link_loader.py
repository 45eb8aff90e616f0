"""``LinkNeighborLoader`` on heterogeneous graphs: seed links of one relation, typed batches.

``gnnsys.loader.LinkNeighborLoader(data, ...)`` iterates :class:`TypedLinkSeeds` when
``data`` is a ``HeteroData``, a gnnsys ``HeteroGraph``, or a ``(FeatureStore, GraphStore)`` pair
with ``edge_label_index`` naming an edge type. Arguments keep PyG's meaning:

* ``edge_label_index``: an edge type (every edge of it), or ``(edge_type, None | [2, L])``;
  ``(src, dst)`` names the one relation between two types, as PyG's ``_to_canonical``;
* ``num_neighbors``: a list (every relation) or a dict keyed by edge type (PyG's rules);
* ``edge_label``, ``edge_label_time`` (with ``time_attr``), ``neg_sampling`` (binary or
  triplet), ``disjoint``, ``weight_attr``, ``temporal_strategy``, ``subgraph_type``
  (directional or bidirectional), and the loader options of ``NeighborLoader``.

A batch's seed links are sampled with PyG's own ``edge_sample`` (negatives, label shifting,
local indices), whose seed dict (the source and destination types' endpoints) goes to the
typed sampler in one call (``sample_types``), so the fields are PyG's: on the input edge type
``input_id``, ``edge_label_index``, ``edge_label``, ``edge_label_time`` (binary or none);
``src_index`` on the source type and ``dst_pos_index``/``dst_neg_index`` on the destination
type, with ``seed_time`` on both (triplet); per type ``n_id``, ``batch`` (disjoint) and the
per-hop counts; per relation ``e_id``.

Shape legend: ``L`` seed links of an epoch, ``B`` per batch.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from gnnsys.loader.base_loader import Sampling
from gnnsys.loader.hetero_loader import (
    HeteroGraphView,
    hetero_output,
    join_hetero,
    typed_sampler,
    typed_subgraph,
    typed_subgraph_type,
)
from gnnsys.loader.link_inputs import LinkInputs, edge_input
from gnnsys.types import EdgeType
from gnnsys.types.relations import HeteroGraph

__all__ = ["TypedLinkSeeds", "is_hetero_link"]


def is_hetero_link(data: Any, edge_label_index: Any) -> bool:
    """Whether ``LinkNeighborLoader(data, edge_label_index=...)`` is heterogeneous (PyG's rule)."""
    from torch_geometric.data import HeteroData

    named = isinstance(edge_label_index, tuple | list) and bool(edge_label_index)
    named = named and isinstance(edge_label_index[0], str | tuple | list)
    return isinstance(data, HeteroGraph | HeteroData) or (isinstance(data, tuple) and named)


class TypedLinkSeeds:
    """Seed links of one relation of a heterogeneous graph: ``HeteroData`` batches.

    ``gnnsys.loader.LinkNeighborLoader``'s seeds for typed inputs (see the module docstring).

    Raises:
        TypeError: ``edge_label_index`` without an edge type.
        ValueError: Unknown edge type, ids out of range, bad labels or times, or an option not
            supported here.
    """

    def __init__(self, data: Any, sampling: Sampling, links: LinkInputs) -> None:
        self.subgraph_type = typed_subgraph_type(sampling)
        self.hetero_view = HeteroGraphView.of(data)
        self.node_sampler = typed_sampler(self.hetero_view, sampling)
        self.disjoint = self.node_sampler.disjoint
        time_attr = sampling.time_attr
        self.node_time = self.hetero_view.node_attrs(time_attr) if time_attr else None
        self.neg_sampling = links.neg_sampling
        self.input_type, label_index = self._label_index(links.edge_label_index)
        self.input_data = edge_input(
            label_index, links.edge_label, links.edge_label_time, links.input_id,
            self.neg_sampling, self.input_type,
        )  # fmt: skip
        self.num_inputs = int(label_index.shape[1])

    def _label_index(self, edge_label_index: Any) -> tuple[EdgeType, Tensor]:
        """``(edge type, [2, L] type-local ids)`` of the seed links (PyG's resolution)."""
        if not isinstance(edge_label_index, tuple | list) or not edge_label_index:
            raise TypeError(
                f"edge_label_index={edge_label_index!r}: a heterogeneous link loader needs an "
                "edge type, as ('user', 'rates', 'item') or (edge_type, None | [2, L] tensor)"
            )
        named = isinstance(edge_label_index[0], str)
        edge_type, index = (edge_label_index, None) if named else edge_label_index
        edge_type = self._canonical(tuple(edge_type), needs_edges=index is None)
        if index is None:
            index = self._edge_index(edge_type)
        index = torch.as_tensor(index).long()
        if index.dim() != 2 or index.shape[0] != 2:
            raise ValueError(f"edge_label_index must be [2, L], got {tuple(index.shape)}")
        for row, node_type in ((0, edge_type[0]), (1, edge_type[2])):
            limit = self.hetero_view.num_nodes[node_type]
            if index.numel() and (int(index[row].min()) < 0 or int(index[row].max()) >= limit):
                raise ValueError(
                    f"edge_label_index row {row} has {node_type!r} ids outside [0, {limit})"
                )
        return edge_type, index

    def _canonical(self, edge_type: tuple[str, ...], *, needs_edges: bool) -> EdgeType:
        """The edge type of the seed links, as PyG's ``_to_canonical`` resolves it.

        ``(src, rel, dst)`` as given, or the one relation of a ``(src, dst)`` pair (else
        ``(src, 'to', dst)``); it must exist when its edges are the seed links.
        """
        known = self.hetero_view.edge_types
        canonical: EdgeType | None = None
        if len(edge_type) == 3:
            canonical = (edge_type[0], edge_type[1], edge_type[2])
        elif len(edge_type) == 2:
            matches = [et for et in known if (et[0], et[2]) == edge_type]
            canonical = matches[0] if len(matches) == 1 else (edge_type[0], "to", edge_type[1])
        types = self.hetero_view.num_nodes
        if canonical is None or canonical[0] not in types or canonical[2] not in types:
            raise ValueError(
                f"edge_label_index names {edge_type!r}; use (src, rel, dst) or (src, dst) "
                f"over the node types {list(types)}"
            )
        if needs_edges and canonical not in known:
            raise ValueError(
                f"edge_label_index names {canonical!r}, which has no edges to take as seed "
                f"links (edge types: {known}); pass (edge_type, [2, L] tensor)"
            )
        return canonical

    def _edge_index(self, edge_type: EdgeType) -> Tensor:
        """Every edge of ``edge_type`` as ``[2, E]`` in edge-id order (PyG's default seeds)."""
        source = self.hetero_view.sources[edge_type]
        indptr = source.indptr
        dst = torch.repeat_interleave(torch.arange(indptr.numel() - 1), indptr.diff())
        src = source.indices.long()
        if source.e_id is None:
            return torch.stack([src, dst])
        out = torch.empty(2, src.numel(), dtype=torch.int64)
        out[0, source.e_id], out[1, source.e_id] = src, dst
        return out

    def collate(self, index: Tensor, seed: int) -> Any:
        """PyG ``HeteroSamplerOutput`` for the seed links at positions ``index``."""
        from torch_geometric.sampler.neighbor_sampler import edge_sample

        def sample_fn(seed_dict: dict[str, Tensor], seed_time_dict: Any) -> Any:
            sub = self.node_sampler.sample_types(seed_dict, seed=seed, seed_time=seed_time_dict)
            return hetero_output(sub)

        out = edge_sample(
            self.input_data[index], sample_fn, self.hetero_view.num_nodes, self.disjoint,
            self.node_time, self.neg_sampling,
        )  # fmt: skip
        return typed_subgraph(out, self.subgraph_type, self.hetero_view)

    def join(self, out: Any, custom_cls: Any) -> Any:
        """PyG's ``LinkLoader.filter_fn`` for heterogeneous graphs."""
        batch = join_hetero(self.hetero_view, out, custom_cls)
        edge_type = self.input_type
        batch[edge_type].input_id = out.metadata[0]
        if self.neg_sampling is None or self.neg_sampling.is_binary():
            batch[edge_type].edge_label_index = out.metadata[1]
            batch[edge_type].edge_label = out.metadata[2]
            batch[edge_type].edge_label_time = out.metadata[3]
            return batch
        batch[edge_type[0]].src_index = out.metadata[1]
        batch[edge_type[2]].dst_pos_index = out.metadata[2]
        batch[edge_type[2]].dst_neg_index = out.metadata[3]
        batch[edge_type[0]].seed_time = out.metadata[4]
        batch[edge_type[2]].seed_time = out.metadata[4]
        if edge_type in batch.edge_types:  # in case the input data carries them
            del batch[edge_type].edge_label_index
            del batch[edge_type].edge_label_time
        return batch
