"""Per-worker training loop in pure torch: sample -> fetch -> forward/backward -> sync -> step.

No Ray here. Distribution enters through injected handles: the :class:`BoundSampler` (whose
per-relation sources may route to remote owners), the :class:`PerTypeInputs` (one row source per
node type: features through their caches and codecs, or owner-held embedding rows) and the
:class:`GatherSync` (a gloo allreduce and all_gather, or nothing for one process). The same loop
therefore runs single-process in tests and inside each Ray worker. Every graph is typed here: a
homogeneous one is the one-type case (``gnnsys.types.ONE_TYPE``).

One step: the batch's typed subgraph of the input type's train seeds, every type's rows, the
seed type's logits, the loss summed over the batch, one flat allreduce of the dense gradients
(``gnnsys.train.schedule``: the batch schedule and the gradient weighting), the dense step; then,
with learnable embedding rows, their gradients are exchanged (:meth:`Trainer._exchange`) and
every owner takes its sparse step.

Shape legend: ``B`` seeds in a batch, ``N_t`` sampled nodes of type ``t``, ``C`` classes, ``D``
embedding width.
"""

from __future__ import annotations

import contextlib
import copy
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import Tensor, nn
from torch.nn import functional

from gnnsys.distributed.batches import epoch_feed, epoch_positions
from gnnsys.models.sparse_embedding import SparseGrad, coalesce
from gnnsys.train.device import StepDevice, StepInputs, to_host
from gnnsys.train.embedding import OwnedEmbeddings
from gnnsys.train.inputs import BoundSampler, PerTypeInputs
from gnnsys.train.pipeline import Prefetcher, PreparedBatch, StageClock
from gnnsys.train.remote.ledger import PerTypeLedger
from gnnsys.train.schedule import (
    SCHEDULES,
    BatchPlan,
    EpochStats,
    GatherSync,
    LocalSync,
    sampled_edges,
)
from gnnsys.types import EdgeType, PartitionBook

__all__ = ["Trainer"]


def _check_handles(
    train_lid: Tensor,
    train_y: Tensor,
    embeddings: OwnedEmbeddings | None,
    books: dict[str, PartitionBook] | None,
    ledger: PerTypeLedger | None,
) -> None:
    if train_lid.shape != train_y.shape:
        raise ValueError(f"train_lid {tuple(train_lid.shape)} != train_y {tuple(train_y.shape)}")
    if embeddings is not None and (books is None or ledger is None):
        raise ValueError("embedding rows need the books and the ledger to route gradients")


class Trainer:
    """Trains a model on one rank's seeds; see the module docstring.

    Args:
        config: Optimisation settings (``lr`` also drives the embeddings' SparseAdam).
        model: A typed model (``RelationalSAGE``, ``RelationalGCN``, ``RelationalGAT``,
            ``RGCN``): node type -> rows in, node type -> outputs out.
        sampler: The typed sampler with the seed type bound.
        inputs: Per-type row sources.
        train_lid: ``[S]`` type-local ids of this rank's train nodes of the seed type.
        train_y: ``[S]`` their labels.
        books: Per-type owners (to route embedding gradients; needed with ``embeddings``).
        embeddings: This rank's embedding rows (``None``: every type has features).
        ledger: Counts each type's ``embedding_grad`` bytes (needed with ``embeddings``).
        rank: This rank.
        world_size: ``P``.
        sync: Allreduce and all_gather (``None``: one process).
        rng_lock: Shared by in-process ranks (``None``: this process's RNG; see ``_own_rng``).
        device: The step's device.
    """

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
            if not (math.isfinite(self.lr) and self.lr > 0):
                raise ValueError(f"lr={self.lr}; choose a positive learning rate")
            if self.seed < 0:
                raise ValueError(f"seed={self.seed}; choose a seed >= 0")
            if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
                raise ValueError(
                    f"weight_decay={self.weight_decay}; choose a finite value >= 0, e.g. 5e-4"
                )
            if self.batch_size < 1:
                raise ValueError(f"batch_size={self.batch_size}; choose batch_size >= 1")
            if self.prefetch < 0:
                raise ValueError(
                    f"prefetch={self.prefetch} (--prefetch); choose 0 (synchronous) or more "
                    "batches ahead"
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
        sampler: BoundSampler,
        inputs: PerTypeInputs,
        train_lid: Tensor,
        train_y: Tensor,
        books: dict[str, PartitionBook] | None = None,
        embeddings: OwnedEmbeddings | None = None,
        ledger: PerTypeLedger | None = None,
        rank: int = 0,
        world_size: int = 1,
        sync: GatherSync | None = None,
        rng_lock: threading.Lock | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        _check_handles(train_lid, train_y, embeddings, books, ledger)
        self.config, self.model, self.sampler, self.inputs = config, model, sampler, inputs
        self.stage_threads = 2  # producer threads when prefetching: 1 or 2 (see _feed)
        self.train_lid, self.train_y, self.rank = train_lid.long(), train_y.long(), rank
        self.world_size, self.gather = world_size, sync
        self.sync = sync if sync is not None else LocalSync()
        self.books, self.embeddings, self.typed_ledger = books or {}, embeddings, ledger
        self.input_type = sampler.input_type
        self._leaves: dict[str, Tensor] = {}  # this step's embedding rows (autograd leaves)
        self._n_id: dict[str, Tensor] = {}  # and their ids
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
        """Train items of this rank (the gradient's weight per batch too): its ``_item_ids``."""
        return int(self._item_ids().shape[-1])

    def _item_ids(self) -> Tensor:
        """The items' global identities, the keys of the epoch's order: the seeds' ids."""
        return self.train_lid

    def train_epoch(
        self, epoch: int, num_batches: int, hook: Callable[[int], None] | None = None
    ) -> EpochStats:
        """Run ``num_batches`` steps of ``epoch``; ``hook(batch_index)`` runs before each step.

        Batches are prepared (sampled, fetched) ``config.prefetch`` ahead on stage threads
        (``gnnsys.train.pipeline``); the result is the same at every depth.
        """
        self.model.train()
        clock = StageClock()
        loss_sum, correct, count, edges = 0.0, 0, 0, 0
        with self._feed(epoch, num_batches) as feed:
            for batch in feed:
                clock.absorb(batch)
                if hook is not None:
                    hook(batch.index)
                step = self._step(batch, clock)
                loss_sum += step[0]
                correct += step[1]
                count += int(batch.pos_B.numel())
                edges += sampled_edges(batch.sub)
            clock.add("stall", feed.stall)
        return EpochStats(
            loss_sum=loss_sum,
            num_correct=correct,
            num_seeds=count,
            sampled_edges=edges,
            seconds=clock.finish(),
            threads=torch.get_num_threads(),
            device=str(self.device.device),
            peak_device_bytes=self.device.peak_bytes(),
        )

    def _feed(self, epoch: int, num_batches: int) -> Prefetcher[PreparedBatch]:
        """The epoch's batches, prepared ``config.prefetch`` ahead: ``DistNeighborLoader``'s path.

        Positions and the sample stage are the loader's (``gnnsys.distributed.batches``: one
        global order of the items, restricted to this rank); the fetch and transfer stage
        builds the step's inputs, on a thread of its own or on the sample stage's
        (``stage_threads == 1``): the same batches in the same order either way.
        """
        positions = epoch_positions(
            self._item_ids(), num_batches, seed=self.config.seed, epoch=epoch,
            schedule=self.config.schedule,
        )  # fmt: skip
        return epoch_feed(
            positions, self._sample, seed=self.config.seed, rank=self.rank, epoch=epoch,
            prefetch=self.config.prefetch, then=(self._fetch_stage,),
            one_thread=self.stage_threads == 1, name=f"gnnsys-prefetch-{self.rank}",
        )  # fmt: skip

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

    def _sample(self, pos_B: Tensor, batch_seed: int) -> tuple[Any, Any]:
        """The sample stage: ``(extra, subgraph)`` of a non-empty batch (no extra here)."""
        return None, self.sampler.sample(self.train_lid[pos_B], seed=batch_seed)

    def _inputs_need_weights(self) -> bool:
        """Embedding rows change every step: with them, the compute loop fetches the inputs."""
        return self.embeddings is not None

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
        """One optimisation step; returns (summed loss, correct predictions).

        With embedding rows, their exchange and sparse step follow the dense step (timed as
        sync).
        """
        self._leaves, self._n_id = {}, {}
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
        start = time.perf_counter()
        if self.embeddings is not None:  # the dense step's divisor: the step's seeds, all ranks
            seeds = max(1, round(self.step_weight * self.world_size))
            self.embeddings.apply(self._exchange(), seeds)
        clock.add("sync", time.perf_counter() - start)
        self._leaves, self._n_id = {}, {}
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

    def _inputs(self, sub: Any) -> StepInputs:
        """Fetch every type's rows, with the forward pass (the seed type's logits).

        Fused types' rows travel encoded; the forward pass sums them on the step's device.
        """
        x_dict, leaves, agg, pending = self.inputs.prepare_first(sub)
        if self.embeddings is not None:  # the compute loop's thread (see _inputs_need_weights)
            self._leaves, self._n_id = leaves, sub.n_id
        model, seed_type, inputs = cast(Any, self.model), self.input_type, self.inputs
        if not (agg or pending):
            return StepInputs((x_dict, sub.blocks), lambda x, blocks: model(x, blocks)[seed_type])

        def run(x: dict[str, Tensor], blocks: Any, a: dict[EdgeType, Tensor], p: Any) -> Tensor:
            x, a = dict(x), dict(a)  # the moved records stay as they came
            inputs.finish_first(x, a, p)
            return cast(Tensor, model.forward_from_first_agg(x, blocks, a)[seed_type])

        return StepInputs((x_dict, sub.blocks, agg, pending), run)

    def _grad_weight(self, pos_B: Tensor) -> float:
        """This rank's weight in the step's gradient average: its batch's items.

        Seeds, or a link batch's positive links: ranks own unequal numbers of either and run
        the same batch count, so smaller ranks take smaller batches; weighing each rank by its
        items makes the step's gradient the mean over all the step's items (at P = 1 the plain
        mean). A subclass that overrides it must backpropagate its loss *summed* over the
        weighted items (see :meth:`_sync_grads`).
        """
        return float(pos_B.numel())

    def _sync_grads(self, weight: float) -> None:
        """Average gradients over ranks in one flat buffer (one collective per step).

        The buffer carries ``weight`` as one more element and each rank's gradient (of a
        summed loss) is divided by the weights' sum: ``g = sum_r g_r / sum_r w_r``, the gradient
        of the mean over every rank's items, however unequal the ranks' batches. The ranks'
        mean weight is kept in ``step_weight`` (the embeddings' sparse step is scaled by it).
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

    def steps_done(self) -> int:
        """Steps applied so far (the step count embedding requests carry)."""
        return 0 if self.embeddings is None else self.embeddings.steps

    def _split_grads(self) -> tuple[dict[str, SparseGrad], list[Tensor], list[Tensor]]:
        """Own rows' gradients per type, and the other rows' ids and gradients to send."""
        assert self.embeddings is not None and self.typed_ledger is not None  # with embeddings
        dim = self.embeddings.dim
        own: dict[str, SparseGrad] = {}
        ids_out: list[Tensor] = []
        vals_out: list[Tensor] = []
        for node_type in self.embeddings.types:
            leaf = self._leaves.get(node_type)
            ids = self._n_id.get(node_type, torch.zeros(0, dtype=torch.long))
            grad = None if leaf is None else leaf.grad
            if grad is None:  # type not sampled, or not reached by the seeds' outputs
                ids, grad = torch.zeros(0, dtype=torch.long), torch.zeros(0, dim)
            mine = torch.from_numpy(self.books[node_type].part_N[ids.numpy()] == self.rank)
            own[node_type] = coalesce(ids[mine], grad[mine])
            ids_out.append(ids[~mine])
            vals_out.append(grad[~mine])
            if self.world_size > 1:
                self.typed_ledger.of(node_type).record("embedding_grad", ids[~mine], grad[~mine])
        return own, ids_out, vals_out

    def _exchange(self) -> dict[str, list[SparseGrad]]:
        """Every rank's contributions to this rank's rows, per type, in rank order."""
        assert self.embeddings is not None
        own, ids_out, vals_out = self._split_grads()
        types = self.embeddings.types
        if self.world_size == 1 or self.gather is None:
            return {t: [own[t]] for t in types}
        header = torch.tensor([int(i.numel()) for i in ids_out], dtype=torch.long)
        all_ids = self.gather.all_gather(torch.cat([header, *ids_out]))
        all_vals = self.gather.all_gather(torch.cat([v.reshape(-1) for v in vals_out]))
        out: dict[str, list[SparseGrad]] = {t: [] for t in types}
        for r in range(self.world_size):
            if r == self.rank:
                for t in types:
                    out[t].append(own[t])
                continue
            counts = all_ids[r][: len(types)].tolist()
            ids_r = torch.split(all_ids[r][len(types) :], counts)
            vals_r = torch.split(all_vals[r].view(-1, self.embeddings.dim), counts)
            for t, ids, vals in zip(types, ids_r, vals_r, strict=True):
                mine = torch.from_numpy(self.books[t].part_N[ids.numpy()] == self.rank)
                out[t].append(coalesce(ids[mine], vals[mine]))
        return out

    def state(self) -> dict[str, Any]:
        """Copies of the model and optimizer ``state_dict`` plus this rank's torch RNG state.

        With embeddings, this rank's rows and their sparse optimizer states go under
        ``rng["owned"]``: the checkpoint keeps one per-rank dict (``Checkpoint.rng_by_rank``),
        and a rank's owned embedding tables are per-rank state like its RNG.
        """
        rng = {"torch": self._rng_state if self._rng_lock is not None else torch.get_rng_state()}
        device_rng = self._device_rng if self._rng_lock is not None else self.device.rng_state()
        if device_rng is not None:  # restored only on the same kind of device
            rng[self.device.device.type] = device_rng
        owned = {} if self.embeddings is None else {"owned": self.embeddings.state()}
        return {  # CPU copies whatever the device: a checkpoint resumes on any device
            "model": to_host(self.model.state_dict()),
            "optimizer": to_host(self.optimizer.state_dict()),  # Adam mutates in place
            "rng": {**to_host(rng), **owned},
        }

    def load_state(
        self, model_state: dict[str, Any], optimizer_state: dict[str, Any], rng: dict[str, Any]
    ) -> None:
        """Restore what :meth:`state` returned (RNG and embeddings included: masks repeat)."""
        rng = dict(rng)
        owned = rng.pop("owned", None)
        if self.embeddings is not None:
            if owned is None:
                raise ValueError("checkpoint has no embedding rows; resume a heterogeneous run")
            self.embeddings.load(owned)
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
