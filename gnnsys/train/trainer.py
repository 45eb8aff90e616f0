"""Per-worker training loop in pure torch: sample -> fetch -> forward/backward -> sync -> step.

No Ray here. Distribution enters through three injected handles: the ``Sampler`` (whose
``NeighborSource`` may route to remote owners), the ``FeatureSource`` (likewise) and the
:class:`GradSync` (a gloo allreduce, or nothing for one process). The same loop therefore runs
single-process in tests and inside each Ray worker.

Batch schedule: the coordinator fixes ``num_batches`` for every rank (so the allreduce in each
step has a partner on every rank and never hangs); rank ``r`` splits a seeded permutation of its
own train seeds into that many near-equal batches (``torch.tensor_split``), so every seed is seen
exactly once per epoch without padding or truncation. ``num_batches`` comes from every rank's
:class:`BatchPlan` (:func:`steps_per_epoch`): with the ``global`` schedule (default) it is the
1-part run's count for the global batch ``batch_size * P``, so a rank with more seeds takes
bigger batches and P parts take the same steps as one part however unequal the parts' seeds;
with ``max`` it is the largest rank's count, so no rank's batch exceeds ``batch_size`` (less
memory on an unbalanced partition, but more, smaller steps than one part).

Gradient weighting: ranks own unequal numbers of seeds (METIS balances nodes, not train nodes),
so a small rank's batches are smaller. Each rank backpropagates its loss *summed* over its
batch and the allreduce carries the batch size beside the gradient; the step's gradient is the
sum over ranks divided by the step's seeds over all ranks, the mean over every seed of the step.
P parts therefore equal one part in expectation, whatever the split (DDP's ``1/P`` per rank
would weigh a seed of a rank with a third of the seeds three times as much).

Shape legend: ``B`` seeds in a batch, ``N`` sampled nodes, ``F`` features, ``C`` classes.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional

from gnnsys.cache.base import DistinctFeatureSource, FeatureSource
from gnnsys.models import BlockModel
from gnnsys.sampler.base import Sampler
from gnnsys.train.device import StepDevice, StepInputs, to_host
from gnnsys.train.pipeline import Prefetcher, PreparedBatch, StageClock
from gnnsys.types import SampledSubgraph

if TYPE_CHECKING:
    from gnnsys.train.layer0.base import FirstLayer

__all__ = [
    "SCHEDULES",
    "BatchPlan",
    "EpochStats",
    "GradSync",
    "LocalSync",
    "Trainer",
    "batch_seed_for",
    "epoch_batches",
    "steps_per_epoch",
]

log = logging.getLogger(__name__)


def _mix(*values: int) -> int:
    """A 63-bit seed from integers (SeedSequence mixing: stable across numpy versions)."""
    state = np.random.SeedSequence([v & 0xFFFFFFFF for v in values]).generate_state(2)
    return int((int(state[0]) << 31) ^ int(state[1])) & ((1 << 63) - 1)


def batch_seed_for(seed: int, rank: int, epoch: int, batch_index: int) -> int:
    """The sampler seed of one batch: a function of the run seed and the batch's coordinates only.

    Both topologies use it, so with the sampler's randomness contract they draw identical batches.
    """
    return _mix(seed, 0x5EED, rank, epoch, batch_index)


def epoch_batches(
    num_seeds: int, num_batches: int, *, seed: int, rank: int, epoch: int
) -> list[Tensor]:
    """Positions into a rank's train seeds for each of ``num_batches`` batches of one epoch.

    Args:
        num_seeds: Train seeds this rank owns.
        num_batches: Batches every rank runs this epoch (same on all ranks).
        seed: Run seed.
        rank: This worker's rank.
        epoch: Epoch index (0-based).

    Returns:
        ``num_batches`` int64 tensors; together a permutation of ``range(num_seeds)``. Some are
        empty when ``num_seeds < num_batches`` (that rank then contributes zero gradients).
    """
    if num_batches < 1:
        raise ValueError(f"num_batches={num_batches}; every rank needs >= 1 batch per epoch")
    gen = torch.Generator().manual_seed(_mix(seed, 0xBA7C, rank, epoch))
    perm = torch.randperm(num_seeds, generator=gen)
    return list(torch.tensor_split(perm, num_batches))


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


class LocalSync:
    """The single-process :class:`GradSync`: nothing to average."""

    def allreduce_mean_(self, flat: Tensor) -> None:
        """Leave ``flat`` unchanged."""
        del flat


@dataclass(frozen=True, slots=True)
class EpochStats:
    """What one rank did in one epoch.

    Attributes:
        loss_sum: Sum over seeds of the cross-entropy (divide by ``num_seeds``).
        num_correct: Train seeds predicted correctly (in training mode, dropout on).
        num_seeds: Seeds trained on.
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
    threads: int = 1
    device: str = "cpu"
    peak_device_bytes: int = 0


class Trainer:
    """Trains a model on one rank's seeds; see the module docstring for the schedule."""

    @dataclass(frozen=True, kw_only=True, slots=True)
    class Config:
        """Optimisation settings (the model and sampler have their own configs)."""

        lr: float = 0.003
        """Adam learning rate."""
        weight_decay: float = 0.0
        """Adam weight decay (L2 penalty; ``--weight-decay``), e.g. ``5e-4`` for GCN on
        Planetoid (Kipf & Welling)."""
        batch_size: int = 1024
        """Seeds per batch per worker (the global batch is ``batch_size * P``)."""
        schedule: str = "global"
        """``global``: every epoch has the 1-part run's steps for the global batch (ranks with
        more seeds take bigger batches); ``max``: the largest rank's steps at ``batch_size``
        (no batch above ``batch_size``; more, smaller steps on unbalanced parts)."""
        seed: int = 0
        """Run seed: fixes the seed order, every sampled batch and the model's initial weights."""
        prefetch: int = 2
        """Batches prepared (sampled, fetched) ahead of the step on producer threads
        (``--prefetch``; 0: the synchronous step). Results are identical at every depth."""

        def __post_init__(self) -> None:
            if not self.lr > 0:
                raise ValueError(f"lr={self.lr}; choose a positive learning rate")
            if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
                raise ValueError(
                    f"weight_decay={self.weight_decay}; choose a finite value >= 0, e.g. 5e-4"
                )
            if self.batch_size < 1:
                raise ValueError(f"batch_size={self.batch_size}; choose batch_size >= 1")
            if self.prefetch < 0:
                raise ValueError(
                    f"prefetch={self.prefetch}; choose 0 (synchronous) or more batches ahead"
                )
            if self.schedule not in SCHEDULES:
                raise ValueError(
                    f"schedule={self.schedule!r}; choose one of {', '.join(SCHEDULES)} "
                    "(--batch-schedule)"
                )

    def __init__(
        self,
        config: Config,
        *,
        model: nn.Module,
        sampler: Sampler,
        features: FeatureSource,
        train_gid: Tensor,
        train_y: Tensor,
        rank: int = 0,
        sync: GradSync | None = None,
        rng_lock: threading.Lock | None = None,
        first_layer: FirstLayer | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        if train_gid.shape != train_y.shape:
            raise ValueError(
                f"train_gid {tuple(train_gid.shape)} != train_y {tuple(train_y.shape)}"
            )
        self.config, self.model, self.sampler, self.features = config, model, sampler, features
        self.stage_threads = 2  # producer threads when prefetching: 1 or 2 (see _feed)
        # a sampled n_id never repeats a node: sources that can use that do
        self._fetch_nodes: Callable[[Tensor], Tensor] = features.fetch
        if isinstance(features, DistinctFeatureSource):
            self._fetch_nodes = features.fetch_distinct
        self.train_gid, self.train_y, self.rank = train_gid.long(), train_y.long(), rank
        self.sync: GradSync = sync if sync is not None else LocalSync()
        self.first_layer = first_layer  # owner sums or fused dequant of layer 0, or None
        if first_layer is not None and not isinstance(self.encoder(), BlockModel):
            raise TypeError(f"first_layer needs a gnnsys.models.BlockModel, got {type(model)}")
        self._rng_lock = rng_lock  # shared by in-process ranks; None: this process's RNG
        self.device = StepDevice(device)  # the transfer stage's copies (no-ops on CPU)
        model.to(self.device.device)  # before the optimizer: its state follows the parameters
        self._rng_state = torch.get_rng_state()
        self._device_rng = self.device.rng_state()  # dropout on a GPU draws from its own RNG
        self._host_model: nn.Module | None = None  # see host_model
        self.step_weight = 0.0  # the last step's mean weight over ranks (see _sync_grads)
        self.optimizer = torch.optim.Adam(
            model.parameters(), lr=config.lr, weight_decay=config.weight_decay
        )

    def encoder(self) -> nn.Module:
        """The module that runs over the blocks (the model itself; a link model's encoder)."""
        return self.model

    def host_model(self) -> nn.Module:
        """The model on the host with the current weights, for evaluation and inference.

        The model itself on CPU. On another device, one host copy, refreshed in place on each
        call (its modules stay the same objects, so an evaluator built over them stays valid);
        the copy costs one device-to-host transfer of the weights per evaluation.
        """
        if self.device.device.type == "cpu":
            return self.model
        if self._host_model is None:
            self._host_model = copy.deepcopy(self.model).to("cpu")
        else:
            self._host_model.load_state_dict(self.model.state_dict())
        return self._host_model

    def batch_plan(self) -> BatchPlan:
        """This rank's items and batch settings (the group's :func:`steps_per_epoch` input)."""
        return BatchPlan(self._num_items(), self.config.batch_size, self.config.schedule)

    def _num_items(self) -> int:
        """Train items of this rank: its seed nodes."""
        return int(self.train_gid.numel())

    def train_epoch(
        self, epoch: int, num_batches: int, hook: Callable[[int], None] | None = None
    ) -> EpochStats:
        """Run ``num_batches`` steps of ``epoch``; ``hook(batch_index)`` runs before each step.

        Batches are prepared (sampled, fetched) ``config.prefetch`` ahead on stage threads
        (``gnnsys.train.pipeline``); the result is the same at every depth.
        """
        self.model.train()
        clock = StageClock()
        loss_sum, correct, count = 0.0, 0, 0
        with self._feed(epoch, num_batches) as feed:
            for batch in feed:
                clock.absorb(batch)
                if hook is not None:
                    hook(batch.index)
                step = self._step(batch, clock)
                loss_sum += step[0]
                correct += step[1]
                count += int(batch.pos_B.numel())
            clock.add("stall", feed.stall)
        return EpochStats(
            loss_sum=loss_sum,
            num_correct=correct,
            num_seeds=count,
            seconds=clock.finish(),
            threads=torch.get_num_threads(),
            device=str(self.device.device),
            peak_device_bytes=self.device.peak_bytes(),
        )

    def _batches(self, epoch: int, num_batches: int) -> list[Tensor]:
        """This rank's seed positions per batch of ``epoch`` (see ``epoch_batches``)."""
        return epoch_batches(
            self._num_items(),
            num_batches,
            seed=self.config.seed,
            rank=self.rank,
            epoch=epoch,
        )

    def _feed(self, epoch: int, num_batches: int) -> Prefetcher[PreparedBatch]:
        """The epoch's batches, prepared ``config.prefetch`` ahead: the one way batches form.

        Two stages (``gnnsys.train.pipeline``): sampling, then fetching and transfer, on one
        producer thread each, or both on one (``stage_threads == 1``); the same batches in
        the same order either way.
        """
        batches = self._batches(epoch, num_batches)
        seed, rank = self.config.seed, self.rank

        def sample(b: int) -> PreparedBatch:
            return self._sample_stage(b, batches[b], batch_seed_for(seed, rank, epoch, b))

        def prepare(b: int) -> PreparedBatch:
            return self._fetch_stage(sample(b))

        if self.stage_threads == 1:
            return Prefetcher(
                prepare, len(batches), self.config.prefetch, name=f"gnnsys-prefetch-{rank}"
            )
        return Prefetcher(
            sample,
            len(batches),
            self.config.prefetch,
            then=(self._fetch_stage,),
            name=f"gnnsys-prefetch-{rank}",
        )

    def replay_epoch(self, epoch: int, num_batches: int) -> EpochStats:
        """The data path of ``train_epoch`` without the model: sample and fetch every batch.

        Same batches, seeds, feature source, cache and owner calls as training, so the ledger
        and cache counters equal a training epoch's exactly (sampling and fetching never depend
        on the weights); ``gnnsys bench comm`` uses it to measure traffic per configuration.
        """
        clock = StageClock()
        count = 0
        with self._feed(epoch, num_batches) as feed:
            for batch in feed:
                clock.absorb(batch)
                if batch.sub is not None:
                    self._late_inputs(batch, clock)
                count += int(batch.pos_B.numel())
            clock.add("stall", feed.stall)
        return EpochStats(
            loss_sum=0.0,
            num_correct=0,
            num_seeds=count,
            seconds=clock.finish(),
            threads=torch.get_num_threads(),
            device=str(self.device.device),
            peak_device_bytes=self.device.peak_bytes(),
        )

    def _seed_gid(self, pos_B: Tensor, batch_seed: int) -> Tensor:
        """The distinct seed gids of the batch at ``pos_B`` (its train nodes here)."""
        del batch_seed  # a node batch's seeds are its positions' nodes
        return self.train_gid[pos_B]

    def _sample(self, pos_B: Tensor, batch_seed: int) -> tuple[Any, SampledSubgraph]:
        """The sample stage: ``(extra, subgraph)`` of a non-empty batch (no extra here)."""
        return None, self.sampler.sample(self._seed_gid(pos_B, batch_seed), seed=batch_seed)

    def _inputs_need_weights(self) -> bool:
        """Whether layer 0's inputs depend on the weights (then the compute loop fetches them)."""
        return False

    def _sample_stage(self, index: int, pos_B: Tensor, batch_seed: int) -> PreparedBatch:
        """The sample stage of one batch (nothing to sample for an empty one)."""
        batch = PreparedBatch(index, pos_B, batch_seed)
        if pos_B.numel():
            t0 = time.perf_counter()
            batch.extra, batch.sub = self._sample(pos_B, batch_seed)
            batch.seconds["sample"] = time.perf_counter() - t0
        return batch

    def _fetch_stage(self, batch: PreparedBatch) -> PreparedBatch:
        """The fetch and transfer stages: layer 0's inputs, unless they need the weights."""
        if batch.sub is None:
            return batch
        t1 = time.perf_counter()
        if not self._inputs_need_weights():
            with self.device.producing():  # a device cache's reads and writes: the side stream
                batch.inputs = self._inputs(batch.sub)
            t2 = time.perf_counter()
            batch.seconds["fetch"] = t2 - t1
            t1 = t2
            self._transfer(batch)
        batch.seconds["transfer"] = time.perf_counter() - t1
        return batch

    def _transfer(self, batch: PreparedBatch) -> None:
        """Start copying a prepared batch's inputs to the step's device (a no-op on CPU)."""
        if batch.inputs is not None:
            batch.inputs = self.device.copy(batch.inputs)

    def _late_inputs(self, batch: PreparedBatch, clock: StageClock) -> Callable[[], Tensor]:
        """The batch's forward pass, fetching its inputs now if they depend on the weights."""
        if batch.inputs is None:
            start = time.perf_counter()
            with self.device.producing():
                batch.inputs = self._inputs(batch.sub)
            t1 = time.perf_counter()
            clock.add("fetch", t1 - start)
            self._transfer(batch)
            clock.add("transfer", time.perf_counter() - t1)
        inputs = batch.inputs
        return lambda: self.device.forward(inputs)

    def _step(self, batch: PreparedBatch, clock: StageClock) -> tuple[float, int]:
        """One optimisation step; returns (summed loss, correct predictions)."""
        self.optimizer.zero_grad(set_to_none=False)
        loss_sum, correct = 0.0, 0
        if batch.sub is not None:
            loss_sum, correct = self._forward_backward(batch, clock)
        t3 = time.perf_counter()
        self._sync_grads(self._grad_weight(batch.pos_B))
        clock.add("sync", time.perf_counter() - t3)
        t4 = time.perf_counter()
        self.optimizer.step()
        clock.add("compute", time.perf_counter() - t4)
        return loss_sum, correct

    def _forward_backward(self, batch: PreparedBatch, clock: StageClock) -> tuple[float, int]:
        """Forward and backward one non-empty prepared batch; (summed loss, correct)."""
        forward = self._late_inputs(batch, clock)
        t2 = time.perf_counter()
        y_B = self.device.put(self.train_y[batch.pos_B])  # B labels: a small synchronous copy
        with self._own_rng():
            logits_BC = forward()[: batch.sub.batch_size]
            # summed over seeds: _sync_grads divides by the step's seeds over all ranks
            loss = functional.cross_entropy(logits_BC, y_B, reduction="sum")
            torch.autograd.backward(loss)
        # float() and int() wait for the device: the step's kernels count as its compute time
        out = float(loss.detach()), int((logits_BC.argmax(-1) == y_B).sum())
        clock.add("compute", time.perf_counter() - t2)
        return out

    @contextlib.contextmanager
    def _own_rng(self) -> Iterator[None]:
        """Run the random part of a step (dropout) on this rank's own torch RNG stream.

        A process-wide RNG is shared by the trainer threads of the in-process executor; with a
        ``rng_lock`` each rank swaps its own state in under the lock (serialising its forward
        and backward), so a rank draws the same masks as it would alone in a Ray worker.
        """
        if self._rng_lock is None:
            yield
            return
        with self._rng_lock:
            torch.set_rng_state(self._rng_state)
            self.device.set_rng_state(self._device_rng)
            try:
                yield
            finally:
                self._rng_state = torch.get_rng_state()
                self._device_rng = self.device.rng_state()

    def _inputs(self, sub: SampledSubgraph) -> StepInputs:
        """Fetch layer 0's inputs (through ``first_layer`` when set), with the forward pass.

        With a ``first_layer``, what it fetched is finished on the step's device by the compute
        loop (the fused dequantizing aggregation sums the halo rows there, still encoded).
        """
        if self.first_layer is None:
            x_NF = self._fetch_nodes(sub.n_id)
            return StepInputs((x_NF, sub.blocks), lambda x, blocks: self.encoder()(x, blocks))
        model = cast(BlockModel, self.encoder())
        first_layer = self.first_layer
        fetched = first_layer.prepare(model.layers[0], sub)  # fetches through its source

        def run(fetched: Any, blocks: tuple[Any, ...]) -> Tensor:
            first = first_layer.finish(fetched)
            return model.forward_from_first_agg(first.agg_MF, first.x_dst_MF, blocks)

        return StepInputs((fetched, sub.blocks), run)

    def _grad_weight(self, pos_B: Tensor) -> float:
        """This rank's weight in the step's gradient average: its batch's seeds.

        A subclass that overrides it must backpropagate its loss *summed* over the weighted
        items (see :meth:`_sync_grads`); the link trainer weighs by positive links.
        """
        return float(pos_B.numel())

    def _sync_grads(self, weight: float) -> None:
        """Average gradients over ranks in one flat buffer (one collective per step).

        The buffer carries ``weight`` as one more element and each rank's gradient (of a
        summed loss) is divided by the weights' sum: ``g = sum_r g_r / sum_r w_r``, the gradient
        of the mean over every rank's items, however unequal the ranks' batches. The ranks'
        mean weight is kept in ``step_weight`` (the hetero trainer scales its sparse step by it).
        """
        params = [p for p in self.model.parameters() if p.requires_grad]
        for p in params:
            if p.grad is None:  # a parameter unused in this batch still joins the collective
                p.grad = torch.zeros_like(p)
        grads = [p.grad for p in params if p.grad is not None]
        flat = torch.cat([*(g.reshape(-1) for g in grads), grads[0].new_tensor([weight])])
        self.sync.allreduce_mean_(flat)
        self.step_weight = float(flat[-1])  # mean of weights over ranks
        # mean of sums / mean of weights = sum of sums / sum of weights (no items: zeros stay)
        flat = flat[:-1] / flat[-1] if self.step_weight > 0 else flat[:-1]
        offset = 0
        for g in grads:
            g.copy_(flat[offset : offset + g.numel()].view_as(g))
            offset += g.numel()

    def state(self) -> dict[str, Any]:
        """Copies of the model and optimizer ``state_dict`` plus this rank's torch RNG state."""
        rng = {"torch": self._rng_state if self._rng_lock is not None else torch.get_rng_state()}
        device_rng = self._device_rng if self._rng_lock is not None else self.device.rng_state()
        if device_rng is not None:  # restored only on the same kind of device
            rng[self.device.device.type] = device_rng
        return {  # CPU copies whatever the device: a checkpoint resumes on any device
            "model": to_host(self.model.state_dict()),
            "optimizer": to_host(self.optimizer.state_dict()),  # Adam mutates in place
            "rng": to_host(rng),
        }

    def load_state(
        self, model_state: dict[str, Any], optimizer_state: dict[str, Any], rng: dict[str, Any]
    ) -> None:
        """Restore what :meth:`state` returned (RNG included, so dropout masks repeat)."""
        self.model.load_state_dict(model_state)
        # A copy: torch keeps the given state tensors as its own, and the in-process executor
        # hands every rank the same checkpoint dict, so the ranks' Adam moments were shared.
        self.optimizer.load_state_dict(copy.deepcopy(optimizer_state))
        # torch restores each group's hyperparameters too; the run's config wins, so a resume
        # that allows a new lr or weight decay (--allow-change) trains with it.
        for group in self.optimizer.param_groups:
            group["lr"], group["weight_decay"] = self.config.lr, self.config.weight_decay
        self._rng_state = rng["torch"]
        self._device_rng = rng.get(self.device.device.type, self._device_rng)
        if self._rng_lock is None:
            torch.set_rng_state(rng["torch"])
            self.device.set_rng_state(self._device_rng)
