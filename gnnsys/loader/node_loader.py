"""``NeighborLoader``: PyG's ``NeighborLoader`` interface on gnnsys's sampler.

It needs neither pyg-lib nor torch-sparse. Batches are ``torch_geometric.data.Data`` with
PyG's fields and meanings, so ``model(batch.x, batch.edge_index)[:batch.batch_size]`` and
``torch_geometric.utils.trim_to_layer`` work unchanged.

Randomness: the seed order of an epoch comes from a ``torch.Generator`` seeded from
``(seed, epoch)``; the neighbors of batch ``i`` use ``batch_seed(seed, epoch, i)``, the same
seed the distributed runtime uses, so a run is reproducible whether or not it is partitioned.

Workers (``num_workers > 0``, PyG's option, here threads rather than processes) build whole
batches, sampling plus feature slicing, concurrently and hand them over in order; ``prefetch``
bounds the batches prepared ahead (default ``2 * num_workers``). The sampler's numpy work and
torch's slicing release the GIL, so workers use the other cores and overlap the training step.
Batches are identical to ``num_workers=0``. Breaking out of the loop, or dropping the iterator,
stops the threads cleanly.

Shape legend: ``N`` nodes, ``B`` seeds per batch, ``S`` input (seed) nodes of an epoch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from gnnsys.loader.graph_view import GraphView, to_pyg_data
from gnnsys.sampler import NeighborSampler, batch_seed
from gnnsys.sampler.ordered import OrderedMap

__all__ = ["NeighborLoader"]

_IGNORED_KWARGS = frozenset({"persistent_workers", "pin_memory"})
"""torch DataLoader options PyG code passes; workers are threads here, so they do nothing."""
_SHUFFLE_SALT = 0x5EED5EED


def _input_gid(input_nodes: Any, num_nodes: int) -> Tensor:
    """``[S]`` int64 gids from ``None`` (all), a bool mask, or an index tensor/array."""
    if input_nodes is None:
        return torch.arange(num_nodes, dtype=torch.int64)
    if isinstance(input_nodes, np.ndarray):
        input_nodes = torch.from_numpy(input_nodes)
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


class NeighborLoader:
    """Mini-batches of sampled neighborhoods, as PyG's ``NeighborLoader`` yields them.

    Args:
        data: A ``torch_geometric.data.Data`` or a gnnsys ``Graph``.
        num_neighbors: Fanout per hop, seed hop first; ``-1`` takes all neighbors.
        batch_size: Seeds per batch.
        input_nodes: Seeds: ``None`` (all nodes), a bool mask or an index tensor.
        shuffle: Reshuffle the seeds every epoch.
        drop_last: Drop the last, incomplete batch.
        seed: Base seed of shuffling and sampling; ``None`` draws one from torch's global RNG
            (so ``torch.manual_seed`` makes runs repeatable, as with PyG).
        num_workers: Threads that build batches concurrently (0: in the consuming thread).
            Each worker samples one batch on one thread, with an id table of ``N`` int32.
        prefetch: Batches prepared ahead, at most; ``None`` means ``2 * num_workers``. With
            ``num_workers=0``, ``prefetch > 0`` uses one background thread.
        replace: Sample with replacement.
        **kwargs: ``persistent_workers`` and ``pin_memory`` are accepted for drop-in
            compatibility and ignored.

    Raises:
        TypeError: Unknown keyword argument, or ``data``/``input_nodes`` of the wrong type.
        ValueError: Bad fanouts, ``batch_size < 1``, ``num_workers < 0``, ``prefetch`` below
            ``num_workers``, out-of-range input nodes.
    """

    def __init__(
        self,
        data: Any,
        num_neighbors: Sequence[int] = (15, 10),
        batch_size: int = 1024,
        input_nodes: Any = None,
        shuffle: bool = False,
        drop_last: bool = False,
        seed: int | None = None,
        num_workers: int = 0,
        prefetch: int | None = None,
        replace: bool = False,
        **kwargs: Any,
    ) -> None:
        unknown = set(kwargs) - _IGNORED_KWARGS
        if unknown:
            raise TypeError(f"NeighborLoader got unexpected arguments {sorted(unknown)}")
        self.num_workers, self.prefetch = _workers_and_prefetch(num_workers, prefetch)
        if batch_size < 1:
            raise ValueError(f"need batch_size >= 1, got {batch_size}")
        self.view = GraphView.of(data)
        self.data = data
        """The input graph; PyG code may delete attributes it does not need per batch."""
        config = NeighborSampler.Config(
            fanouts=tuple(num_neighbors),
            replace=replace,
            num_threads=1 if self.num_workers > 1 else None,  # parallel over batches instead
        )
        self.sampler = NeighborSampler(config, source=self.view.source)
        self.input_gid = _input_gid(input_nodes, self.view.num_nodes)
        self.batch_size, self.shuffle, self.drop_last = batch_size, shuffle, drop_last
        self.seed = int(torch.randint(0, 2**62, (1,))) if seed is None else seed
        self.epoch = 0

    def __len__(self) -> int:
        """Batches per epoch."""
        full, rest = divmod(int(self.input_gid.shape[0]), self.batch_size)
        return full + (1 if rest and not self.drop_last else 0)

    def _epoch_order(self, epoch: int) -> Tensor:
        """``[S]`` positions into ``input_gid`` in this epoch's order."""
        num = int(self.input_gid.shape[0])
        if not self.shuffle:
            return torch.arange(num, dtype=torch.int64)
        gen = torch.Generator().manual_seed(batch_seed(self.seed ^ _SHUFFLE_SALT, epoch, 0))
        return torch.randperm(num, generator=gen)

    def make_batch(self, input_id: Tensor, *, epoch: int, batch_index: int) -> Any:
        """Sample one batch for the seeds ``input_gid[input_id]``; returns a PyG ``Data``."""
        seed_gid = self.input_gid.index_select(0, input_id)
        sub = self.sampler.sample(seed_gid, seed=batch_seed(self.seed, epoch, batch_index))
        out = to_pyg_data(sub, None, None)
        node_attrs, edge_attrs = self.view.attrs()
        for key, value in node_attrs.items():
            out[key] = value.index_select(0, sub.n_id)
        for key, value in edge_attrs.items():
            out[key] = value.index_select(0, out.e_id)
        out.input_id = input_id
        return out

    def __iter__(self) -> Iterator[Any]:
        """One epoch of batches; each call starts the next epoch."""
        epoch, self.epoch = self.epoch, self.epoch + 1
        order = self._epoch_order(epoch)
        chunks = list(torch.split(order, self.batch_size))[: len(self)]
        if self.prefetch == 0:
            return (self.make_batch(c, epoch=epoch, batch_index=i) for i, c in enumerate(chunks))
        return OrderedMap(
            lambda job: self.make_batch(job[1], epoch=epoch, batch_index=job[0]),
            enumerate(chunks),
            num_workers=max(1, self.num_workers),
            capacity=self.prefetch,
            name="gnnsys-prefetch",
        )


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
