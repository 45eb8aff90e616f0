"""Liveness: a rank that dies or freezes (in start-up, an epoch or evaluation) is named as the
cause, killed and restarted, and the run ends with the metrics of an uninterrupted run.

Faults are injected inside the rank (``FaultSpec``: ``exit`` is ``os._exit``, ``freeze`` is a
``SIGSTOP`` of its own process), on the first attempt only. ``benchmarks/chaos.py`` does the
same from outside, with signals at random moments, for trainers and owners.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gnnsys.config import RunConfig
from gnnsys.train.control.run import train
from gnnsys.train.eval.evaluate import EvalConfig
from gnnsys.train.worker import FaultSpec
from tests.train.run_configs import sbm_run

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("shared_stores")]  # stores: conftest

HEARTBEAT_S = 3.0
DEADLINE_S = 120.0


def _config() -> RunConfig:
    return sbm_run(
        num_nodes=600, num_features=8, parts=2, fanouts=(4, 4), hidden=16, batch_size=16,
        epochs=3, deadline_s=DEADLINE_S,
        loop={"heartbeat_s": HEARTBEAT_S, "startup_deadline_s": 110.0},
    )  # fmt: skip


def _losses(run_dir: Path) -> list[tuple[int, float, Any]]:
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(m["epoch"], m["loss"], m.get("val_acc")) for m in lines]


@pytest.fixture(scope="module")
def reference(ray_session: Any, tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    run_dir = tmp_path_factory.mktemp("liveness-ref")
    train(_config(), run_dir)
    return _losses(run_dir)


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("fault", "kind", "cause"),
    [
        (FaultSpec("freeze", rank=1, epoch=1, batch=1), "unresponsive", "rank 1"),
        pytest.param(  # deaths in an epoch: test_distributed; this start-up one runs with --all
            FaultSpec("exit", rank=0, epoch=-1), "died", "rank 0", marks=pytest.mark.slow
        ),
        pytest.param(  # start-up freezes: also the chaos benchmark's; runs with --all
            FaultSpec("freeze", rank=1, epoch=-1), "unresponsive", "rank 1", marks=pytest.mark.slow
        ),
        pytest.param(  # the heartbeat of freeze-epoch at another call site; runs with --all
            FaultSpec("freeze", rank=0, epoch=1, batch=-1),
            "unresponsive",
            "rank 0",
            marks=pytest.mark.slow,
        ),
    ],
    ids=["freeze-epoch", "exit-startup", "freeze-startup", "freeze-eval"],
)
def test_fault_is_named_restarted_and_lossless(
    reference: list[Any], tmp_path: Path, fault: FaultSpec, kind: str, cause: str
) -> None:
    start = time.time()
    result = train(_config(), tmp_path, fault=fault)
    assert _losses(tmp_path) == reference  # every epoch once, identical to the clean run
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["restarts"] == 1
    [failure] = summary["failures"]
    assert (failure["kind"], failure["causes"], failure["action"]) == (kind, [cause], "restart")
    assert f"{cause} " in failure["reason"] and "victim" not in failure["reason"]
    assert result.summary["failures"] == summary["failures"]
    # Noticed before any deadline: a freeze after the heartbeat timeout (in start-up too: the
    # stopped process is seen on this node), a death at once.
    assert failure["time"] - start < DEADLINE_S / 2


@pytest.mark.timeout(300)
def test_an_evaluation_layer_longer_than_the_deadline_runs_while_it_progresses(
    ray_session: Any, tmp_path: Path
) -> None:
    """A layer is one call; the driver waits while its evaluation steps move, not a deadline.

    Every owner call of rank 0 waits 0.4 s (a ``delay`` fault), and blocked spans of at most
    100 source rows fetch their halo rows span by span: its 120 nodes take 8 spans, so its one
    layer's evaluation call runs about 3.2 s, past the 2 s deadline.
    """
    cfg = sbm_run(
        num_nodes=240, num_features=8, parts=2, fanouts=(4,), hidden=16, batch_size=128,
        epochs=1, deadline_s=2.0, loop={"heartbeat_s": 1.0, "startup_deadline_s": 110.0},
        eval=EvalConfig(block_mb=100 * 8 * 4 / 2**20),
    )  # fmt: skip
    cfg = replace(cfg, cluster=replace(cfg.cluster, owner_reads="remote"))
    start = time.monotonic()
    result = train(cfg, tmp_path, fault=FaultSpec("delay", rank=0, epoch=0, delay_s=0.4))
    assert time.monotonic() - start > 2.0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["failures"] == [] and summary["restarts"] == 0
    assert result.summary["failures"] == []
    assert json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])["test_acc"] > 0
