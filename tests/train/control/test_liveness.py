"""Liveness: a rank that dies or freezes (in start-up, an epoch or evaluation) is named as the
cause, killed and restarted, and the run ends with the metrics of an uninterrupted run.

Faults are injected inside the rank (``FaultSpec``: ``exit`` is ``os._exit``, ``freeze`` is a
``SIGSTOP`` of its own process), on the first attempt only. ``benchmarks/chaos.py`` does the
same from outside, with signals at random moments, for trainers and owners.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from gnnsys.config import RunConfig
from gnnsys.train.control.run import train
from gnnsys.train.worker import FaultSpec
from tests.train.run_configs import sbm_run

pytestmark = pytest.mark.ray

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
