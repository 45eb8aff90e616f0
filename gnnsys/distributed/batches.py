"""One rank's batches of an epoch: the data path ``DistNeighborLoader`` and ``gnnsys train`` share.

Both form their batches here and nowhere else, so a user's loop over
:class:`~gnnsys.distributed.DistNeighborLoader` sees the seeds, sampled subgraphs, owner reads,
halo cache and codec rows that ``gnnsys train`` steps on (its ``Trainer`` and ``LinkTrainer``
call the two functions below; only the last stage differs: the loader joins the rows into PyG
``Data``/``HeteroData``, the trainer builds its model's block inputs and copies them to the
step's device).

* :func:`epoch_positions`: which of the rank's items each batch of the epoch holds. Shuffled,
  every item of the graph gets a key from its identity and ``(seed, epoch)`` only
  (``gnnsys.train.schedule.item_keys``), one global order that every rank restricts to its own
  items with no collective. With the ``global`` schedule batch ``b`` holds the items whose key
  falls in the ``b``-th of ``num_batches`` equal key ranges, so the union over the ranks of
  batch ``b`` is a one-part run's batch ``b`` however the graph is partitioned (a rank's batch
  size varies around its share, as under a global ``DistributedSampler``); ``max`` and
  ``drop_last`` split the rank's share of that order in turn.
* :func:`epoch_feed`: the epoch as a :class:`~gnnsys.prefetch.Prefetcher` of
  :class:`~gnnsys.train.pipeline.PreparedBatch`: the sample stage (the seed kind's
  ``sample(positions, batch_seed)``, seeded by ``batch_seed_for(seed, rank, epoch, b)``), then
  the client's stages, ``prefetch`` batches ahead of its loop on stage threads.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from gnnsys.prefetch import Prefetcher
from gnnsys.train.pipeline import PreparedBatch
from gnnsys.train.schedule import batch_seed_for, global_windows, item_keys

__all__ = ["epoch_feed", "epoch_positions"]

Sample = Callable[[Tensor, int], tuple[Any, Any]]
"""A seed kind's sample stage: ``(extra, subgraph)`` of the items at the positions, seeded."""


def epoch_positions(
    ids: Tensor,
    num_batches: int,
    *,
    seed: int,
    epoch: int,
    shuffle: bool = True,
    schedule: str = "global",
    batch_size: int | None = None,
) -> list[Tensor]:
    """Positions into a rank's items for each of the epoch's ``num_batches`` batches.

    Args:
        ids: The rank's items' global identities: ``[n]`` node ids or ``[2, n]`` a link's
            endpoints (the keys of the global order).
        num_batches: Batches every rank yields this epoch (the same on every rank).
        seed: Run seed.
        epoch: Epoch index.
        shuffle: The epoch's global order (else the items' order, split in turn).
        schedule: ``global`` (key windows) or ``max`` (the rank's share split in turn).
        batch_size: ``drop_last``: exactly ``batch_size`` items per batch, the rest skipped
            (``None``: every item once, in near-equal batches).

    Returns:
        ``num_batches`` int64 tensors; without ``batch_size`` together a permutation of
        ``range(n)`` (some empty when a rank holds fewer items than batches).
    """
    if num_batches < 1:
        raise ValueError(f"num_batches={num_batches}; every rank needs >= 1 batch per epoch")
    num = int(ids.shape[-1])
    if not shuffle:
        order = torch.arange(num)
    else:
        keys = item_keys(ids, seed=seed, epoch=epoch)
        if batch_size is None and schedule == "global":
            return global_windows(keys, num_batches)
        order = torch.from_numpy(np.argsort(keys, kind="stable").astype(np.int64))
    if batch_size is not None:
        return list(order[: num_batches * batch_size].view(num_batches, batch_size))
    return list(torch.tensor_split(order, num_batches))


def _sample_stage(index: int, pos: Tensor, batch_seed: int, sample: Sample) -> PreparedBatch:
    """The sample stage of one batch, timed (nothing to sample for an empty one)."""
    batch = PreparedBatch(index, pos, batch_seed)
    if pos.numel():
        t0 = time.perf_counter()
        batch.extra, batch.sub = sample(pos, batch_seed)
        batch.seconds["sample"] = time.perf_counter() - t0
    return batch


def epoch_feed(
    positions: list[Tensor],
    sample: Sample,
    *,
    seed: int,
    rank: int,
    epoch: int,
    prefetch: int,
    then: Sequence[Callable[[Any], Any]] = (),
    one_thread: bool = False,
    workers: int = 1,
    name: str = "gnnsys-prefetch",
) -> Prefetcher[Any]:
    """The epoch's batches, prepared ``prefetch`` ahead: the one way batches form.

    Args:
        positions: Per batch, positions into the rank's items (:func:`epoch_positions`).
        sample: The seed kind's sample stage.
        seed: Run seed (with ``rank``, ``epoch`` and the batch index: the sampler seed).
        rank: This rank.
        epoch: Epoch index.
        prefetch: Batches prepared ahead (0: each made when asked for).
        then: The client's later stages, each taking the previous stage's item (first: a
            :class:`PreparedBatch`).
        one_thread: Run ``then`` on the sample stage's thread (in-process reads: both stages
            are CPU-bound, one thread contends less with the loop); else a thread per stage.
        workers: Threads of the sample stage (``> 1`` only when ``then`` is on its own thread).
        name: Prefix of the stage threads' names.
    """

    def first(b: int) -> Any:
        item: Any = _sample_stage(b, positions[b], batch_seed_for(seed, rank, epoch, b), sample)
        if one_thread:
            for stage in then:
                item = stage(item)
        return item

    later = () if one_thread else tuple(then)
    return Prefetcher(first, len(positions), prefetch, then=later, workers=workers, name=name)
