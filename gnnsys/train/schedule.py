"""The batch schedule of a run and the records its ranks exchange: seeds, steps, gradients.

Batch schedule: the coordinator fixes ``num_batches`` for every rank (so the allreduce in each
step has a partner on every rank and never hangs); rank ``r`` takes its share of one global
order of the graph's train items (:func:`item_keys`, :func:`global_windows`; the positions per
batch come from ``gnnsys.distributed.batches.epoch_positions``, ``DistNeighborLoader``'s), so
every seed is seen exactly once per epoch without padding or truncation. ``num_batches`` comes
from every rank's :class:`BatchPlan` (:func:`steps_per_epoch`): with the ``global`` schedule
(default) it is the 1-part run's count for the global batch ``batch_size * P``, so a rank with
more seeds takes bigger batches and P parts take the same steps as one part however unequal
the parts' seeds (batch ``b`` of P parts holds the very seeds of the 1-part run's batch ``b``);
with ``max`` it is the largest rank's count, so no rank's batch exceeds ``batch_size`` (less
memory on an unbalanced partition, but more, smaller steps than one part).

Gradient weighting: ranks own unequal numbers of seeds (METIS balances nodes, not train nodes),
so a small rank's batches are smaller. Each rank backpropagates its loss *summed* over its
batch and the allreduce carries the batch size beside the gradient; the step's gradient is the
sum over ranks divided by the step's seeds over all ranks, the mean over every seed of the step.
P parts therefore equal one part in expectation, whatever the split (DDP's ``1/P`` per rank
would weigh a seed of a rank with a third of the seeds three times as much).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "SCHEDULES",
    "BatchPlan",
    "EpochStats",
    "GatherSync",
    "GradSync",
    "LocalSync",
    "batch_seed_for",
    "global_windows",
    "item_keys",
    "mix_seed",
    "sampled_edges",
    "steps_per_epoch",
]


def mix_seed(*values: int) -> int:
    """A 63-bit seed from integers (SeedSequence mixing: stable across numpy versions)."""
    state = np.random.SeedSequence([v & 0xFFFFFFFF for v in values]).generate_state(2)
    return int((int(state[0]) << 31) ^ int(state[1])) & ((1 << 63) - 1)


def batch_seed_for(seed: int, rank: int, epoch: int, batch_index: int) -> int:
    """The sampler seed of one batch: a function of the run seed and the batch's coordinates only.

    Both topologies use it, so with the sampler's randomness contract they draw identical batches.
    """
    return mix_seed(seed, 0x5EED, rank, epoch, batch_index)


_GOLDEN, _MIX1, _MIX2 = (np.uint64(c) for c in
                         (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB))  # fmt: skip


def _splitmix64(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser, element-wise on ``uint64`` (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = z + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
    out: np.ndarray = z ^ (z >> np.uint64(31))
    return out


def item_keys(ids: Tensor, *, seed: int, epoch: int) -> np.ndarray:
    """One epoch's sort key per item, from the item's global identity and the seed only.

    Args:
        ids: ``[n]`` global node ids, or ``[k, n]`` (a link: its endpoints' ids).
        seed: Run seed.
        epoch: Epoch index.

    Returns:
        ``[n]`` ``uint64`` keys: the same item gets the same key on every rank and in every
        partitioning, so sorting by key is one global order of the epoch, restricted to a rank.
    """
    rows = np.atleast_2d(np.asarray(ids.numpy(), dtype=np.int64)).astype(np.uint64)
    key = np.full(rows.shape[1], np.uint64(mix_seed(seed, 0x6C0B, epoch)), dtype=np.uint64)
    for row in rows:
        key = _splitmix64(key ^ row)
    return key


def global_windows(keys: np.ndarray, num_batches: int) -> list[Tensor]:
    """Positions per batch of a global shuffle, in key order.

    Batch ``b`` holds the items whose key falls in the ``b``-th of ``num_batches`` equal key
    ranges. Every rank computes its part with no collective, and the union over ranks of batch
    ``b`` is the one-part run's batch ``b`` (the same seeds in the same order, whatever the
    partition); a rank's batch size varies around its share (binomially, as a global
    shuffle's would).
    """
    if num_batches < 1:
        raise ValueError(f"num_batches={num_batches}; every rank needs >= 1 batch per epoch")
    order = np.argsort(keys, kind="stable")
    window = ((keys[order] >> np.uint64(32)) * np.uint64(num_batches)) >> np.uint64(32)
    counts = np.bincount(window.astype(np.int64), minlength=num_batches)
    return list(torch.split(torch.from_numpy(order.astype(np.int64)), counts.tolist()))


SCHEDULES = ("global", "max")
"""Batch schedules (``Trainer.Config.schedule``, ``--batch-schedule``); see the module docstring."""


@dataclass(frozen=True, slots=True)
class BatchPlan:
    """What one rank brings to the epoch's batch count.

    Attributes:
        items: Train items the rank owns (seed nodes, or positive links).
        batch_size: Its ``Trainer.Config.batch_size``.
        schedule: Its ``Trainer.Config.schedule`` (one of :data:`SCHEDULES`).
    """

    items: int
    batch_size: int
    schedule: str


def steps_per_epoch(plans: list[BatchPlan]) -> int:
    """Batches every rank runs per epoch (at least 1).

    ``global``: ``ceil(sum items / sum batch_size)``, the 1-part count for the global batch;
    ``max``: the largest ``ceil(items / batch_size)`` (no rank's batch exceeds its size).

    Raises:
        ValueError: No plans, or ranks that disagree on the schedule.
    """
    if not plans:
        raise ValueError("no batch plans: a run has at least one rank")
    schedules = {p.schedule for p in plans}
    if len(schedules) != 1:
        raise ValueError(f"ranks disagree on the batch schedule ({sorted(schedules)}); one run")
    if schedules == {"max"}:
        return max(1, *(-(-p.items // p.batch_size) for p in plans))
    items, size = sum(p.items for p in plans), sum(p.batch_size for p in plans)
    return max(1, -(-items // size))


class GradSync(Protocol):
    """Sums a flat gradient buffer over every rank in place and divides by the world size."""

    def allreduce_mean_(self, flat: Tensor) -> None:
        """Average ``flat`` over ranks, in place (a collective: every rank must call it)."""
        ...


class GatherSync(GradSync, Protocol):
    """The dense allreduce plus a variable-length ``all_gather`` (gloo, or threads)."""

    def all_gather(self, flat: Tensor) -> list[Tensor]:
        """Every rank's 1-D ``flat`` (lengths may differ), in rank order (a collective)."""
        ...


class LocalSync:
    """The single-process :class:`GradSync`: nothing to average."""

    def allreduce_mean_(self, flat: Tensor) -> None:
        """Leave ``flat`` unchanged."""
        del flat


def sampled_edges(sub: Any) -> int:
    """Edges of a sampled batch's blocks, every layer and relation (0 for an empty batch)."""
    if sub is None:
        return 0
    return sum(int(block.col.numel()) for layer in sub.blocks for block in layer.values())


@dataclass(frozen=True, slots=True)
class EpochStats:
    """What one rank did in one epoch.

    Attributes:
        loss_sum: Sum over seeds of the cross-entropy (divide by ``num_seeds``).
        num_correct: Train seeds predicted correctly (in training mode, dropout on).
        num_seeds: Seeds trained on.
        sampled_edges: Edges of the epoch's sampled blocks (the step's work with the rows).
        seconds: Busy seconds per stage (``sample``, ``fetch``, ``transfer``, ``compute``,
            ``sync``), the compute loop's ``stall``, its wall time ``loop`` and ``overlap``
            (stage seconds / ``loop``; see ``gnnsys.train.pipeline.StageClock``).
        threads: torch intra-op threads the step computed with (``gnnsys.train.threads``).
        device: The step's device (``cpu``, ``cuda:0``).
        peak_device_bytes: Peak memory allocated on that device so far (0 on CPU).
    """

    loss_sum: float
    num_correct: int
    num_seeds: int
    seconds: dict[str, float]
    sampled_edges: int = 0
    threads: int = 1
    device: str = "cpu"
    peak_device_bytes: int = 0
