"""The Ray ``WorkerGroup``: the only code that creates, calls and kills training actors.

The coordinator decides; :class:`RayWorkerGroup` executes. Failures come back as a
:class:`GroupFailure` with each rank's kind and traceback (never as a raw Ray exception), so the
coordinator's decision stays pure.

Per part ``p`` there are two actors: a ``ShardOwner`` serving part ``p``'s structure and features
and a ``TrainWorker`` (rank ``p``). Trainers are threaded actors: one thread runs the epoch or
evaluation step, the others answer ``progress()`` polls and peers' evaluation row requests.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from gnnsys.train.control.checkpoint import Checkpoint
from gnnsys.train.control.failure import FailureKind
from gnnsys.train.control.group import GroupFailure, Roles
from gnnsys.train.control.local_group import HOMOGENEOUS
from gnnsys.train.control.resources import Resources
from gnnsys.train.evaluate import RankEval
from gnnsys.train.trainer import steps_per_epoch
from gnnsys.train.worker import RankState, WorkerEpochReport

__all__ = ["RayWorkerGroup", "Resources", "actor_name"]

log = logging.getLogger(__name__)

_POLL_S = 0.5  # how often the driver polls progress while an epoch runs
_GRACE_S = 3.0  # after a first failure, how long to wait for the other ranks' outcome


def actor_name(kind: str, rank: int, template: Any) -> str:
    """Ray name of an actor: ``gnnsys-{kind}-{rank}-a{attempt}-{driver pid}-{store hash}``.

    Deterministic, so tests and operators can find (and kill) a given rank; unique per driver
    process, store and attempt, so concurrent runs on one cluster do not collide.
    """
    store_hash = hashlib.sha1(template.store.encode()).hexdigest()[:8]
    return f"gnnsys-{kind}-{rank}-a{template.attempt}-{os.getpid()}-{store_hash}"


def _eval_layer(layer: int) -> Callable[[int, Any], Any]:
    """The ``_call_all`` maker of one evaluation step."""
    return lambda _, w: w.eval_layer.remote(layer)


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


class RayWorkerGroup:
    """``P`` shard owners plus ``P`` trainers forming one gloo group (a ``WorkerGroup``).

    Args:
        template: Spec of rank 0; rank ``r`` gets ``replace(template, rank=r)``.
        resources: CPUs per actor.
        deadline_s: Deadline of every driver-side wait (spawn, state, progress without change).
        roles: The owner and trainer classes (``HOMOGENEOUS`` by default).
    """

    def __init__(
        self, template: Any, resources: Resources, deadline_s: float, roles: Roles = HOMOGENEOUS
    ) -> None:
        self.template, self.resources, self.deadline_s = template, resources, deadline_s
        self.roles = roles
        self.owners: list[Any] = []
        self.workers: list[Any] = []

    def start(self) -> int:
        """Create the actors and the gloo group; returns batches per epoch (``steps_per_epoch``).

        Raises:
            GroupFailure: An actor failed to start or to answer within the deadline.
        """
        import ray

        template, resources = self.template, self.resources
        owner_cls, worker_cls = ray.remote(self.roles.owner), ray.remote(self.roles.worker)
        owner_opts: dict[str, Any] = {"num_cpus": resources.owner_cpus}
        world = template.world_size
        # One thread for the step, one for progress polls, one per peer asking for eval rows.
        worker_opts: dict[str, Any] = {
            "num_cpus": resources.worker_cpus,
            "max_concurrency": world + 2,
        }
        self.owners = [
            owner_cls.options(
                name=actor_name("owner", p, template), scheduling_strategy="SPREAD", **owner_opts
            ).remote(template.store, p)
            for p in range(world)
        ]
        self.workers = [
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
        self._call_all(lambda _, w: w.set_peers.remote(self.workers))
        return steps_per_epoch(self._call_all(lambda _, w: w.batch_plan.remote()))

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
        kinds: dict[int, FailureKind] = {}
        results: list[Any] = []
        for rank, ref in enumerate(refs):
            try:
                results.append(ray.get(ref, timeout=self.deadline_s))
            except Exception as err:  # process boundary: classify, report by rank
                kinds[rank], errors[rank] = _classify(err), str(err)
        if errors:
            raise GroupFailure(kinds, errors)
        return results

    def load(self, ckpt: Checkpoint) -> None:
        """Load a checkpoint into every trainer (each rank gets its own RNG state)."""
        self._call_all(
            lambda r, w: w.load_state.remote(
                ckpt.model_state, ckpt.optimizer_state, ckpt.rng_by_rank[r]
            )
        )

    def collect(self) -> list[RankState]:
        """Every rank's model, optimizer and RNG state."""
        return self._call_all(lambda _, w: w.state.remote())

    def evaluate(self, splits: tuple[str, ...], *, with_logits: bool = False) -> list[RankEval]:
        """One layer on every rank at a time (peers serve the rows they just computed)."""
        for layer in range(self.template.eval_steps):
            self._call_all(_eval_layer(layer))
        return self._call_all(lambda _, w: w.eval_report.remote(splits, with_logits))

    def run_epoch(
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
            raise GroupFailure(
                {r: kind for r, (kind, _) in errors.items()},
                {r: text for r, (_, text) in errors.items()},
            )
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

    def stop(self) -> None:
        """Kill every actor now (no graceful exit: a peer may be blocked in a collective)."""
        import ray

        for actor in (*self.workers, *self.owners):
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # already dead  # noqa: S110
                log.debug("actor already gone", exc_info=True)
        self.workers, self.owners = [], []
