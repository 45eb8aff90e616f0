"""``NeighborLoader``: PyG's ``NeighborLoader`` interface on gnnsys's sampler.

It needs neither pyg-lib nor torch-sparse. Batches are ``torch_geometric.data.Data`` with
PyG's fields and meanings, so ``model(batch.x, batch.edge_index)[:batch.batch_size]`` and
``torch_geometric.utils.trim_to_layer`` work unchanged.

Randomness: the seed order of an epoch comes from a ``torch.Generator`` seeded from
``(seed, epoch)``; the neighbors of batch ``i`` use ``batch_seed(seed, epoch, i)``, the same
seed the distributed runtime uses, so a run is reproducible whether or not it is partitioned.

Prefetching (``prefetch > 0``) runs the sampler and the feature slicing in one background thread
and holds at most ``prefetch`` finished batches. Torch ops release the GIL, so sampling overlaps
the training step. Breaking out of the loop, or dropping the iterator, stops the thread cleanly.

Shape legend: ``N`` nodes, ``B`` seeds per batch, ``S`` input (seed) nodes of an epoch.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from gnnsys.loader.graph_view import GraphView, to_pyg_data
from gnnsys.sampler import NeighborSampler, batch_seed

__all__ = ["NeighborLoader"]

logger = logging.getLogger(__name__)

_IGNORED_KWARGS = frozenset({"num_workers", "persistent_workers", "pin_memory"})
"""torch DataLoader options PyG code passes; sampling here is in-process, so they do nothing."""
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
        prefetch: Batches prepared ahead in a background thread (0: none).
        replace: Sample with replacement.
        **kwargs: ``num_workers``, ``persistent_workers`` and ``pin_memory`` are accepted for
            drop-in compatibility and ignored.

    Raises:
        TypeError: Unknown keyword argument, or ``data``/``input_nodes`` of the wrong type.
        ValueError: Bad fanouts, ``batch_size < 1``, ``prefetch < 0``, out-of-range input nodes.
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
        prefetch: int = 0,
        replace: bool = False,
        **kwargs: Any,
    ) -> None:
        unknown = set(kwargs) - _IGNORED_KWARGS
        if unknown:
            raise TypeError(f"NeighborLoader got unexpected arguments {sorted(unknown)}")
        if batch_size < 1 or prefetch < 0:
            raise ValueError(
                f"need batch_size >= 1 and prefetch >= 0, got {batch_size}, {prefetch}"
            )
        self.view = GraphView.of(data)
        self.data = data
        """The input graph; PyG code may delete attributes it does not need per batch."""
        config = NeighborSampler.Config(fanouts=tuple(num_neighbors), replace=replace)
        self.sampler = NeighborSampler(config, source=self.view.source)
        self.input_gid = _input_gid(input_nodes, self.view.num_nodes)
        self.batch_size, self.shuffle, self.drop_last = batch_size, shuffle, drop_last
        self.prefetch = prefetch
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
        return _Prefetcher(self, chunks, epoch)


class _Failure:
    """Carries an exception from the producer thread to the consumer."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


_DONE = object()


class _Prefetcher(Iterator[Any]):
    """Iterator fed by one daemon thread; ``close()`` (or garbage collection) stops it."""

    def __init__(self, loader: NeighborLoader, chunks: list[Tensor], epoch: int) -> None:
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=loader.prefetch)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._produce, args=(loader, chunks, epoch), daemon=True, name="gnnsys-prefetch"
        )
        self._thread.start()

    def _put(self, item: Any) -> bool:
        """Put unless stopped; waits in short slices so ``close`` is never blocked for long."""
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _produce(self, loader: NeighborLoader, chunks: list[Tensor], epoch: int) -> None:
        try:
            for i, chunk in enumerate(chunks):
                if not self._put(loader.make_batch(chunk, epoch=epoch, batch_index=i)):
                    return
            self._put(_DONE)
        except BaseException as error:  # process boundary: hand it to the consumer, who re-raises
            self._put(_Failure(error))

    def __next__(self) -> Any:
        if self._stop.is_set():
            raise StopIteration
        item = self._queue.get()
        if item is _DONE:
            self.close()
            raise StopIteration
        if isinstance(item, _Failure):
            self.close()
            raise item.error
        return item

    def close(self) -> None:
        """Stop the producer and wait for it (at most one batch's sampling time)."""
        self._stop.set()
        while True:  # drain so a producer blocked in put() sees the stop flag
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        if self._thread is not threading.current_thread():
            self._thread.join()
        logger.debug("prefetch thread stopped")

    def __del__(self) -> None:
        self.close()
