"""The driver's control loop: an explicit state machine that decides, then has the group execute.

States and transitions (``_step`` runs one handler and returns ``(previous, next)``)::

    START -> SPAWN -> TRAIN -> RECORD -> TRAIN ... -> DONE
                ^       |         |
                |       v         v
                +---- RECOVER ----+ -> FAILED

``RECORD`` evaluates exactly on the driver (layer-wise over the whole graph), appends one line
to ``metrics.jsonl`` and writes the checkpoint, in that order, so a checkpoint of epoch ``e``
always has ``e``'s metrics line. ``RECOVER`` asks the pure ``FailurePolicy``; a restart kills
the whole group, re-creates it and reloads the last checkpoint.
"""

from __future__ import annotations

import enum
import json
import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from gnnsys.errors import WorkerFailedError
from gnnsys.models import build_model
from gnnsys.train.control.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from gnnsys.train.control.failure import FailureAction, FailurePolicy
from gnnsys.train.control.ray_group import ActorGroup, GroupFailure, Resources
from gnnsys.train.remote.ledger import LedgerSnapshot
from gnnsys.train.trainer import full_block, full_graph_logits
from gnnsys.train.worker import WorkerEpochReport, WorkerSpec
from gnnsys.types import Graph

__all__ = ["Coordinator", "State"]

log = logging.getLogger(__name__)

METRICS_NAME = "metrics.jsonl"


class State(enum.Enum):
    """Where the coordinator is; see the module docstring for the transitions."""

    START = "start"
    SPAWN = "spawn"
    TRAIN = "train"
    RECORD = "record"
    RECOVER = "recover"
    DONE = "done"
    FAILED = "failed"


class Coordinator:
    """Runs ``epochs`` epochs on an :class:`ActorGroup`, recovering per the failure policy.

    Args:
        config: Loop settings.
        template: Worker spec of rank 0 (``world_size`` = number of parts).
        policy: Decides restart or abort on a failure.
        run_dir: Where ``metrics.jsonl`` and ``checkpoint.pt`` go.
        eval_graph: The whole graph with features, labels and masks, for exact evaluation.
    """

    @dataclass(frozen=True, kw_only=True, slots=True)
    class Config:
        """Driver-loop settings."""

        epochs: int = 3
        """Epochs to train (a resumed run continues up to this count)."""
        deadline_s: float = 120.0
        """Deadline of every remote call, and longest time without a finished batch."""
        resume: bool = False
        """Continue from ``run_dir/checkpoint.pt`` (else start fresh, removing old files)."""
        progress: bool = True
        """Show a tqdm bar per epoch on the driver."""
        resources: Resources = Resources()
        """Logical CPUs per actor."""

        def __post_init__(self) -> None:
            if self.epochs < 1:
                raise ValueError(f"epochs={self.epochs}; choose epochs >= 1")
            if self.deadline_s <= 0:
                raise ValueError(f"deadline_s={self.deadline_s}; choose a positive deadline")

    def __init__(
        self,
        config: Config,
        *,
        template: WorkerSpec,
        policy: FailurePolicy,
        run_dir: Path,
        eval_graph: Graph,
    ) -> None:
        self.config, self.template, self.policy = config, template, policy
        self.run_dir, self.graph = Path(run_dir), eval_graph
        self.state = State.START
        self.epoch = 0
        self.restarts = 0
        self.num_batches = 0
        self.history: list[dict[str, Any]] = []
        self.group: ActorGroup | None = None
        self.ckpt: Checkpoint | None = None
        self.failure: GroupFailure | None = None
        self.error: Exception | None = None
        self._reports: list[WorkerEpochReport] = []
        self._evaluator: Evaluator | None = None
        self._epoch_seconds = 0.0

    # ---- loop ---------------------------------------------------------------------------------
    def run(self) -> list[dict[str, Any]]:
        """Drive the state machine to ``DONE`` and return every epoch's metrics.

        Raises:
            WorkerFailedError: The policy aborted; the message has each failed rank's traceback.
        """
        try:
            while self.state not in (State.DONE, State.FAILED):
                self._step()
        finally:
            self._kill_group()
        if self.error is not None:
            raise self.error
        return self.history

    def _step(self) -> tuple[State, State]:
        """Run the current state's handler; returns ``(previous, next)``."""
        handlers = {
            State.START: self._start,
            State.SPAWN: self._spawn,
            State.TRAIN: self._train,
            State.RECORD: self._record,
            State.RECOVER: self._recover,
        }
        previous = self.state
        self.state = handlers[previous]()
        log.debug("coordinator %s -> %s (epoch %d)", previous.value, self.state.value, self.epoch)
        return previous, self.state

    # ---- handlers -----------------------------------------------------------------------------
    def _start(self) -> State:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        metrics = self.run_dir / METRICS_NAME
        if self.config.resume:
            self.ckpt = load_checkpoint(self.run_dir)
        else:
            (self.run_dir / "checkpoint.pt").unlink(missing_ok=True)
        if self.ckpt is not None and len(self.ckpt.rng_by_rank) != self.template.world_size:
            raise ValueError(
                f"checkpoint in {self.run_dir} has {len(self.ckpt.rng_by_rank)} ranks but this "
                f"run has {self.template.world_size}; resume with the same --parts"
            )
        self.epoch = 0 if self.ckpt is None else self.ckpt.epoch + 1
        kept = _read_metrics(metrics) if self.ckpt is not None else []
        self.history = [m for m in kept if m["epoch"] < self.epoch]
        metrics.write_text("".join(json.dumps(m) + "\n" for m in self.history))
        return State.SPAWN

    def _spawn(self) -> State:
        self._kill_group()
        spec = replace(self.template, attempt=self.restarts)
        try:
            self.group = ActorGroup(spec, self.config.resources, self.config.deadline_s)
            if self.ckpt is not None:
                self.group.load(self.ckpt)
            self.num_batches = self.group.num_batches()
        except GroupFailure as failure:
            self.failure = failure
            return State.RECOVER
        return State.TRAIN if self.epoch < self.config.epochs else State.DONE

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
        try:
            self._reports = self.group.train_epoch(
                self.epoch, self.num_batches, lambda done: bar.update(done - bar.n)
            )
        except GroupFailure as failure:
            self.failure = failure
            return State.RECOVER
        finally:
            bar.close()
        self._epoch_seconds = time.perf_counter() - start
        return State.RECORD

    def _record(self) -> State:
        assert self.group is not None
        try:
            states = self.group.states()
        except GroupFailure as failure:
            self.failure = failure
            return State.RECOVER
        start = time.perf_counter()
        if self._evaluator is None:
            self._evaluator = Evaluator(self.graph, self.template)
        accs = self._evaluator.accuracies(states[0]["model"])
        metrics = self._metrics(accs, time.perf_counter() - start)
        self.history.append(metrics)
        with open(self.run_dir / METRICS_NAME, "a") as fh:
            fh.write(json.dumps(metrics) + "\n")
        best = max(m["val_acc"] for m in self.history)
        self.ckpt = Checkpoint(
            epoch=self.epoch,
            model_state=states[0]["model"],
            optimizer_state=states[0]["optimizer"],
            rng_by_rank=[s["rng"] for s in states],
            best_val_acc=best,
        )
        save_checkpoint(self.run_dir, self.ckpt)
        log.info(
            "epoch %d: loss %.4f val_acc %.4f test_acc %.4f (%.1fs)",
            self.epoch,
            metrics["loss"],
            metrics["val_acc"],
            metrics["test_acc"],
            metrics["seconds"]["total"],
        )
        self.epoch += 1
        return State.TRAIN if self.epoch < self.config.epochs else State.DONE

    def _recover(self) -> State:
        assert self.failure is not None
        status = self.failure.status(self.restarts, self.ckpt is not None)
        decision = self.policy.decide(status)
        log.warning("failure (%s): %s", status.kind.value, decision.reason)
        self._kill_group()
        if decision.action is FailureAction.ABORT:
            self.error = WorkerFailedError(status.errors_by_rank)
            return State.FAILED
        self.restarts += 1
        self.ckpt = load_checkpoint(self.run_dir) if self.ckpt is not None else None
        self.epoch = 0 if self.ckpt is None else self.ckpt.epoch + 1
        self.history = [m for m in self.history if m["epoch"] < self.epoch]
        return State.SPAWN

    # ---- helpers ------------------------------------------------------------------------------
    def _kill_group(self) -> None:
        if self.group is not None:
            self.group.kill()
            self.group = None

    def _metrics(self, accs: dict[str, float], eval_seconds: float) -> dict[str, Any]:
        """One ``metrics.jsonl`` object from the ranks' reports."""
        return epoch_metrics(
            self.epoch,
            self._reports,
            accs,
            epoch_seconds=self._epoch_seconds,
            eval_seconds=eval_seconds,
            num_batches=self.num_batches,
            restarts=self.restarts,
        )


def epoch_metrics(
    epoch: int,
    reports: list[WorkerEpochReport],
    accs: dict[str, float],
    *,
    epoch_seconds: float,
    eval_seconds: float,
    num_batches: int,
    restarts: int,
) -> dict[str, Any]:
    """One ``metrics.jsonl`` object from the ranks' reports (shared with the local executor).

    ``bytes``/``messages`` are the epoch's traffic summed over ranks; ``warmup_bytes`` is the
    traffic before epoch 0 (presample dry run, cache prefetch), repeated on every line;
    ``cache`` sums the ranks' cache counters over the epoch (absent without a cache).
    """
    seeds = sum(r.stats.num_seeds for r in reports)
    traffic = sum((r.traffic for r in reports), LedgerSnapshot())
    warmup = sum((r.warmup for r in reports), LedgerSnapshot())
    split = {
        key: sum(r.stats.seconds[key] for r in reports) / len(reports)
        for key in ("sample", "fetch", "compute", "sync")
    }
    metrics: dict[str, Any] = {
        "epoch": epoch,
        "loss": sum(r.stats.loss_sum for r in reports) / max(seeds, 1),
        **accs,
        "batch_train_acc": sum(r.stats.num_correct for r in reports) / max(seeds, 1),
        "seconds": {"total": epoch_seconds, **split, "eval": eval_seconds},
        "bytes": traffic.bytes,
        "messages": traffic.messages,
        "counts": traffic.counts,
        "warmup_bytes": warmup.bytes,
        "num_batches": num_batches,
        "peak_rss_bytes": [r.peak_rss_bytes for r in reports],
        "num_ray_nodes": len({r.node_id for r in reports}),
        "restarts": restarts,
    }
    counters = [r.cache for r in reports if r.cache is not None]
    if counters:
        cache: dict[str, float] = dict(sum(counters[1:], counters[0]).to_json())
        looked = cache["rows_requested"]
        cache["hit_rate"] = cache["rows_hit"] / looked if looked else 0.0
        metrics["cache"] = cache
    return metrics


class Evaluator:
    """Exact accuracy of a model state on the train, val and test masks (driver side).

    Holds one model, the whole-graph block and the features; costs one ``[N, H]`` activation per
    layer while evaluating.
    """

    def __init__(self, graph: Graph, spec: WorkerSpec) -> None:
        if graph.x is None or graph.y is None:
            raise ValueError("exact evaluation needs a graph with x and y; rewrite the store")
        self.graph = graph
        self.model = build_model(
            spec.model, spec.num_features, spec.num_classes, len(spec.sampler.fanouts)
        )
        self.block = full_block(graph.indptr, graph.indices, graph.num_nodes)
        self.x_NF = torch.from_numpy(np.asarray(graph.x, dtype=np.float32))
        self.y_N = torch.from_numpy(graph.y)

    def accuracies(self, model_state: dict[str, Any]) -> dict[str, float]:
        """``{"train_acc", "val_acc", "test_acc"}`` (0.0 for a split without nodes)."""
        self.model.load_state_dict(model_state)
        hit_N = full_graph_logits(self.model, self.block, self.x_NF).argmax(-1) == self.y_N
        out = {}
        for split in ("train", "val", "test"):
            mask = getattr(self.graph, f"{split}_mask")
            hits = hit_N[torch.from_numpy(mask)] if mask is not None else hit_N[:0]
            out[f"{split}_acc"] = float(hits.float().mean()) if hits.numel() else 0.0
        return out


def _read_metrics(path: Path) -> list[dict[str, Any]]:
    """Parsed lines of ``metrics.jsonl`` (empty when missing)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
