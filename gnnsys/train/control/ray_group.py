"""Executor of the actor group: the only code that creates, calls and kills training actors.

The coordinator decides; :class:`ActorGroup` executes. Failures come back as a
``FailureStatus`` (never as a raw Ray exception), so the coordinator's decision stays pure.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from gnnsys.train.control.checkpoint import Checkpoint
from gnnsys.train.control.failure import FailureKind, FailureStatus
from gnnsys.train.remote.server import ShardOwner
from gnnsys.train.worker import TrainWorker, WorkerEpochReport, WorkerSpec

__all__ = ["ActorGroup", "GroupFailure", "Resources", "actor_name"]

log = logging.getLogger(__name__)

_POLL_S = 0.5  # how often the driver polls progress while an epoch runs
_GRACE_S = 3.0  # after a first failure, how long to wait for the other ranks' outcome


@dataclass(frozen=True, slots=True)
class Resources:
    """Ray resources per actor; fractional CPUs let 2P actors share a small machine.

    Attributes:
        worker_cpus: Logical CPUs per trainer actor.
        owner_cpus: Logical CPUs per shard-owner actor.
    """

    worker_cpus: float = 1.0
    owner_cpus: float = 0.5


def actor_name(kind: str, rank: int, template: WorkerSpec) -> str:
    """Ray name of an actor: ``gnnsys-{kind}-{rank}-a{attempt}-{driver pid}-{store hash}``.

    Deterministic, so tests and operators can find (and kill) a given rank; unique per driver
    process, store and attempt, so concurrent runs on one cluster do not collide.
    """
    store_hash = hashlib.sha1(template.store.encode()).hexdigest()[:8]
    return f"gnnsys-{kind}-{rank}-a{template.attempt}-{os.getpid()}-{store_hash}"


class GroupFailure(Exception):  # noqa: N818 (a control-flow signal carrying a record)
    """Raised by :class:`ActorGroup` calls when ranks failed; carries the observed status."""

    def __init__(self, kind: FailureKind, errors_by_rank: dict[int, str]) -> None:
        super().__init__(kind, errors_by_rank)
        self.kind, self.errors_by_rank = kind, errors_by_rank

    def status(self, restarts_so_far: int, has_checkpoint: bool) -> FailureStatus:
        """The record the failure policy decides on."""
        return FailureStatus(self.kind, self.errors_by_rank, restarts_so_far, has_checkpoint)


def _classify(err: Exception) -> FailureKind:
    """``DIED`` when a process is gone (the worker, or an owner it called), else ``RAISED``."""
    import ray

    if isinstance(err, ray.exceptions.RayActorError | ray.exceptions.WorkerCrashedError):
        return FailureKind.DIED
    cause = getattr(err, "cause", None)
    if isinstance(cause, ray.exceptions.RayActorError | ray.exceptions.WorkerCrashedError):
        return FailureKind.DIED
    if isinstance(err, ray.exceptions.GetTimeoutError):
        return FailureKind.TIMEOUT
    return FailureKind.RAISED


class ActorGroup:
    """``P`` shard owners plus ``P`` trainers forming one gloo group.

    Args:
        template: Spec of rank 0; rank ``r`` gets ``replace(template, rank=r)``.
        resources: CPUs per actor.
        deadline_s: Deadline of every driver-side wait (spawn, state, progress without change).
    """

    def __init__(self, template: WorkerSpec, resources: Resources, deadline_s: float) -> None:
        import ray

        self.deadline_s = deadline_s
        owner_cls, worker_cls = ray.remote(ShardOwner), ray.remote(TrainWorker)
        owner_opts: dict[str, Any] = {"num_cpus": resources.owner_cpus}
        worker_opts: dict[str, Any] = {"num_cpus": resources.worker_cpus, "max_concurrency": 2}
        world = template.world_size
        self.owners: list[Any] = [
            owner_cls.options(
                name=actor_name("owner", p, template), scheduling_strategy="SPREAD", **owner_opts
            ).remote(template.store, p)
            for p in range(world)
        ]
        self.workers: list[Any] = [
            worker_cls.options(
                name=actor_name("worker", r, template),
                scheduling_strategy="SPREAD",
                **worker_opts,
            ).remote(replace(template, rank=r), self.owners)
            for r in range(world)
        ]
        self._call_all(lambda _, a: a.ping.remote(), self.owners)
        host, port = self._call_all(lambda _, w: w.address.remote(), self.workers[:1])[0]
        self._call_all(lambda _, w: w.init_group.remote(host, port))

    def _call_all(
        self, make: Callable[[int, Any], Any], actors: list[Any] | None = None
    ) -> list[Any]:
        """Call ``make(rank, actor)`` for every actor, wait up to the deadline each.

        Raises:
            GroupFailure: One or more actors failed; errors grouped by rank.
        """
        import ray

        refs = [make(r, a) for r, a in enumerate(self.workers if actors is None else actors)]
        errors: dict[int, str] = {}
        kinds: set[FailureKind] = set()
        results: list[Any] = []
        for rank, ref in enumerate(refs):
            try:
                results.append(ray.get(ref, timeout=self.deadline_s))
            except Exception as err:  # process boundary: classify, report by rank
                kinds.add(_classify(err))
                errors[rank] = str(err)
        if errors:
            worst = next(
                k for k in (FailureKind.RAISED, FailureKind.TIMEOUT, FailureKind.DIED) if k in kinds
            )
            raise GroupFailure(worst, errors)
        return results

    def num_batches(self) -> int:
        """Batches per epoch for every rank: the most any rank needs."""
        return int(max(self._call_all(lambda _, w: w.num_local_batches.remote())))

    def load(self, ckpt: Checkpoint) -> None:
        """Load a checkpoint into every trainer (each rank gets its own RNG state)."""
        self._call_all(
            lambda r, w: w.load_state.remote(
                ckpt.model_state, ckpt.optimizer_state, ckpt.rng_by_rank[r]
            )
        )

    def states(self) -> list[dict[str, Any]]:
        """Every rank's model, optimizer and RNG state."""
        return self._call_all(lambda _, w: w.state.remote())

    def train_epoch(
        self, epoch: int, num_batches: int, on_progress: Callable[[int], None]
    ) -> list[WorkerEpochReport]:
        """Run one epoch on every rank; ``on_progress(batches done by rank 0)`` while waiting.

        Raises:
            GroupFailure: A rank died or raised, or no rank progressed for ``deadline_s``.
        """
        import ray

        refs = [w.train_epoch.remote(epoch, num_batches) for w in self.workers]
        rank_of = {ref: r for r, ref in enumerate(refs)}
        done: dict[int, WorkerEpochReport] = {}
        errors: dict[int, tuple[FailureKind, str]] = {}
        last_change, last_seen = time.monotonic(), -1
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=len(pending), timeout=_POLL_S)
            for ref in ready:
                try:
                    done[rank_of[ref]] = ray.get(ref)
                except Exception as err:  # process boundary: classify, report by rank
                    errors[rank_of[ref]] = (_classify(err), str(err))
            if errors:
                self._collect_grace(pending, rank_of, errors)
                break
            seen = self._progress(num_batches)
            on_progress(seen)
            if seen != last_seen:
                last_change, last_seen = time.monotonic(), seen
            elif time.monotonic() - last_change > self.deadline_s:
                errors = {
                    r: (FailureKind.TIMEOUT, f"no batch finished in {self.deadline_s}s")
                    for r in range(len(refs))
                    if r not in done
                }
                break
        if errors:
            kinds = {k for k, _ in errors.values()}
            kind = FailureKind.DIED if FailureKind.DIED in kinds else next(iter(kinds))
            raise GroupFailure(kind, {r: text for r, (_, text) in errors.items()})
        return [done[r] for r in range(len(refs))]

    def _collect_grace(
        self,
        pending: list[Any],
        rank_of: dict[Any, int],
        errors: dict[int, tuple[FailureKind, str]],
    ) -> None:
        """After a first failure, wait briefly for the other ranks' outcomes.

        A dead peer closes its gloo sockets, so its peers raise too; seeing the death as well
        keeps that from being mistaken for a bug (which would abort instead of restart).
        """
        import ray

        ready, _ = ray.wait(pending, num_returns=len(pending), timeout=_GRACE_S)
        for ref in ready:
            try:
                ray.get(ref)
            except Exception as err:  # process boundary
                errors[rank_of[ref]] = (_classify(err), str(err))

    def _progress(self, num_batches: int) -> int:
        """Batches finished by rank 0 (0 if it does not answer within the poll interval)."""
        import ray

        try:
            seen: Any = ray.get(self.workers[0].progress.remote(), timeout=self.deadline_s)
            return int(seen)
        except Exception:  # process boundary: a dead rank 0 shows up in train_epoch's refs
            return 0

    def kill(self) -> None:
        """Kill every actor now (no graceful exit: a peer may be blocked in a collective)."""
        import ray

        for actor in (*self.workers, *self.owners):
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # already dead  # noqa: S110
                log.debug("actor already gone", exc_info=True)
        self.workers, self.owners = [], []
