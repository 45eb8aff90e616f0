"""What ``NeighborLoader`` and ``LinkNeighborLoader`` share: epochs, workers, PyG's batch fields.

An epoch walks the loader's inputs (seed nodes or seed links) in order, or shuffled with a
``torch.Generator`` seeded from ``(seed, epoch)``, or in the order of a torch ``sampler``; batch
``i`` of epoch ``e`` samples with ``batch_seed(seed, e, i)``, so batches are reproducible and
identical for every ``num_workers``.

Workers (``num_workers > 0``) are threads, not processes: the sampler's numpy work and torch's
slicing release the GIL, and threads share the graph without pickling or shared-memory copies.
``filter_per_worker`` keeps PyG's meaning: ``True`` (and ``None``) join features in the worker,
``False`` in the consuming thread. ``persistent_workers`` changes nothing observable here (threads
start per epoch in microseconds); ``pin_memory=True`` pins every batch tensor when CUDA is
available and is a no-op otherwise, as in torch's ``DataLoader``.

Shape legend: ``S`` inputs of an epoch, ``B`` inputs per batch.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor

from gnnsys.loader.graph_view import GraphView
from gnnsys.prefetch import Prefetcher
from gnnsys.sampler import batch_seed

__all__ = [
    "BatchLoader",
    "LoaderOptions",
    "Sampling",
    "Seeds",
    "input_gid",
    "per_input",
    "subgraph_type_of",
    "to_pyg_batch",
]

_SHUFFLE_SALT = 0x5EED5EED
_CALL_SALT = 0xCA11CA11

_UNSUPPORTED = {
    "batch_sampler": "pass batch_size/shuffle/drop_last (or sampler=) instead",
    "collate_fn": "the loader builds its batches itself; use transform= to post-process them",
    "worker_init_fn": "workers are threads in the same process; nothing to initialise",
    "multiprocessing_context": "workers are threads, not processes",
    "timeout": "workers are threads; there is no worker process to time out",
    "prefetch_factor": "use prefetch= (batches prepared ahead, in total)",
    "generator": "use seed= (shuffling and sampling are seeded from it)",
    "in_order": "batches always come back in order",
}
"""torch/PyG ``DataLoader`` options the gnnsys loaders refuse, with what to do instead."""

_ACCEPTED = frozenset(
    {"persistent_workers", "pin_memory", "share_memory", "is_sorted", "dataset", "custom_cls"}
)


class LoaderOptions:
    """The torch ``DataLoader`` part of the loaders' arguments, validated once.

    Raises:
        TypeError: An unknown or refused keyword (named, with the alternative).
        ValueError: ``batch_size < 1``, ``num_workers < 0``, ``prefetch`` below ``num_workers``.
    """

    def __init__(self, cls_name: str, kwargs: dict[str, Any], neighbor_sampler: Any = None) -> None:
        if neighbor_sampler is not None:
            raise TypeError(
                f"{cls_name} does not take neighbor_sampler (a PyG sampler, which needs "
                "pyg-lib); pass the sampling options (num_neighbors, replace, ...) instead"
            )
        refused = sorted(set(kwargs) & set(_UNSUPPORTED))
        if refused:
            raise TypeError(
                f"{cls_name} does not support {refused}: "
                + "; ".join(f"{k}: {_UNSUPPORTED[k]}" for k in refused)
            )
        unknown = sorted(set(kwargs) - _ACCEPTED)
        if unknown:
            raise TypeError(f"{cls_name} got unexpected arguments {unknown}")
        self.pin_memory = bool(kwargs.get("pin_memory", False))
        self.custom_cls = kwargs.get("custom_cls")
        """``Data`` subclass for batches built from a ``(FeatureStore, GraphStore)``."""


@dataclass(frozen=True, slots=True)
class Sampling:
    """PyG's sampling arguments of a loader, read by the seeds of either graph kind.

    ``num_neighbors`` is as the user gave it (a list, a dict by edge type or PyG's
    ``NumNeighbors``); ``subgraph_type`` is resolved (``directed=False`` folded in);
    ``num_threads`` is the sampler's intra-batch threads (``None``: torch's).
    """

    num_neighbors: Any
    replace: bool
    subgraph_type: str
    disjoint: bool
    temporal_strategy: str
    time_attr: str | None
    weight_attr: str | None
    num_threads: int | None = None


class Seeds(Protocol):
    """What a loader iterates: its inputs, how one batch of them is sampled and joined.

    One implementation per graph kind (``Data``/``Graph`` batches, ``HeteroData`` batches);
    the loader class is the same.
    """

    num_inputs: int

    def collate(self, index: Tensor, seed: int) -> Any:
        """PyG's sampler output for the inputs at positions ``index``."""
        ...

    def join(self, out: Any, custom_cls: Any) -> Any:
        """PyG's ``filter_fn``: the batch with features joined and its fields set."""
        ...


class BatchLoader:
    """Base of the loaders: iterate positions of ``num_inputs`` inputs in batches.

    Subclasses set ``self.seeds`` (the inputs of their graph's kind: :class:`Seeds`), whose
    ``collate(index, seed)`` samples a batch and ``join(out, custom_cls)`` joins its features
    into a ``Data`` or ``HeteroData``.
    """

    seeds: Seeds
    transform_sampler_output: Callable[[Any], Any] | None = None
    """PyG's hook: called on every ``SamplerOutput`` before features are joined."""

    def _init_batches(
        self,
        num_inputs: int,
        *,
        batch_size: int,
        shuffle: bool,
        drop_last: bool,
        seed: int | None,
        num_workers: int,
        prefetch: int | None,
        sampler: Iterable[int] | None,
        transform: Callable[[Any], Any] | None,
        filter_per_worker: bool | None,
        options: LoaderOptions,
    ) -> None:
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"need batch_size >= 1, got {batch_size!r}")
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle (as in torch)")
        self.num_workers, self.prefetch = _workers_and_prefetch(num_workers, prefetch)
        self.num_inputs = num_inputs
        self.batch_size, self.shuffle, self.drop_last = batch_size, shuffle, drop_last
        self.sampler = sampler
        self.transform = transform
        self.filter_per_worker = True if filter_per_worker is None else bool(filter_per_worker)
        self.pin_memory = options.pin_memory
        self.custom_cls = options.custom_cls
        self.seed = int(torch.randint(0, 2**62, (1,))) if seed is None else seed
        self.epoch = 0
        self._calls = 0

    def collate(self, index: Tensor, seed: int) -> Any:
        """PyG's sampler output for the inputs at positions ``index`` (the seeds sample it)."""
        return self.seeds.collate(index, seed)

    def filter(self, out: Any) -> Any:
        """PyG's ``filter_fn``: ``transform_sampler_output``, then the seeds' join."""
        if self.transform_sampler_output is not None:
            out = self.transform_sampler_output(out)
        return self.seeds.join(out, self.custom_cls)

    def __repr__(self) -> str:
        """``'NeighborLoader()'``, as PyG's loaders print."""
        return f"{self.__class__.__name__}()"

    def __len__(self) -> int:
        """Batches per epoch."""
        num = self.num_inputs if self.sampler is None else len(list(self.sampler))
        full, rest = divmod(num, self.batch_size)
        return full + (1 if rest and not self.drop_last else 0)

    def __call__(self, index: Tensor | list[int]) -> Any:
        """One batch for the input positions ``index`` (PyG's ``loader([0, 1])``)."""
        index = torch.as_tensor(index, dtype=torch.int64).reshape(-1)
        seed = batch_seed(self.seed ^ _CALL_SALT, self._calls, 0)
        self._calls += 1
        return self._finish(self.filter(self.collate(index, seed)))

    def _epoch_order(self, epoch: int) -> Tensor:
        """``[S]`` input positions in this epoch's order."""
        if self.sampler is not None:
            return torch.as_tensor(list(self.sampler), dtype=torch.int64)
        if not self.shuffle:
            return torch.arange(self.num_inputs, dtype=torch.int64)
        gen = torch.Generator().manual_seed(batch_seed(self.seed ^ _SHUFFLE_SALT, epoch, 0))
        return torch.randperm(self.num_inputs, generator=gen)

    def make_batch(self, index: Tensor, *, epoch: int, batch_index: int) -> Any:
        """Sample (and, with ``filter_per_worker``, filter) batch ``batch_index`` of ``epoch``."""
        out = self.collate(index, batch_seed(self.seed, epoch, batch_index))
        return self.filter(out) if self.filter_per_worker else out

    def _finish(self, batch: Any) -> Any:
        if self.pin_memory and torch.cuda.is_available():
            batch = batch.pin_memory()
        return batch if self.transform is None else self.transform(batch)

    def _deliver(self, made: Any) -> Any:
        return self._finish(made if self.filter_per_worker else self.filter(made))

    def __iter__(self) -> Iterator[Any]:
        """One epoch of batches; each call starts the next epoch."""
        epoch, self.epoch = self.epoch, self.epoch + 1
        chunks = list(torch.split(self._epoch_order(epoch), self.batch_size))[: len(self)]
        made: Prefetcher[Any] = Prefetcher(  # the training step's way of forming batches
            lambda i: self.make_batch(chunks[i], epoch=epoch, batch_index=i),
            len(chunks),
            self.prefetch,
            workers=max(1, self.num_workers),
            name="gnnsys-prefetch",
        )
        return _Delivered(made, self._deliver)


class _Delivered:
    """Applies the consumer-side step to each made batch; closing it stops the workers."""

    def __init__(self, made: Iterator[Any], deliver: Callable[[Any], Any]) -> None:
        self._made, self._deliver = made, deliver

    def __iter__(self) -> _Delivered:
        return self

    def __next__(self) -> Any:
        return self._deliver(next(self._made))

    def __len__(self) -> int:
        """The epoch's batches, where the producer counts them (``Prefetcher.count``)."""
        count = getattr(self._made, "count", None)
        if count is None:
            raise TypeError("this epoch's batches are not counted ahead; use len(loader)")
        return int(count)

    def close(self) -> None:
        """Stop the worker threads (also happens when the iterator is dropped)."""
        close = getattr(self._made, "close", None)
        if close is not None:
            close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: the threads are daemons
            pass


def to_pyg_batch(view: GraphView, out: Any, custom_cls: Any = None) -> Any:
    """PyG's ``filter_fn`` for homogeneous graphs: a ``Data`` from a ``SamplerOutput``.

    Node attributes are sliced by ``out.node`` (``Tensor``, numpy/memmap arrays and
    ``FeatureStore`` tensors alike), edge attributes by ``out.edge`` (dropped when it is
    ``None``); then PyG's fields ``n_id``, ``e_id``, ``batch``, ``num_sampled_nodes`` and
    ``num_sampled_edges`` are set.
    """
    from torch_geometric.data import Data
    from torch_geometric.loader.utils import filter_custom_store, filter_data

    data = view.data
    if isinstance(data, Data):
        batch = filter_data(data, out.node, out.row, out.col, out.edge, None)
    elif isinstance(data, tuple):
        stores = (data[0], data[1])
        batch = filter_custom_store(*stores, out.node, out.row, out.col, out.edge, custom_cls)
    else:  # a gnnsys Graph: its node tensors, no edge attributes
        batch = Data(edge_index=torch.stack([out.row, out.col]), num_nodes=out.node.numel())
        for key, value in view.node_attrs.items():
            batch[key] = value.index_select(0, out.node)
    if "n_id" not in batch:
        batch.n_id = out.node
    if out.edge is not None and "e_id" not in batch:
        batch.e_id = out.edge.to(torch.long)
    batch.batch = out.batch
    batch.num_sampled_nodes = out.num_sampled_nodes
    batch.num_sampled_edges = out.num_sampled_edges
    return batch


def _workers_and_prefetch(num_workers: int, prefetch: int | None) -> tuple[int, int]:
    """Validated ``(num_workers, prefetch)``; prefetch 0 means batches made on demand."""
    if not isinstance(num_workers, int) or num_workers < 0:
        raise ValueError(f"num_workers must be an int >= 0, got {num_workers!r}")
    if prefetch is None:
        return num_workers, 2 * num_workers
    if prefetch < max(1, num_workers) and (prefetch != 0 or num_workers > 0):
        raise ValueError(
            f"prefetch={prefetch} is below num_workers={num_workers}; use prefetch >= "
            f"{max(1, num_workers)} or leave it None (2 * num_workers)"
        )
    return num_workers, prefetch


def input_gid(input_nodes: Any, num_nodes: int) -> Tensor:
    """``[S]`` int64 ids from ``None`` (all), a bool mask, an index tensor/array or a range."""
    if input_nodes is None:
        return torch.arange(num_nodes, dtype=torch.int64)
    if isinstance(input_nodes, tuple | str):
        raise TypeError(
            f"input_nodes={input_nodes!r} names a node type, but the graph has one node type: "
            "pass None, a bool mask or an index tensor"
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


def mask_ids(input_nodes: Any, input_id: Tensor | None, input_gid: Tensor) -> Tensor | None:
    """PyG's ``input_id`` rule: as given, else a bool mask's node ids, else ``None``.

    With ``None`` each batch reports the seeds' positions in ``input_nodes`` (PyG's
    ``get_input_nodes`` and ``NodeSamplerInput``).
    """
    if input_id is None and isinstance(input_nodes, Tensor) and input_nodes.dtype == torch.bool:
        return input_gid
    return input_id


def per_input(name: str, values: Tensor | None, input_gid: Tensor) -> Tensor | None:
    """``values`` checked to hold one entry per input node (``None`` passes through)."""
    if values is None:
        return None
    values = torch.as_tensor(values)
    if values.dim() != 1 or values.shape[0] != input_gid.shape[0]:
        raise ValueError(
            f"{name} must have one entry per input node ({input_gid.shape[0]}), "
            f"got shape {tuple(values.shape)}"
        )
    return values


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
