"""The driver's control loop: an explicit state machine that decides, then has the group execute.

States and transitions (``_step`` runs one handler and returns ``(previous, next)``)::

    START -> SPAWN -> TRAIN -> EVALUATE -> RECORD -> TRAIN ... -> DONE
                ^       |          |          |
                |       v          v          v
                +------------ RECOVER --------+ -> FAILED

The coordinator knows the ranks only through the ``WorkerGroup`` protocol, so the Ray executor
and the in-process one run this same loop. ``EVALUATE`` asks the ranks for the sharded exact
evaluation of their (identical) weights when ``EvalConfig.due``; the driver only adds their
counts. ``RECORD`` appends the ``metrics.jsonl`` line, then writes the checkpoint (through the
:class:`Recorder`). ``RECOVER`` asks the pure ``FailurePolicy``; a restart stops the whole group,
makes a new one and reloads the last checkpoint.
"""

from __future__ import annotations

import enum
import logging
import math
import time
from dataclasses import dataclass
from typing import Any

from tqdm import tqdm

from gnnsys.errors import WorkerFailedError
from gnnsys.train.control.checkpoint import Checkpoint
from gnnsys.train.control.failure import FailureAction, FailurePolicy, FailureStatus
from gnnsys.train.control.group import GroupFactory, GroupFailure, WorkerGroup
from gnnsys.train.control.recorder import EpochMetrics, Recorder, epoch_metrics
from gnnsys.train.control.resources import Resources
from gnnsys.train.control.tensorboard import check_tensorboard
from gnnsys.train.eval.evaluate import EvalConfig, EvalResult, combine_evals
from gnnsys.train.worker import WorkerEpochReport

__all__ = ["Coordinator", "State"]

log = logging.getLogger(__name__)

PROGRESS_LOG_S = 60.0
"""Seconds between two progress lines of an epoch run without a bar (a batch job's log)."""


class State(enum.Enum):
    """Where the coordinator is; see the module docstring for the transitions."""

    START = "start"
    SPAWN = "spawn"
    TRAIN = "train"
    EVALUATE = "evaluate"
    RECORD = "record"
    RECOVER = "recover"
    DONE = "done"
    FAILED = "failed"


class Coordinator:
    """Runs ``epochs`` epochs on a ``WorkerGroup``, recovering per the failure policy.

    Args:
        config: Loop settings.
        make_group: Makes a fresh group per attempt (0 first, then one per restart).
        policy: Decides restart or abort on a failure.
        recorder: Writes metrics lines and checkpoints.
        evaluation: When and what the ranks evaluate.
        num_classes: ``C`` (selects the best-epoch metric; AUC needs 2).
        world_size: ``P`` (a checkpoint of another ``P`` is refused).
        link: The run is link prediction (the best epoch is picked by ``mrr`` or ``hits@K``).
    """

    @dataclass(frozen=True, kw_only=True, slots=True)
    class Config:
        """Driver-loop settings."""

        epochs: int = 3
        """Epochs to train (a resumed run continues up to this count)."""
        deadline_s: float = 120.0
        """Deadline of every remote call, and longest time without a finished batch or, in an
        evaluation layer, without an evaluation step."""
        heartbeat_s: float | None = None
        """Longest silence of a process (trainer or shard owner) before it counts as frozen:
        the group then kills it and restarts like after a death. ``None``: 10 s, or half the
        deadline when that is shorter (a frozen rank must be named before its peers' gloo
        collectives time out at ``deadline_s``)."""
        startup_deadline_s: float = 90.0
        """Longest start-up of a group (actors built, shards loaded, warm-up, gloo joined);
        a process that dies meanwhile is noticed at once, one that freezes at this deadline.
        Workers import torch and load their shards at start-up, which takes tens of seconds
        on a loaded small machine, hence more than the heartbeat."""
        resume: bool = False
        """Continue from ``run_dir/checkpoint.pt`` (else start fresh, removing old files)."""
        progress: bool = True
        """Show a tqdm bar per epoch on the driver; without it (no terminal, ``--no-progress``)
        the driver logs the epoch's batches done every ``PROGRESS_LOG_S`` seconds instead."""
        resources: Resources = Resources()
        """Logical CPUs per actor."""
        tensorboard: str | None = None
        """Also write every epoch's line as TensorBoard scalars in this directory (needs the
        ``tensorboard`` package; ``gnnsys.train.control.tensorboard``)."""

        def __post_init__(self) -> None:
            check_tensorboard(self.tensorboard)
            if self.epochs < 1:
                raise ValueError(f"epochs={self.epochs}; choose epochs >= 1")
            for name in ("deadline_s", "heartbeat_s", "startup_deadline_s"):
                value = getattr(self, name)
                if value is not None and not (math.isfinite(value) and value > 0):
                    raise ValueError(f"{name}={value}; choose a positive value")
            if self.heartbeat_s is not None and self.heartbeat_s > self.deadline_s:
                raise ValueError(
                    f"heartbeat_s={self.heartbeat_s} exceeds deadline_s={self.deadline_s}; a "
                    "frozen process must be noticed before its peers' collectives time out: "
                    "choose heartbeat_s <= deadline_s"
                )

    @staticmethod
    def heartbeat(config: Config) -> float:
        """``config.heartbeat_s`` resolved (see the field)."""
        if config.heartbeat_s is not None:
            return config.heartbeat_s
        return min(10.0, config.deadline_s / 2)

    def __init__(
        self,
        config: Config,
        *,
        make_group: GroupFactory,
        policy: FailurePolicy,
        recorder: Recorder,
        evaluation: EvalConfig,
        num_classes: int,
        world_size: int,
        link: bool = False,
    ) -> None:
        self.config, self.make_group, self.policy = config, make_group, policy
        self.recorder, self.evaluation = recorder, evaluation
        self.metric = evaluation.selection_metric(num_classes, link=link)
        self.num_classes, self.world_size = num_classes, world_size
        self.state = State.START
        self.epoch = 0
        self.restarts = 0
        self.num_batches = 0
        self.history: list[EpochMetrics] = []
        self.group: WorkerGroup | None = None
        self.ckpt: Checkpoint | None = None
        self.failure: GroupFailure | None = None
        self.failures: list[dict[str, Any]] = []
        """Every failure: wall time, kind, causes, victims, action and reason, in order
        (``summary.json`` reports them)."""
        self.error: Exception | None = None
        self._reports: list[WorkerEpochReport] = []
        self._evaluation = EvalResult(metrics={})
        self._epoch_seconds = 0.0

    # ---- loop ---------------------------------------------------------------------------------
    def run(self) -> list[EpochMetrics]:
        """Drive the state machine to ``DONE`` and return every epoch's metrics.

        Raises:
            WorkerFailedError: The policy aborted; the message has each failed rank's traceback.
        """
        try:
            while self.state not in (State.DONE, State.FAILED):
                self._step()
        finally:
            self._stop_group()
            self.recorder.close()
        if self.error is not None:
            raise self.error
        return self.history

    def _step(self) -> tuple[State, State]:
        """Run the current state's handler; returns ``(previous, next)``."""
        handlers = {
            State.START: self._start,
            State.SPAWN: self._spawn,
            State.TRAIN: self._train,
            State.EVALUATE: self._evaluate,
            State.RECORD: self._record,
            State.RECOVER: self._recover,
        }
        previous = self.state
        try:
            self.state = handlers[previous]()
        except GroupFailure as failure:
            self.failure = failure
            self.state = State.RECOVER
        log.debug("coordinator %s -> %s (epoch %d)", previous.value, self.state.value, self.epoch)
        return previous, self.state

    def _after_epoch(self) -> State:
        return State.TRAIN if self.epoch < self.config.epochs else State.DONE

    # ---- handlers -----------------------------------------------------------------------------
    def _start(self) -> State:
        self.ckpt, self.history = self.recorder.begin(self.config.resume)
        if self.ckpt is not None and len(self.ckpt.rng_by_rank) != self.world_size:
            raise ValueError(
                f"checkpoint in {self.recorder.run_dir} has {len(self.ckpt.rng_by_rank)} ranks "
                f"but this run has {self.world_size}; resume with the same --parts"
            )
        self.epoch = 0 if self.ckpt is None else self.ckpt.epoch + 1
        return State.SPAWN

    def _spawn(self) -> State:
        self._stop_group()
        self.group = self.make_group(self.restarts)
        self.num_batches = self.group.start()
        if self.ckpt is not None:
            self.group.load(self.ckpt)
        return self._after_epoch()

    def _train(self) -> State:
        assert self.group is not None
        bar = tqdm(
            total=self.num_batches,
            desc=f"epoch {self.epoch}",
            unit="batch",
            disable=not self.config.progress,
            leave=False,
        )
        start = time.perf_counter()
        logged = [start]

        def update(done: int) -> None:
            bar.update(done - bar.n)
            now = time.perf_counter()
            if not self.config.progress and now - logged[0] >= PROGRESS_LOG_S:
                logged[0] = now
                log.info(
                    "epoch %d: %d/%d batches after %.0fs",
                    self.epoch,
                    done,
                    self.num_batches,
                    now - start,
                )

        try:
            self._reports = self.group.run_epoch(self.epoch, self.num_batches, update)
        finally:
            bar.close()
        self._epoch_seconds = time.perf_counter() - start
        return State.EVALUATE

    def _evaluate(self) -> State:
        assert self.group is not None
        last = self.config.epochs - 1
        self._evaluation = EvalResult(metrics={})
        if self.evaluation.due(self.epoch, last):
            splits = self.evaluation.splits(self.epoch, last)
            self._evaluation = combine_evals(self.group.evaluate(splits), self.num_classes)
        return State.RECORD

    def _record(self) -> State:
        assert self.group is not None
        states = self.group.collect()
        metrics = epoch_metrics(
            self.epoch,
            self._reports,
            self._evaluation,
            epoch_seconds=self._epoch_seconds,
            num_batches=self.num_batches,
            restarts=self.restarts,
        )
        self.history.append(metrics)
        self.recorder.append(metrics)
        self.ckpt = Checkpoint(
            epoch=self.epoch,
            model_state=states[0].model,
            optimizer_state=states[0].optimizer,
            rng_by_rank=[s.rng for s in states],
            best_val_acc=self._best_value(),
        )
        self.recorder.save(self.ckpt)
        shown = {k: v for k, v in metrics.evaluation.items() if v is not None}
        log.info(
            "epoch %d: loss %.4f %s (%.1fs)",
            self.epoch,
            metrics.loss,
            " ".join(f"{k} {v:.4f}" for k, v in shown.items()),
            metrics.seconds["total"],
        )
        self.epoch += 1
        return self._after_epoch()

    def _recover(self) -> State:
        assert self.failure is not None
        found = self.failure.blame()
        status = FailureStatus(
            found.kind,
            self.failure.errors_by_rank,
            self.restarts,
            self.ckpt is not None,
            causes=found.causes,
            victims=found.victims,
            detail=self.failure.detail,
        )
        decision = self.policy.decide(status)
        log.warning("failure (%s): %s", status.kind.value, decision.reason)
        self.failures.append(
            {
                "time": time.time(),
                "epoch": self.epoch,
                "kind": status.kind.value,
                "causes": list(status.causes),
                "victims": list(status.victims),
                "action": decision.action.value,
                "reason": decision.reason,
            }
        )
        self._stop_group()
        if decision.action is FailureAction.ABORT:
            self.error = WorkerFailedError(status.errors_by_rank, decision.reason, found.victims)
            return State.FAILED
        self.restarts += 1
        self.ckpt = self.recorder.last_checkpoint() if self.ckpt is not None else None
        self.epoch = 0 if self.ckpt is None else self.ckpt.epoch + 1
        self.history = [m for m in self.history if m.epoch < self.epoch]
        return State.SPAWN

    # ---- helpers ------------------------------------------------------------------------------
    def _stop_group(self) -> None:
        if self.group is not None:
            self.group.stop()
            self.group = None

    def _best_value(self) -> float:
        """Best validation value of the selection metric so far (-1 before any evaluation)."""
        key = f"val_{self.metric}"
        values = [m.evaluation.get(key) for m in self.history]
        return max((float(v) for v in values if v is not None), default=-1.0)

    def best(self) -> EpochMetrics | None:
        """The evaluated epoch with the best validation metric (the earliest on ties)."""
        key = f"val_{self.metric}"
        scored = [m for m in self.history if m.evaluation.get(key) is not None]
        if not scored:
            return None
        return max(scored, key=lambda m: float(m.evaluation[key] or 0.0))
