"""The Ray ``WorkerGroup``: the only code that creates, calls and kills training actors.

The coordinator decides; :class:`RayWorkerGroup` executes. Failures come back as a
:class:`GroupFailure` with each rank's kind and traceback (never as a raw Ray exception), so the
coordinator's decision stays pure.

Per part ``p`` there are two actors: a ``ShardOwner`` serving part ``p``'s structure and features
and a ``TrainWorker`` (rank ``p``). Trainers are threaded actors: one thread runs the epoch or
evaluation step, the others answer ``progress()`` polls and peers' evaluation row requests.

**Liveness.** While the group waits for any call, a :class:`Heartbeat` keeps one ping in flight
to every actor (trainers answer ``progress()`` from a spare thread, owners ``ping()``), sent
every ``_POLL_S``. A process that leaves a ping unanswered for ``heartbeat_s`` is *unresponsive*
(frozen, swapped out, stuck outside Python); one whose ping fails is *dead*. Either ends the
wait at once with a :class:`GroupFailure` naming that process, so a frozen rank is noticed
within ``heartbeat_s + _POLL_S`` (default 10.5 s), before its healthy peers' gloo collectives
time out at ``deadline_s``. Any failure is followed by a *census* (one fresh ping to every actor,
answered within ``_CENSUS_S``), so the failure names the processes that are really gone and
the trainers that only suffered from them (``failure.blame``). Start-up has its own deadline
(``startup_deadline_s``): an actor is pinged only once its constructor returned, so a process
that dies while constructing is seen at once (its ping fails), one that freezes there when
the start-up deadline passes, or, on this node, once its process has been stopped (frozen) for
``heartbeat_s`` (a slow constructor on a loaded machine is not frozen).
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from gnnsys.outputs import OutputRequest, PartFile
from gnnsys.train.control.checkpoint import Checkpoint
from gnnsys.train.control.failure import FailureKind
from gnnsys.train.control.group import EVAL_LAYER_LOG, GroupFailure
from gnnsys.train.control.resources import Resources
from gnnsys.train.eval.evaluate import RankEval
from gnnsys.train.rank import RankRuntime
from gnnsys.train.remote.server import ShardOwner
from gnnsys.train.schedule import steps_per_epoch
from gnnsys.train.worker import RankState, TrainWorker, WorkerEpochReport

__all__ = ["RayWorkerGroup", "Resources", "actor_name"]

log = logging.getLogger(__name__)

_POLL_S = 0.5  # how often the driver polls progress and heartbeats while it waits
_GRACE_S = 3.0  # after a first failure, how long to wait for the other ranks' outcome
_CENSUS_S = 3.0  # after a failure, how long every actor has to answer one fresh ping


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
    """``DIED`` when a process is gone (the worker, or an owner it called), else ``RAISED``.

    A constructor that raised kills its actor too, but that is a bug (``RAISED``): restarting
    would raise again.
    """
    import ray

    if isinstance(err, ray.exceptions.RayActorError | ray.exceptions.WorkerCrashedError):
        init_failed = bool(getattr(err, "actor_init_failed", False))
        return FailureKind.RAISED if init_failed else FailureKind.DIED
    cause = getattr(err, "cause", None)
    if isinstance(cause, ray.exceptions.RayActorError | ray.exceptions.WorkerCrashedError):
        return FailureKind.DIED
    if isinstance(err, ray.exceptions.GetTimeoutError):
        return FailureKind.TIMEOUT
    return FailureKind.RAISED


_Key = tuple[str, int]
"""An actor of the group: ``("rank", r)``: trainer ``r``; ``("owner", p)``: part ``p``'s owner."""


LIVENESS_GROUP = "liveness"
"""An owner's concurrency group for ``ping``: its own thread, so a request that takes long (a
large gather under memory pressure, pages read from disk) never delays the answer. A process
that is stopped or dead still answers nothing."""


def _ping(key: _Key, actor: Any) -> Any:
    """One liveness call: a trainer answers ``progress()`` (batches done), an owner ``ping()``."""
    if key[0] == "rank":
        return actor.progress.remote()
    return actor.ping.options(concurrency_group=LIVENESS_GROUP).remote()


class Heartbeat:
    """One ping in flight to every actor; tells who answers, who is silent and who is gone.

    Args:
        actors: Key -> actor handle.
        timeout_s: Silence after which an actor counts as unresponsive (``heartbeat_s``).
    """

    def __init__(self, actors: dict[_Key, Any], timeout_s: float) -> None:
        self.actors, self.timeout_s = actors, timeout_s
        now = time.monotonic()
        self._inflight: dict[_Key, tuple[Any, float]] = {}
        self.answered: dict[_Key, float] = dict.fromkeys(actors, now)
        self.dead: dict[_Key, str] = {}
        self.progress: dict[int, int] = {}

    def _send(self, key: _Key) -> None:
        actor = self.actors[key]
        self._inflight[key] = (_ping(key, actor), time.monotonic())

    def poll(self) -> None:
        """Collect the answers that arrived and send the next pings (never blocks)."""
        import ray

        for key in self.actors:
            if key in self.dead:
                continue
            if key not in self._inflight:
                self._send(key)
                continue
            ref, _ = self._inflight[key]
            ready, _ = ray.wait([ref], timeout=0)
            if not ready:
                continue
            del self._inflight[key]
            try:
                value = ray.get(ref)
            except Exception as err:  # process boundary: a failed ping means the process is gone
                self.dead[key] = str(err)
                continue
            self.answered[key] = time.monotonic()
            if key[0] == "rank":
                self.progress[key[1]] = int(value)
            self._send(key)

    def silent(self) -> dict[_Key, float]:
        """Actors whose ping has waited longer than ``timeout_s`` -> seconds since they answered."""
        now = time.monotonic()
        return {
            key: now - self.answered[key]
            for key, (_, sent) in self._inflight.items()
            if now - sent > self.timeout_s and key not in self.dead
        }


class RayWorkerGroup:
    """``P`` shard owners plus ``P`` trainers forming one gloo group (a ``WorkerGroup``).

    Args:
        template: Spec of rank 0; rank ``r`` gets ``replace(template, rank=r)``.
        resources: CPUs per actor.
        deadline_s: Deadline of every driver-side wait (state, report), and the longest time
            without progress of an epoch (no batch finished) or of an evaluation layer (no
            evaluation step, ``TrainWorker.progress``).
        heartbeat_s: Silence after which an actor counts as frozen (see the module docstring).
        startup_deadline_s: Deadline of ``start`` as a whole (actors built, gloo joined).
    """

    def __init__(
        self,
        template: Any,
        resources: Resources,
        deadline_s: float,
        *,
        heartbeat_s: float = 10.0,
        startup_deadline_s: float = 90.0,
    ) -> None:
        self.template, self.resources, self.deadline_s = template, resources, deadline_s
        self.heartbeat_s, self.startup_deadline_s = heartbeat_s, startup_deadline_s
        self.owners: list[Any] = []
        self.workers: list[Any] = []
        self._heartbeat: Heartbeat | None = None

    def start(self) -> int:
        """Create the actors and the gloo group; returns batches per epoch (``steps_per_epoch``).

        Raises:
            GroupFailure: An actor died, raised or froze while starting, or the start-up took
                longer than ``startup_deadline_s``.
        """
        import ray

        template, resources = self.template, self.resources
        # requests stay one at a time; pings have a thread of their own
        owner_cls = ray.remote(concurrency_groups={LIVENESS_GROUP: 1})(  # type: ignore[call-overload]
            ShardOwner
        )
        worker_cls = ray.remote(TrainWorker)
        owner_opts: dict[str, Any] = {"num_cpus": resources.owner_cpus}
        world = template.world_size
        # One thread for the step, one for progress polls, one per peer asking for eval rows.
        worker_opts: dict[str, Any] = {
            "num_cpus": resources.worker_cpus,
            "num_gpus": template.device.gpus_per_trainer,  # 0 on CPU; below 1: a shared GPU
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
            ).remote(replace(template, rank=r), self.owners, rank=RankRuntime)
            for r in range(world)
        ]
        actors: dict[_Key, Any] = {("rank", r): w for r, w in enumerate(self.workers)}
        actors |= {("owner", p): o for p, o in enumerate(self.owners)}
        end = time.monotonic() + self.startup_deadline_s
        self._built(actors, end)
        self._heartbeat = Heartbeat(actors, self.heartbeat_s)
        host, port = self._call_all(lambda _, w: w.address.remote(), self.workers[:1], end=end)[0]
        self._call_all(lambda _, w: w.init_group.remote(host, port), end=end)
        self._call_all(lambda _, w: w.set_peers.remote(self.workers), end=end)
        plans = self._call_all(lambda _, w: w.batch_plan.remote(), end=end)
        return steps_per_epoch(plans)

    def _built(self, actors: dict[_Key, Any], end: float) -> None:
        """Wait until every actor's constructor returned (one ping each answered) or ``end``.

        Raises:
            GroupFailure: A constructor raised or its process died (seen at once), or some
                actors had not answered when ``end`` passed (named as unresponsive).
        """
        import ray

        refs = {_ping(key, a): key for key, a in actors.items()}
        pending = list(refs)
        gone: dict[_Key, tuple[FailureKind, str]] = {}
        frozen = _FrozenWatch(self.heartbeat_s)
        while pending and not gone and time.monotonic() < end:
            ready, pending = ray.wait(pending, num_returns=len(pending), timeout=_POLL_S)
            for ref in ready:
                try:
                    ray.get(ref)
                except Exception as err:  # process boundary: classify, report by actor
                    gone[refs[ref]] = (_classify(err), str(err))
            names = {
                actor_name(_ROLE[refs[r][0]], refs[r][1], self.template): refs[r] for r in pending
            }
            for name, seconds in frozen.poll(list(names)).items():
                gone[names[name]] = (
                    FailureKind.UNRESPONSIVE,
                    f"process stopped (frozen) for {seconds:.1f} s in its constructor",
                )
        if not gone and not pending:
            return
        if gone:  # the others may still be constructing: not silent, only not done yet
            raise _failure(gone, detail="during start-up")
        waited = self.startup_deadline_s - max(end - time.monotonic(), 0.0)
        for ref in pending:
            gone[refs[ref]] = (
                FailureKind.UNRESPONSIVE,
                f"not started after {waited:.1f} s (start-up deadline "
                f"{self.startup_deadline_s:g} s; raise --startup-deadline if it is only slow)",
            )
        raise _failure(gone, detail=f"during start-up, after {waited:.1f} s")

    def _call_all(
        self,
        make: Callable[[int, Any], Any],
        actors: list[Any] | None = None,
        *,
        end: float | None = None,
    ) -> list[Any]:
        """Call ``make(rank, actor)`` for every trainer; wait until all answer.

        Args:
            make: Makes one call's ref.
            actors: Trainers to call (default: all).
            end: Monotonic time by which all must have answered (default: now +
                ``deadline_s``).

        Raises:
            GroupFailure: One or more actors failed, stopped answering, or ``end`` passed.
        """
        refs = [make(r, a) for r, a in enumerate(self.workers if actors is None else actors)]
        end = time.monotonic() + self.deadline_s if end is None else end
        return self._await(refs, lambda: time.monotonic() > end, "the call's deadline passed")

    def _await(
        self,
        refs: list[Any],
        overdue: Callable[[], bool],
        why_overdue: str,
        on_poll: Callable[[], None] | None = None,
    ) -> list[Any]:
        """Wait for ``refs`` (one per rank, in order) while the heartbeat watches every actor.

        Args:
            refs: One pending call per rank.
            overdue: Whether waiting longer would pass a deadline (checked every poll).
            why_overdue: The message of a rank still pending when ``overdue()``.
            on_poll: Called after each poll (progress bars, stall tracking).

        Raises:
            GroupFailure: A call failed, an actor died or went silent, or ``overdue()``.
        """
        import ray

        rank_of = {ref: r for r, ref in enumerate(refs)}
        done: dict[int, Any] = {}
        errors: dict[int, tuple[FailureKind, str]] = {}
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
                raise self._census(errors)
            if not pending:
                break
            if self._heartbeat is not None:
                self._heartbeat.poll()
                silent, dead = self._heartbeat.silent(), self._heartbeat.dead
                if silent or dead:
                    longest = max(silent.values(), default=0.0)
                    detail = f"no heartbeat for {longest:.1f} s" if silent else "ping failed"
                    raise self._census(errors, detail=detail, silent=set(silent))
            if on_poll is not None:
                on_poll()
            if overdue():
                stalled = {rank_of[ref]: (FailureKind.TIMEOUT, why_overdue) for ref in pending}
                raise self._census(stalled, detail=why_overdue)
        return [done[r] for r in range(len(refs))]

    def _census(
        self,
        errors: dict[int, tuple[FailureKind, str]],
        detail: str = "",
        silent: set[_Key] | None = None,
    ) -> GroupFailure:
        """Ping every actor once more and turn ``errors`` into a failure with its causes.

        A trainer whose own call failed because an owner it called died is alive: it becomes
        a victim (``RAISED``), the dead owner the cause. Actors in ``silent`` (the heartbeat
        already waited ``heartbeat_s`` for them) are not waited for again.
        """
        import ray

        keys: list[_Key] = [("rank", r) for r in range(len(self.workers))]
        keys += [("owner", p) for p in range(len(self.owners))]
        hb = self._heartbeat
        refs = {}
        silent = silent or set()
        for key in keys:
            if key in silent:
                continue
            actor = (self.workers if key[0] == "rank" else self.owners)[key[1]]
            refs[_ping(key, actor)] = key
        ready: list[Any] = []
        pending: list[Any] = []
        if refs:
            ready, pending = ray.wait(list(refs), num_returns=len(refs), timeout=_CENSUS_S)
        gone: dict[_Key, tuple[FailureKind, str]] = {}
        for ref in ready:
            try:
                ray.get(ref)
            except Exception as err:  # process boundary
                gone[refs[ref]] = (FailureKind.DIED, str(err))
        for key in [refs[ref] for ref in pending] + sorted(silent):
            silence = _CENSUS_S if hb is None else time.monotonic() - hb.answered[key]
            gone[key] = (FailureKind.UNRESPONSIVE, f"no heartbeat for {silence:.1f} s")
        merged: dict[_Key, tuple[FailureKind, str]] = {}
        for rank, (kind, text) in errors.items():
            if kind is FailureKind.DIED and ("rank", rank) not in gone:
                kind = FailureKind.RAISED  # alive: an owner it called died (the census says which)
            merged[("rank", rank)] = (kind, text)
        for key, (kind, text) in gone.items():
            old = merged.get(key)
            merged[key] = (kind, text if old is None else f"{text}\n{old[1]}")
        progress = {} if hb is None else dict(hb.progress)
        return _failure(merged, detail=detail, progress=progress)

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
        start, steps = time.monotonic(), self.template.eval_steps
        for layer in range(steps):
            self._call_watched(_eval_layer(layer), self._stalled(f"layer {layer + 1}"))
            log.info(EVAL_LAYER_LOG, layer + 1, steps, time.monotonic() - start)
        return self._call_all(lambda _, w: w.eval_report.remote(splits, with_logits))

    def infer(
        self, request: OutputRequest, on_step: Callable[[int], None] = lambda _: None
    ) -> list[PartFile]:
        """The layers up to ``request.layer`` on every rank, then every rank writes its part."""
        start = time.monotonic()
        for layer in range(request.layer):
            self._call_watched(_eval_layer(layer), self._stalled(f"layer {layer + 1}"))
            log.debug(EVAL_LAYER_LOG, layer + 1, request.layer, time.monotonic() - start)
            on_step(layer + 1)
        parts: list[PartFile] = self._call_all(lambda _, w: w.write_outputs.remote(request))
        on_step(request.layer + 1)
        return parts

    def run_epoch(
        self, epoch: int, num_batches: int, on_progress: Callable[[int], None]
    ) -> list[WorkerEpochReport]:
        """Run one epoch on every rank; ``on_progress(batches done by rank 0)`` while waiting.

        Raises:
            GroupFailure: A rank or owner died, raised or stopped answering, or no rank
                progressed for ``deadline_s``.
        """
        return self._call_watched(
            lambda _, w: w.train_epoch.remote(epoch, num_batches),
            f"no batch finished in {self.deadline_s:g} s",
            on_progress,
        )

    def _stalled(self, what: str) -> str:
        return f"{what} of the evaluation made no progress in {self.deadline_s:g} s"

    def _call_watched(
        self,
        make: Callable[[int, Any], Any],
        why_overdue: str,
        on_progress: Callable[[int], None] = lambda _: None,
    ) -> list[Any]:
        """``_call_all`` for a long call: overdue only once no rank progressed for the deadline.

        The heartbeat's ``progress()`` polls (batches in an epoch, evaluation steps in a layer)
        tell a working rank from a hung one; ``on_progress(rank 0's count)`` after each poll.
        """
        refs = [make(r, w) for r, w in enumerate(self.workers)]
        hb = self._heartbeat
        seen: dict[int, int] = {}
        last_change = [time.monotonic()]

        def watch() -> None:
            now = dict(hb.progress) if hb is not None else {}
            if now != seen:
                seen.clear()
                seen.update(now)
                last_change[0] = time.monotonic()
            on_progress(now.get(0, 0))

        return self._await(
            refs,
            lambda: time.monotonic() - last_change[0] > self.deadline_s,
            why_overdue,
            watch,
        )

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

        if not pending:
            return
        ready, _ = ray.wait(pending, num_returns=len(pending), timeout=_GRACE_S)
        for ref in ready:
            try:
                ray.get(ref)
            except Exception as err:  # process boundary
                errors[rank_of[ref]] = (_classify(err), str(err))

    def stop(self) -> None:
        """Kill every actor now (no graceful exit: a peer may be blocked in a collective).

        A frozen (stopped) process cannot exit by itself; Ray's raylet kills it with SIGKILL.
        """
        import ray

        for actor in (*self.workers, *self.owners):
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # already dead  # noqa: S110
                log.debug("actor already gone", exc_info=True)
        self.workers, self.owners, self._heartbeat = [], [], None


_ROLE = {"rank": "worker", "owner": "owner"}
"""``actor_name`` kind of each actor key."""


class _FrozenWatch:
    """During start-up, finds constructing actors whose process on this node is stopped.

    An actor answers no call until its constructor returns, and a slow constructor (a loaded
    machine, a big shard) must not count as frozen; a *stopped* process (state ``T``:
    SIGSTOP, a debugger) is one for certain. Ray's actor table (a private API; any error
    disables the check) gives each constructing actor's pid; only processes of this node can
    be inspected, the others wait for the start-up deadline.
    """

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._since: dict[str, float] = {}
        self._next = 0.0
        self._enabled = True

    def poll(self, names: list[str]) -> dict[str, float]:
        """Actor name -> seconds stopped, for those stopped longer than ``timeout_s``."""
        now = time.monotonic()
        if not self._enabled or not names or now < self._next:
            return {}
        self._next = now + 1.0  # one actor-table read per second
        try:
            from ray._private.state import actors

            pid_of = {a.get("Name"): a.get("Pid") for a in actors().values()}
        except Exception:  # private API changed: fall back to the start-up deadline
            log.debug("actor table unavailable; start-up freezes wait for the deadline")
            self._enabled = False
            return {}
        out = {}
        for name in names:
            if _stopped(pid_of.get(name)):
                since = self._since.setdefault(name, now)
                if now - since > self.timeout_s:
                    out[name] = now - since
            else:
                self._since.pop(name, None)
        return out


def _stopped(pid: Any) -> bool:
    """Whether ``pid`` is a Ray process of this node in the stopped state."""
    import psutil

    if not pid:
        return False
    try:
        proc = psutil.Process(int(pid))
        return bool(proc.name().startswith("ray::") and proc.status() == psutil.STATUS_STOPPED)
    except (psutil.Error, ValueError):
        return False


def _failure(
    by_key: dict[_Key, tuple[FailureKind, str]],
    *,
    detail: str = "",
    progress: dict[int, int] | None = None,
) -> GroupFailure:
    """A :class:`GroupFailure` from failures keyed by actor (owners kept apart from ranks)."""
    kinds = {k[1]: kind for k, (kind, _) in by_key.items() if k[0] == "rank"}
    errors = {k[1]: text for k, (_, text) in by_key.items() if k[0] == "rank"}
    owners = {k[1]: kind for k, (kind, _) in by_key.items() if k[0] == "owner"}
    return GroupFailure(kinds, errors, owner_kinds=owners, progress_by_rank=progress, detail=detail)
