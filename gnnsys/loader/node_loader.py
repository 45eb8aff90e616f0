"""``NeighborLoader``: PyG's ``NeighborLoader`` interface on gnnsys's sampler.

It needs neither pyg-lib nor torch-sparse. Batches are ``torch_geometric.data.Data`` with
PyG's fields and meanings, so ``model(batch.x, batch.edge_index)[:batch.batch_size]`` and
``torch_geometric.utils.trim_to_layer`` work unchanged. Every argument of PyG's
``NeighborLoader`` is accepted with PyG's meaning; the few torch ``DataLoader`` options that
have no meaning here raise ``TypeError`` naming them (see ``gnnsys.loader.base_loader``).

One class for both graph kinds, as PyG's: a ``HeteroData``, a gnnsys ``HeteroGraph`` or stores
with a typed ``input_nodes`` give ``HeteroData`` batches (the loader's seeds are
``gnnsys.loader.hetero_loader.TypedNodeSeeds``); anything else gives ``Data`` batches
(:class:`NodeSeeds`). The batch loop, workers, prefetch and options are shared.

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

from collections.abc import Callable, Iterable
from typing import Any

from torch import Tensor

from gnnsys.loader.base_loader import (
    BatchLoader,
    LoaderOptions,
    Sampling,
    Seeds,
    input_gid,
    mask_ids,
    per_input,
    subgraph_type_of,
    to_pyg_batch,
)
from gnnsys.loader.graph_view import GraphView
from gnnsys.loader.hetero_loader import TypedNodeSeeds, is_hetero_input
from gnnsys.loader.pyg_sampler import PyGSampler

__all__ = ["NeighborLoader", "NodeSeeds", "pyg_config"]


def pyg_config(sampling: Sampling) -> PyGSampler.Config:
    """The homogeneous sampler's config from a loader's sampling arguments."""
    return PyGSampler.Config(
        fanouts=_fanouts(sampling.num_neighbors), replace=sampling.replace,
        disjoint=sampling.disjoint, subgraph_type=sampling.subgraph_type,
        temporal_strategy=sampling.temporal_strategy, time_attr=sampling.time_attr,
        weight_attr=sampling.weight_attr,
    )  # fmt: skip


class NodeSeeds:
    """Seed nodes of a graph with one node type: ``Data`` batches (see the module docstring)."""

    def __init__(
        self,
        data: Any,
        sampling: Sampling,
        input_nodes: Any,
        input_time: Tensor | None,
        input_id: Tensor | None,
    ) -> None:
        self.view = GraphView.of(data)
        self.node_sampler = PyGSampler(
            self.view, pyg_config(sampling), num_threads=sampling.num_threads
        )
        self.input_gid = input_gid(input_nodes, self.view.num_nodes)
        self.input_time = per_input("input_time", input_time, self.input_gid)
        ids = mask_ids(input_nodes, input_id, self.input_gid)
        self.input_id = per_input("input_id", ids, self.input_gid)
        self.num_inputs = int(self.input_gid.shape[0])

    def collate(self, index: Tensor, seed: int) -> Any:
        """PyG ``SamplerOutput`` for the seeds at positions ``index`` of ``input_nodes``."""
        seed_gid = self.input_gid.index_select(0, index)
        seed_time = None if self.input_time is None else self.input_time.index_select(0, index)
        input_id = index if self.input_id is None else self.input_id.index_select(0, index)
        return self.node_sampler.sample_nodes(seed_gid, seed_time, seed, (input_id, seed_time))

    def join(self, out: Any, custom_cls: Any) -> Any:
        """PyG's ``filter_fn``: features joined, ``input_id``/``seed_time``/``batch_size`` set."""
        batch = to_pyg_batch(self.view, out, custom_cls)
        batch.input_id = out.metadata[0]
        batch.seed_time = out.metadata[1]
        batch.batch_size = int(out.metadata[0].shape[0])
        return batch


class NeighborLoader(BatchLoader):
    """Mini-batches of sampled neighborhoods, as PyG's ``NeighborLoader`` yields them.

    Args:
        data: A ``torch_geometric.data.Data`` (tensors or numpy/memmap arrays), a
            ``(FeatureStore, GraphStore)`` tuple or a gnnsys ``Graph``; or, for ``HeteroData``
            batches, a ``HeteroData``, a gnnsys ``HeteroGraph`` or stores with a typed
            ``input_nodes`` (``gnnsys.loader.hetero_loader``).
        num_neighbors: Fanout per hop, seed hop first; ``-1`` takes all neighbors. Typed
            graphs: a list (every relation) or a dict by edge type (PyG's ``NumNeighbors``).
        input_nodes: Seeds: ``None`` (all nodes), a bool mask or an index tensor; typed
            graphs: ``"type"`` or ``("type", None | mask | index)``.
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

    # PyG's argument list, packed: one argument per line would be ~28 lines.
    # fmt: off
    def __init__(
        self, data: Any, num_neighbors: Any = (15, 10), input_nodes: Any = None,
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
        self.data = data
        """The input graph; PyG code may delete attributes it does not need per batch."""
        if input_time is not None and time_attr is None:
            raise ValueError("input_time needs time_attr (the timestamps it is compared with)")
        sampling = Sampling(
            num_neighbors, replace, subgraph_type_of(subgraph_type, directed, "NeighborLoader"),
            disjoint, temporal_strategy, time_attr, weight_attr,
            num_threads=1 if num_workers > 1 else None,  # parallel over batches instead
        )
        # PyG's one class for both kinds: the seeds decide the batches' kind
        make: Callable[..., Seeds] = (
            TypedNodeSeeds if is_hetero_input(data, input_nodes) else NodeSeeds
        )
        self.seeds = make(data, sampling, input_nodes, input_time, input_id)
        self._init_batches(
            self.seeds.num_inputs, batch_size=batch_size, shuffle=shuffle,
            drop_last=drop_last, seed=seed, num_workers=num_workers, prefetch=prefetch,
            sampler=sampler, transform=transform, filter_per_worker=filter_per_worker,
            options=options,
        )
    # fmt: on


def _fanouts(num_neighbors: Any) -> tuple[int, ...]:
    if isinstance(num_neighbors, dict):
        raise TypeError("num_neighbors as a dict is for heterogeneous graphs; pass a list")
    return tuple(getattr(num_neighbors, "values", num_neighbors))  # list or PyG NumNeighbors
