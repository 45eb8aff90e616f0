"""The in-process ``WorkerGroup``: the ranks of one run as threads, the shard owners as objects.

Same ``TrainWorker``, ``Trainer``, samplers, feature sources, caches, ``ShardOwner`` and
evaluation code as the Ray runtime, and the same ledger; three handles differ:
:class:`LocalOwnerClient` calls the owners directly, ``LocalPeerClient`` the peer ranks, and
:class:`ThreadSync` averages gradients between threads instead of over gloo. With no process
start-up per run it is the executor of ``gnnsys bench comm``, which trains dozens of
configurations, and ``replay=True`` turns an epoch into a traffic replay (sampling and fetching
without the model). A rank that raises aborts the shared barrier, so every other rank stops too
and the group reports the raising rank (the coordinator's policy then aborts).

Gradient average: each rank deposits its flat gradient, then every rank sums the deposits in
rank order (so all ranks hold bit-identical sums and their models stay equal), then waits until
all have read before anyone deposits the next step's.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from gnnsys.outputs import OutputRequest, PartFile
from gnnsys.store import load_books
from gnnsys.train.control.checkpoint import Checkpoint
from gnnsys.train.control.failure import FailureKind
from gnnsys.train.control.group import EVAL_LAYER_LOG, GroupFailure
from gnnsys.train.eval.evaluate import RankEval
from gnnsys.train.rank import RankRuntime
from gnnsys.train.remote.ledger import Ledger
from gnnsys.train.remote.peers import LocalPeerClient
from gnnsys.train.remote.server import LocalOwnerClient, ShardOwner
from gnnsys.train.schedule import steps_per_epoch
from gnnsys.train.worker import RankState, TrainWorker, WorkerEpochReport

__all__ = ["LocalOwnerClient", "LocalWorkerGroup", "ThreadSync"]

log = logging.getLogger(__name__)


class _Room:
    """Where the ranks of one process meet for each gradient average."""

    def __init__(self, world_size: int, timeout_s: float) -> None:
        self.barrier = threading.Barrier(world_size, timeout=timeout_s)
        self.slots: list[Tensor | None] = [None] * world_size


class ThreadSync:
    """``GradSync`` between the threads of one process; counts its payload like gloo's.

    Args:
        room: Shared by all ranks of the run.
        rank: This rank.
        ledger: This rank's ledger (``allreduce``).
    """

    def __init__(self, room: _Room, rank: int, ledger: Ledger) -> None:
        self.room, self.rank, self.ledger = room, rank, ledger

    def allreduce_mean_(self, flat: Tensor) -> None:
        """Average ``flat`` over ranks in place; raises ``BrokenBarrierError`` if a rank failed."""
        self.ledger.record("allreduce", flat)
        self.room.slots[self.rank] = flat.clone()
        self.room.barrier.wait()
        total = torch.zeros_like(flat)
        for deposit in self.room.slots:
            assert deposit is not None  # every rank deposited before the barrier opened
            total += deposit
        self.room.barrier.wait()
        flat.copy_(total / len(self.room.slots))

    def all_gather(self, flat: Tensor) -> list[Tensor]:
        """Every rank's ``flat`` in rank order (the threads' ``GlooSync.all_gather``)."""
        self.room.slots[self.rank] = flat.clone()
        self.room.barrier.wait()
        out = [s.clone() for s in self.room.slots if s is not None]
        self.room.barrier.wait()
        return out


def _thread_sync(room: _Room, rank: int) -> Callable[[Ledger], ThreadSync]:
    return lambda ledger: ThreadSync(room, rank, ledger)


def _raised(rank: int, err: BaseException) -> GroupFailure:
    text = "".join(traceback.format_exception(type(err), err, err.__traceback__))
    return GroupFailure.of(FailureKind.RAISED, {rank: text})


class LocalWorkerGroup:
    """``P`` ranks in this process (a ``WorkerGroup``); see the module docstring.

    Args:
        template: Spec of rank 0.
        deadline_s: How long a rank waits for the others at a gradient average.
        replay: Epochs replay sampling and fetching without the model (``Trainer.replay_epoch``).
        threads: CPUs of this process while the ranks run (their forward/backward run one at
            a time): torch intra-op threads while they evaluate, one fewer while they train
            and prefetch (the stage threads take it, as a Ray trainer's do:
            ``gnnsys.train.threads``); ``None``: 1, as a Ray worker of a machine with no more
            cores than parts has.
    """

    def __init__(
        self,
        template: Any,
        deadline_s: float,
        *,
        replay: bool = False,
        threads: int | None = None,
    ) -> None:
        self.template, self.deadline_s = template, deadline_s
        self.replay, self.threads = replay, threads
        self.workers: list[Any] = []
        self._room = _Room(template.world_size, deadline_s)
        self._threads_before = torch.get_num_threads()

    def start(self) -> int:
        """Build the owners and ranks; returns the batches per epoch (``steps_per_epoch``)."""
        world = self.template.world_size
        books = load_books(self.template.store)  # once for every part's owner
        owners = [ShardOwner(self.template.store, p, books=books) for p in range(world)]
        client, peers = LocalOwnerClient(owners), LocalPeerClient()
        rng_lock = threading.Lock()
        for r in range(world):
            try:
                worker = TrainWorker(
                    replace(self.template, rank=r),
                    [],
                    rank=RankRuntime,
                    client=client,
                    sync=_thread_sync(self._room, r),
                    rng_lock=rng_lock,
                    peers=peers,
                )
            except Exception as err:  # process boundary of a rank: report it by rank
                raise _raised(r, err) from err
            self.workers.append(worker)
        peers.peers = list(self.workers)
        torch.set_num_threads(self.threads or 1)  # restored by stop()
        return steps_per_epoch([w.batch_plan() for w in self.workers])

    def load(self, ckpt: Checkpoint) -> None:
        """Restore a checkpoint on every rank."""
        for r, w in enumerate(self.workers):
            w.load_state(ckpt.model_state, ckpt.optimizer_state, ckpt.rng_by_rank[r])

    def run_epoch(
        self, epoch: int, num_batches: int, on_progress: Callable[[int], None]
    ) -> list[WorkerEpochReport]:
        """One epoch on every rank at once (threads); replays run the ranks in turn."""
        if self.replay:
            reports = [w.replay_epoch(epoch, num_batches) for w in self.workers]
            on_progress(num_batches)
            return reports
        reserve = 1 if self.template.trainer.prefetch else 0  # the stage threads' core
        torch.set_num_threads(max(1, (self.threads or 1) - reserve))
        try:
            return self._train(epoch, num_batches, on_progress)
        finally:
            torch.set_num_threads(self.threads or 1)

    def _train(
        self, epoch: int, num_batches: int, on_progress: Callable[[int], None]
    ) -> list[WorkerEpochReport]:
        """Every rank's epoch on a thread of its own; the first real error names its rank."""
        done: list[WorkerEpochReport | None] = [None] * len(self.workers)
        errors: dict[int, BaseException] = {}

        def work(rank: int) -> None:
            try:
                done[rank] = self.workers[rank].train_epoch(epoch, num_batches)
            except BaseException as err:  # noqa: BLE001 - reported below, on the driver thread
                errors[rank] = err
                self._room.barrier.abort()  # the other ranks leave their wait instead of hanging

        threads = [threading.Thread(target=work, args=(r,), daemon=True) for r in range(len(done))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            real = {
                r: e for r, e in errors.items() if not isinstance(e, threading.BrokenBarrierError)
            }
            rank, err = next(iter(sorted((real or errors).items())))
            raise _raised(rank, err)
        on_progress(num_batches)
        return [r for r in done if r is not None]

    def evaluate(self, splits: tuple[str, ...], *, with_logits: bool = False) -> list[RankEval]:
        """One layer on every rank at a time, the ranks in turn (peers read finished tables)."""
        start, steps = time.monotonic(), self.template.eval_steps
        try:
            for layer in range(steps):
                for w in self.workers:
                    w.eval_layer(layer)
                log.info(EVAL_LAYER_LOG, layer + 1, steps, time.monotonic() - start)
            return [w.eval_report(splits, with_logits) for w in self.workers]
        except Exception as err:  # a rank's error, reported like a Ray rank's
            raise _raised(0, err) from err

    def infer(
        self, request: OutputRequest, on_step: Callable[[int], None] = lambda _: None
    ) -> list[PartFile]:
        """The layers up to ``request.layer`` on every rank in turn, then every rank's part."""
        start = time.monotonic()
        try:
            for layer in range(request.layer):
                for w in self.workers:
                    w.eval_layer(layer)
                log.debug(EVAL_LAYER_LOG, layer + 1, request.layer, time.monotonic() - start)
                on_step(layer + 1)
            parts = [w.write_outputs(request) for w in self.workers]
            on_step(request.layer + 1)
            return parts
        except Exception as err:  # a rank's error, reported like a Ray rank's
            raise _raised(0, err) from err

    def collect(self) -> list[RankState]:
        """Every rank's state."""
        return [w.state() for w in self.workers]

    def stop(self) -> None:
        """Drop the ranks and restore the process's torch thread count."""
        self.workers = []
        torch.set_num_threads(self._threads_before)
