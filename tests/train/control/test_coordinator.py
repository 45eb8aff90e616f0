"""The coordinator's state machine over a fake ``WorkerGroup``: no Ray, no model."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from gnnsys.errors import WorkerFailedError
from gnnsys.train.control import coordinator as coordinator_module
from gnnsys.train.control.checkpoint import Checkpoint
from gnnsys.train.control.coordinator import Coordinator, State
from gnnsys.train.control.failure import FailureKind, FailurePolicy
from gnnsys.train.control.group import GroupFailure
from gnnsys.train.control.recorder import EpochMetrics, Recorder
from gnnsys.train.eval.evaluate import EvalConfig, RankEval
from gnnsys.train.remote.ledger import LedgerSnapshot
from gnnsys.train.schedule import EpochStats
from gnnsys.train.worker import RankState, WorkerEpochReport

pytestmark = pytest.mark.usefixtures("shared_stores")  # runs share their stores (conftest)


class FakeGroup:
    """Two ranks; fails as scripted: ``fail_at[(call, epoch)] = kinds_by_rank``."""

    def __init__(self, log: list[str], fail_at: dict[tuple[str, int], dict[int, FailureKind]]):
        self.log, self.fail_at, self.epoch, self.loaded = log, fail_at, -1, None

    def _maybe_fail(self, call: str, epoch: int) -> None:
        kinds = self.fail_at.pop((call, epoch), None)
        if kinds is not None:
            raise GroupFailure(kinds, {r: f"{k.value} at {call} {epoch}" for r, k in kinds.items()})

    def start(self) -> int:
        self.log.append("start")
        self._maybe_fail("start", -1)
        return 3

    def load(self, ckpt: Checkpoint) -> None:
        self.log.append(f"load {ckpt.epoch}")
        self.loaded = ckpt.epoch

    def run_epoch(
        self, epoch: int, num_batches: int, on_progress: Callable[[int], None]
    ) -> list[WorkerEpochReport]:
        self.log.append(f"train {epoch}")
        self._maybe_fail("train", epoch)
        self.epoch = epoch
        on_progress(num_batches)
        stats = EpochStats(
            loss_sum=2.0,
            num_correct=1,
            num_seeds=4,
            seconds=dict.fromkeys(("sample", "fetch", "compute", "sync"), 0.0),
        )
        return [WorkerEpochReport(r, stats, LedgerSnapshot(), 1, "n") for r in range(2)]

    def evaluate(self, splits: tuple[str, ...], *, with_logits: bool = False) -> list[RankEval]:
        self.log.append(f"eval {self.epoch} {','.join(splits)}")
        self._maybe_fail("eval", self.epoch)
        right = self.epoch + 1  # accuracy grows with the epoch, except epoch 2 is the best
        right = 9 if self.epoch == 2 else right
        conf = np.array([[right, 0], [10 - right, 0]], dtype=np.int64)
        return [
            RankEval(
                r,
                dict.fromkeys(splits, conf),
                {s: np.array([0.1, 0.9]) for s in splits},
                {s: np.array([0, 1]) for s in splits},
                LedgerSnapshot(),
                0,
                0,
                0.0,
            )
            for r in range(2)
        ]

    def collect(self) -> list[RankState]:
        self.log.append("collect")
        w = torch.tensor([float(self.epoch)])
        return [RankState(model={"w": w}, optimizer={}, rng={"torch": torch.get_rng_state()})] * 2

    def stop(self) -> None:
        self.log.append("stop")


def _coordinator(
    tmp_path: Path,
    fail_at: dict[tuple[str, int], dict[int, FailureKind]] | None = None,
    *,
    epochs: int = 3,
    resume: bool = False,
    evaluation: EvalConfig | None = None,
) -> tuple[Coordinator, list[str]]:
    log: list[str] = []
    shared_failures = dict(fail_at or {})
    coordinator = Coordinator(
        Coordinator.Config(epochs=epochs, progress=False, resume=resume),
        make_group=lambda attempt: FakeGroup(log, shared_failures),
        policy=FailurePolicy(FailurePolicy.Config(max_restarts=2)),
        recorder=Recorder(tmp_path),
        evaluation=evaluation or EvalConfig(metric="acc"),
        num_classes=2,
        world_size=2,
    )
    return coordinator, log


def _lines(tmp_path: Path) -> list[dict[str, object]]:
    return [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]


def test_runs_every_epoch_in_order(tmp_path: Path) -> None:
    coordinator, log = _coordinator(tmp_path)
    history = coordinator.run()
    assert [m.epoch for m in history] == [0, 1, 2]
    assert log[:5] == ["start", "train 0", "eval 0 train,val,test", "collect", "train 1"]
    assert log[-1] == "stop"
    assert [line["epoch"] for line in _lines(tmp_path)] == [0, 1, 2]
    assert coordinator.best() is history[2]


def test_progress_is_logged_without_a_bar(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """No terminal (a batch job's log): the driver logs batches done instead of a bar."""
    monkeypatch.setattr(coordinator_module, "PROGRESS_LOG_S", 0.0)
    coordinator, _ = _coordinator(tmp_path, epochs=1)
    with caplog.at_level("INFO", logger=coordinator_module.__name__):
        coordinator.run()
    lines = [r.getMessage() for r in caplog.records if "batches after" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("epoch 0: 3/3 batches after "), lines


def test_step_returns_transitions(tmp_path: Path) -> None:
    coordinator, _ = _coordinator(tmp_path, epochs=1)
    seen = []
    while coordinator.state is not State.DONE:
        seen.append(coordinator._step())
    assert seen == [
        (State.START, State.SPAWN),
        (State.SPAWN, State.TRAIN),
        (State.TRAIN, State.EVALUATE),
        (State.EVALUATE, State.RECORD),
        (State.RECORD, State.DONE),
    ]


def test_death_restarts_from_last_checkpoint(tmp_path: Path) -> None:
    died = {0: FailureKind.DIED, 1: FailureKind.RAISED}  # a dead peer makes the other raise
    coordinator, log = _coordinator(tmp_path, {("train", 2): died})
    history = coordinator.run()
    assert coordinator.restarts == 1
    assert [m.epoch for m in history] == [0, 1, 2]
    assert "load 1" in log  # the new group got epoch 1's checkpoint
    assert [line["epoch"] for line in _lines(tmp_path)] == [0, 1, 2]


def test_raise_aborts_with_every_rank(tmp_path: Path) -> None:
    coordinator, log = _coordinator(tmp_path, {("eval", 1): {1: FailureKind.RAISED}})
    with pytest.raises(WorkerFailedError, match="raised at eval 1"):
        coordinator.run()
    assert coordinator.state is State.FAILED
    assert log[-1] == "stop"
    assert [line["epoch"] for line in _lines(tmp_path)] == [0]


def test_failed_start_is_recovered_like_any_step(tmp_path: Path) -> None:
    coordinator, log = _coordinator(tmp_path, {("start", -1): {0: FailureKind.DIED}})
    coordinator.run()
    assert log.count("start") == 2 and coordinator.restarts == 1


def test_resume_continues_after_checkpoint(tmp_path: Path) -> None:
    first, _ = _coordinator(tmp_path, epochs=2)
    first.run()
    again, log = _coordinator(tmp_path, epochs=4, resume=True)
    history = again.run()
    assert "train 0" not in log and "load 1" in log
    assert [m.epoch for m in history] == [0, 1, 2, 3]
    assert [line["epoch"] for line in _lines(tmp_path)] == [0, 1, 2, 3]


def test_eval_every_and_test_at_end(tmp_path: Path) -> None:
    coordinator, log = _coordinator(
        tmp_path, epochs=4, evaluation=EvalConfig(every=2, test_at_end=True, metric="acc")
    )
    history = coordinator.run()
    assert [x for x in log if x.startswith("eval")] == ["eval 1 train,val", "eval 3 train,val,test"]
    assert "val_acc" not in history[0].evaluation and "test_acc" not in history[1].evaluation
    assert history[3].evaluation["test_acc"] == pytest.approx(0.4)
    assert history[1].evaluation["val_auc"] == 1.0


def test_epoch_metrics_round_trip(tmp_path: Path) -> None:
    coordinator, _ = _coordinator(tmp_path, epochs=1)
    (metrics,) = coordinator.run()
    assert EpochMetrics.from_json(metrics.to_json()).to_json() == metrics.to_json()


def test_worst_failure_is_the_policys() -> None:
    worst = FailurePolicy.worst
    assert worst([FailureKind.RAISED, FailureKind.DIED]) is FailureKind.DIED
    assert worst([FailureKind.TIMEOUT, FailureKind.RAISED]) is FailureKind.RAISED
    assert worst([FailureKind.TIMEOUT]) is FailureKind.TIMEOUT
    with pytest.raises(ValueError, match="at least one"):
        worst([])
