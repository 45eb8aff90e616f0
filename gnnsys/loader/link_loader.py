"""``LinkNeighborLoader``: PyG's ``LinkNeighborLoader`` interface on gnnsys's sampler.

A batch takes ``batch_size`` seed links (columns of ``edge_label_index``), adds negative links
when ``neg_sampling`` asks for them, and samples the neighborhood of every endpoint with the
same sampler as ``NeighborLoader``. The bookkeeping is PyG's own ``edge_sample`` (see
``gnnsys.loader.pyg_sampler``), so the batch fields have PyG's exact meaning:

* no / binary negative sampling: ``edge_label_index`` (``[2, B + B_neg]`` local ids),
  ``edge_label`` (positives keep their label, or 1; negatives 0; labels are shifted by one when
  the given ones start at 0, as PyG does), ``edge_label_time``;
* triplet negative sampling: ``src_index``, ``dst_pos_index``, ``dst_neg_index``
  (``[B]`` or ``[B, amount]``), ``seed_time``;
* always: ``input_id`` (positions in ``edge_label_index``), ``n_id``, ``e_id``, ``batch``
  (disjoint), ``num_sampled_nodes``, ``num_sampled_edges``, and node/edge attributes sliced.

Shape legend: ``L`` seed links of an epoch, ``B`` per batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor

from gnnsys.loader.base_loader import (
    BatchLoader,
    LoaderOptions,
    Sampling,
    Seeds,
    subgraph_type_of,
    to_pyg_batch,
)
from gnnsys.loader.graph_view import GraphView
from gnnsys.loader.hetero_link_loader import TypedLinkSeeds, is_hetero_link
from gnnsys.loader.link_inputs import LinkInputs, check_time_args, edge_input, neg_sampling_of
from gnnsys.loader.node_loader import pyg_config
from gnnsys.loader.pyg_sampler import PyGSampler

__all__ = ["LinkNeighborLoader", "LinkSeeds"]


class LinkNeighborLoader(BatchLoader):
    """Mini-batches of seed links and their sampled neighborhoods, as PyG's loader yields.

    Args:
        data: A ``torch_geometric.data.Data``, a ``(FeatureStore, GraphStore)`` tuple or a
            gnnsys ``Graph``; or, for ``HeteroData`` batches, a ``HeteroData``, a gnnsys
            ``HeteroGraph`` or stores with ``edge_label_index`` naming an edge type
            (``gnnsys.loader.hetero_link_loader``).
        num_neighbors: Fanout per hop, seed hop first; ``-1`` takes all neighbors.
        edge_label_index: ``[2, L]`` seed links; ``None`` takes every edge of ``data``. Typed
            graphs: an edge type (its every edge) or ``(edge_type, None | [2, L])``.
        edge_label: ``[L, ...]`` labels of the seed links, or ``None``.
        edge_label_time: ``[L]`` time of each seed link (temporal sampling; needs
            ``time_attr``).
        replace: Sample with replacement.
        subgraph_type: ``'directional'``, ``'bidirectional'`` or ``'induced'``.
        disjoint: Every seed link its own subgraph (``batch.batch`` maps nodes to links).
        temporal_strategy: ``'uniform'`` or ``'last'``.
        neg_sampling: A ``torch_geometric.sampler.NegativeSampling`` (or what its ``cast``
            takes: ``'binary'``, ``'triplet'``, a dict) with ``amount`` and optional ``weight``.
        neg_sampling_ratio: Deprecated PyG shorthand for binary negatives of that amount.
        time_attr: Node- or edge-level attribute of timestamps.
        weight_attr: Edge-level attribute of sampling weights.
        transform: Called on every finished batch.
        transform_sampler_output: Called on every PyG ``SamplerOutput`` before features are
            joined (PyG's hook).
        is_sorted: Accepted (no effect).
        filter_per_worker: Join features in the worker (``True``/``None``) or the consumer.
        neighbor_sampler: Must be ``None`` (PyG's own sampler needs pyg-lib).
        directed: Deprecated; ``False`` means ``subgraph_type='induced'``.
        input_id: ``[L]`` ids reported as ``batch.input_id``; default the positions.
        batch_size: Seed links per batch (PyG's default 1).
        shuffle: Reshuffle the seed links every epoch.
        drop_last: Drop the last, incomplete batch.
        num_workers: Threads that build batches concurrently.
        sampler: A torch sampler over positions of ``edge_label_index``.
        seed: Base seed of shuffling and neighbor sampling (``None``: from torch's RNG).
        prefetch: Batches prepared ahead, at most; ``None`` means ``2 * num_workers``.
        **kwargs: ``persistent_workers``, ``pin_memory``, ``share_memory``, ``custom_cls``.

    Raises:
        TypeError: Unknown or unsupported keyword argument (named), wrong input types.
        ValueError: ``edge_label_time`` without ``time_attr`` (or the reverse), labels with
            triplet negatives, mismatched lengths, bad sampling options.
    """

    # PyG's argument list, packed: one argument per line would be ~28 lines.
    # fmt: off
    def __init__(
        self, data: Any, num_neighbors: Any = (15, 10), edge_label_index: Any = None,
        edge_label: Tensor | None = None, edge_label_time: Tensor | None = None,
        replace: bool = False, subgraph_type: Any = "directional", disjoint: bool = False,
        temporal_strategy: str = "uniform", neg_sampling: Any = None,
        neg_sampling_ratio: float | None = None, time_attr: str | None = None,
        weight_attr: str | None = None, transform: Callable[[Any], Any] | None = None,
        transform_sampler_output: Callable[[Any], Any] | None = None, is_sorted: bool = False,
        filter_per_worker: bool | None = None, neighbor_sampler: Any = None,
        directed: bool = True, *, input_id: Tensor | None = None, batch_size: int = 1,
        shuffle: bool = False, drop_last: bool = False, num_workers: int = 0,
        sampler: Iterable[int] | None = None, seed: int | None = None,
        prefetch: int | None = None, **kwargs: Any,
    ) -> None:
        options = LoaderOptions(type(self).__name__, kwargs, neighbor_sampler)
        self.transform_sampler_output = transform_sampler_output
        check_time_args(edge_label_time, time_attr)
        self.data = data
        sampling = Sampling(
            num_neighbors, replace,
            subgraph_type_of(subgraph_type, directed, "LinkNeighborLoader"), disjoint,
            temporal_strategy, time_attr, weight_attr, 1 if num_workers > 1 else None,
        )
        links = LinkInputs(
            edge_label_index, edge_label, edge_label_time, input_id,
            neg_sampling_of(neg_sampling, neg_sampling_ratio),
        )
        # PyG's one class for both kinds: the seeds decide the batches' kind
        make: Callable[..., Seeds] = (
            TypedLinkSeeds if is_hetero_link(data, edge_label_index) else LinkSeeds
        )
        self.seeds = make(data, sampling, links)
        self._init_batches(
            self.seeds.num_inputs, batch_size=batch_size, shuffle=shuffle,
            drop_last=drop_last, seed=seed, num_workers=num_workers, prefetch=prefetch,
            sampler=sampler, transform=transform, filter_per_worker=filter_per_worker,
            options=options,
        )
    # fmt: on


class LinkSeeds:
    """Seed links of a graph with one node type: ``Data`` batches."""

    def __init__(self, data: Any, sampling: Sampling, links: LinkInputs) -> None:
        self.view = GraphView.of(data)
        self.link_sampler = PyGSampler(
            self.view, pyg_config(sampling), num_threads=sampling.num_threads
        )
        self.neg_sampling = links.neg_sampling
        self.edge_label_index = self._label_index(links.edge_label_index)
        self.input_data = edge_input(
            self.edge_label_index, links.edge_label, links.edge_label_time, links.input_id,
            self.neg_sampling,
        )  # fmt: skip
        self.num_inputs = int(self.edge_label_index.shape[1])

    def _label_index(self, edge_label_index: Tensor | None) -> Tensor:
        if edge_label_index is None:
            data = self.view.data
            edge_index = getattr(data, "edge_index", None)
            if edge_index is None:
                raise ValueError("pass edge_label_index (the data has no edge_index to default to)")
            return torch.as_tensor(edge_index).long()
        if isinstance(edge_label_index, tuple | str):
            raise TypeError(
                "edge_label_index names an edge type, but the graph has one relation: pass a "
                "[2, L] tensor"
            )
        index = torch.as_tensor(edge_label_index).long()
        if index.dim() != 2 or index.shape[0] != 2:
            raise ValueError(f"edge_label_index must be [2, L], got {tuple(index.shape)}")
        if index.numel() and (int(index.min()) < 0 or int(index.max()) >= self.view.num_nodes):
            raise ValueError(f"edge_label_index has node ids outside [0, {self.view.num_nodes})")
        return index

    def collate(self, index: Tensor, seed: int) -> Any:
        """PyG ``SamplerOutput`` for the seed links at positions ``index``."""
        inputs = self.input_data[index]
        return self.link_sampler.sample_edges(inputs, self.neg_sampling, seed)

    def join(self, out: Any, custom_cls: Any) -> Any:
        """PyG's ``LinkLoader.filter_fn`` for homogeneous graphs."""
        batch = to_pyg_batch(self.view, out, custom_cls)
        batch.input_id = out.metadata[0]
        if self.neg_sampling is None or self.neg_sampling.is_binary():
            batch.edge_label_index = out.metadata[1]
            batch.edge_label = out.metadata[2]
            batch.edge_label_time = out.metadata[3]
        else:
            batch.src_index = out.metadata[1]
            batch.dst_pos_index = out.metadata[2]
            batch.dst_neg_index = out.metadata[3]
            batch.seed_time = out.metadata[4]
            del batch.edge_label_index  # in case the input data carries them
            del batch.edge_label_time
        return batch
