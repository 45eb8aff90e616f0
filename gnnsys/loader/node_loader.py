"""``NeighborLoader``: PyG's ``NeighborLoader`` interface on gnnsys's sampler.

It needs neither pyg-lib nor torch-sparse. Batches are ``torch_geometric.data.Data`` with
PyG's fields and meanings, so ``model(batch.x, batch.edge_index)[:batch.batch_size]`` and
``torch_geometric.utils.trim_to_layer`` work unchanged. Every argument of PyG's
``NeighborLoader`` for homogeneous graphs is accepted with PyG's meaning; the few torch
``DataLoader`` options that have no meaning here raise ``TypeError`` naming them (see
``gnnsys.loader.base_loader``).

Randomness: the seed order of an epoch comes from a ``torch.Generator`` seeded from
``(seed, epoch)``; the neighbors of batch ``i`` use ``batch_seed(seed, epoch, i)``, the same
seed the distributed runtime uses, so a run is reproducible whether or not it is partitioned.
Plain fanout sampling runs on ``NeighborSampler`` (the runtime's sampler, identical batches);
disjoint, weighted and temporal sampling run on ``ExtendedSampler``.

Workers (``num_workers > 0``, PyG's option, here threads rather than processes) build whole
batches concurrently and hand them over in order; ``prefetch`` bounds the batches prepared
ahead (default ``2 * num_workers``). Batches are identical to ``num_workers=0``. Breaking out
of the loop, or dropping the iterator, stops the threads cleanly.

Shape legend: ``N`` nodes, ``B`` seeds per batch, ``S`` input (seed) nodes of an epoch.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from gnnsys.loader.base_loader import BatchLoader, LoaderOptions
from gnnsys.loader.graph_view import GraphView
from gnnsys.loader.pyg_sampler import PyGSampler

__all__ = ["NeighborLoader"]


def _input_gid(input_nodes: Any, num_nodes: int) -> Tensor:
    """``[S]`` int64 gids from ``None`` (all), a bool mask, an index tensor/array or a range."""
    if input_nodes is None:
        return torch.arange(num_nodes, dtype=torch.int64)
    if isinstance(input_nodes, tuple | str):
        raise TypeError(
            f"input_nodes={input_nodes!r} names a node type; the gnnsys loaders take "
            "homogeneous graphs: pass None, a bool mask or an index tensor"
        )
    if isinstance(input_nodes, np.ndarray | range | list):
        input_nodes = torch.as_tensor(np.asarray(input_nodes))
    if not isinstance(input_nodes, Tensor) or input_nodes.dim() != 1:
        raise TypeError(
            "input_nodes must be None, a 1-D bool mask or a 1-D index tensor, got "
            f"{type(input_nodes).__name__}"
        )
    if input_nodes.dtype == torch.bool:
        if input_nodes.shape[0] != num_nodes:
            raise ValueError(
                f"input_nodes mask has {input_nodes.shape[0]} entries; need {num_nodes}"
            )
        return torch.nonzero(input_nodes).squeeze(1)
    gid = input_nodes.long()
    if gid.numel() and (int(gid.min()) < 0 or int(gid.max()) >= num_nodes):
        raise ValueError(f"input_nodes has ids outside [0, {num_nodes}); pass valid node ids")
    return gid


def subgraph_type_of(subgraph_type: Any, directed: bool, cls_name: str) -> str:
    """PyG's deprecated ``directed=False`` means ``subgraph_type='induced'`` (with a warning)."""
    if not directed:
        warnings.warn(
            f"The usage of the 'directed' argument in '{cls_name}' is deprecated. "
            "Use `subgraph_type='induced'` instead.",
            stacklevel=3,
        )
        return "induced"
    return str(getattr(subgraph_type, "value", subgraph_type))


class NeighborLoader(BatchLoader):
    """Mini-batches of sampled neighborhoods, as PyG's ``NeighborLoader`` yields them.

    A ``HeteroData``, a gnnsys ``HeteroGraph`` or stores with a typed ``input_nodes`` build a
    ``gnnsys.loader.hetero_loader.HeteroNeighborLoader`` instead (``HeteroData`` batches).

    Args:
        data: A ``torch_geometric.data.Data`` (tensors or numpy/memmap arrays), a
            ``(FeatureStore, GraphStore)`` tuple, or a gnnsys ``Graph``.
        num_neighbors: Fanout per hop, seed hop first; ``-1`` takes all neighbors.
        input_nodes: Seeds: ``None`` (all nodes), a bool mask or an index tensor.
        input_time: ``[S]`` time of each seed (temporal sampling); default the seeds'
            node-level ``time_attr``.
        replace: Sample with replacement.
        subgraph_type: ``'directional'``, ``'bidirectional'`` or ``'induced'``.
        disjoint: Every seed its own subgraph; ``batch.batch`` maps nodes to seeds.
        temporal_strategy: ``'uniform'`` or ``'last'``.
        time_attr: Node- or edge-level attribute of timestamps (temporal sampling: neighbors
            no later than their seed). Implies ``disjoint``, as in PyG.
        weight_attr: Edge-level attribute of sampling weights.
        transform: Called on every finished batch.
        transform_sampler_output: Called on every PyG ``SamplerOutput`` before features are
            joined (PyG's hook).
        is_sorted: Accepted (the edge list is sorted stably here either way).
        filter_per_worker: Join features in the worker (``True``/``None``) or in the consuming
            thread (``False``); batches are identical.
        neighbor_sampler: Must be ``None`` (PyG's own sampler needs pyg-lib).
        directed: Deprecated; ``False`` means ``subgraph_type='induced'``.
        input_id: ``[S]`` ids reported as ``batch.input_id``; default the positions.
        batch_size: Seeds per batch (PyG's default 1).
        shuffle: Reshuffle the seeds every epoch.
        drop_last: Drop the last, incomplete batch.
        num_workers: Threads that build batches concurrently (0: in the consuming thread).
        sampler: A torch sampler (iterable of positions in ``input_nodes``), e.g. PyG's
            ``ImbalancedSampler``; read once per epoch.
        seed: Base seed of shuffling and sampling; ``None`` draws one from torch's global RNG
            (so ``torch.manual_seed`` makes runs repeatable, as with PyG).
        prefetch: Batches prepared ahead, at most; ``None`` means ``2 * num_workers``.
        **kwargs: ``persistent_workers``, ``pin_memory``, ``share_memory``, ``custom_cls``
            (see ``gnnsys.loader.base_loader``).

    Raises:
        TypeError: Unknown or unsupported keyword argument (named), or inputs of the wrong type.
        ValueError: Bad fanouts or options, out-of-range input nodes.
    """

    def __new__(cls, data: Any, *args: Any, **kwargs: Any) -> Any:
        """A ``HeteroNeighborLoader`` for heterogeneous inputs (PyG's one class for both)."""
        input_nodes = args[1] if len(args) > 1 else kwargs.get("input_nodes")
        from gnnsys.loader.hetero_loader import HeteroNeighborLoader, is_hetero_input

        if cls is NeighborLoader and is_hetero_input(data, input_nodes):
            return HeteroNeighborLoader(data, *args, **kwargs)
        return super().__new__(cls)

    # PyG's argument list, packed: one argument per line would be ~28 lines.
    # fmt: off
    def __init__(
        self, data: Any, num_neighbors: Sequence[int] = (15, 10), input_nodes: Any = None,
        input_time: Tensor | None = None, replace: bool = False, subgraph_type: Any = "directional",
        disjoint: bool = False, temporal_strategy: str = "uniform", time_attr: str | None = None,
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
        self.view = GraphView.of(data)
        self.data = data
        """The input graph; PyG code may delete attributes it does not need per batch."""
        config = PyGSampler.Config(
            fanouts=_fanouts(num_neighbors), replace=replace, disjoint=disjoint,
            subgraph_type=subgraph_type_of(subgraph_type, directed, type(self).__name__),
            temporal_strategy=temporal_strategy, time_attr=time_attr, weight_attr=weight_attr,
        )
        threads = 1 if num_workers > 1 else None  # parallel over batches instead
        self.node_sampler = PyGSampler(self.view, config, num_threads=threads)
        self.input_gid = _input_gid(input_nodes, self.view.num_nodes)
        self.input_time = _per_input("input_time", input_time, self.input_gid)
        self.input_id = _per_input("input_id", input_id, self.input_gid)
        if input_time is not None and time_attr is None:
            raise ValueError("input_time needs time_attr (the timestamps it is compared with)")
        self._init_batches(
            int(self.input_gid.shape[0]), batch_size=batch_size, shuffle=shuffle,
            drop_last=drop_last, seed=seed, num_workers=num_workers, prefetch=prefetch,
            sampler=sampler, transform=transform, filter_per_worker=filter_per_worker,
            options=options,
        )
    # fmt: on

    def collate(self, index: Tensor, seed: int) -> Any:
        """PyG ``SamplerOutput`` for the seeds at positions ``index`` of ``input_nodes``."""
        seed_gid = self.input_gid.index_select(0, index)
        seed_time = None if self.input_time is None else self.input_time.index_select(0, index)
        input_id = index if self.input_id is None else self.input_id.index_select(0, index)
        return self.node_sampler.sample_nodes(seed_gid, seed_time, seed, (input_id, seed_time))

    def filter(self, out: Any) -> Any:
        """PyG's ``filter_fn``: features joined, ``input_id``/``seed_time``/``batch_size`` set."""
        batch = self._joined(out)
        batch.input_id = out.metadata[0]
        batch.seed_time = out.metadata[1]
        batch.batch_size = int(out.metadata[0].shape[0])
        return batch


def _fanouts(num_neighbors: Any) -> tuple[int, ...]:
    if isinstance(num_neighbors, dict):
        raise TypeError("num_neighbors as a dict is for heterogeneous graphs; pass a list")
    return tuple(getattr(num_neighbors, "values", num_neighbors))  # list or PyG NumNeighbors


def _per_input(name: str, values: Tensor | None, input_gid: Tensor) -> Tensor | None:
    if values is None:
        return None
    values = torch.as_tensor(values)
    if values.dim() != 1 or values.shape[0] != input_gid.shape[0]:
        raise ValueError(
            f"{name} must have one entry per input node ({input_gid.shape[0]}), "
            f"got shape {tuple(values.shape)}"
        )
    return values
