"""A short seeded subset of ``benchmarks/chaos.py`` (the full run: N >= 50 faults, docs).

One run, faults from outside as a user's processes suffer them: a shard owner frozen during an
epoch (named as the cause, killed, the group restarted), then, once the group recovered, a
random trainer or owner killed or frozen. It must end with exit code 0, every epoch once,
metrics identical to the fault-free run, each fault's cause named and nothing of the run's Ray
session left. (A driver SIGKILL is ``test_teardown``'s; faults inside a rank are
``test_liveness``'s.)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.timeout(600)
def test_chaos_subset(tmp_path: Path) -> None:
    cmd = [
        sys.executable, str(ROOT / "benchmarks" / "chaos.py"), "--n", "1", "--seed", "0",
        "--epochs", "6", "--heartbeat", "3", "--kinds", "freeze-owner", "--extra-faults", "1",
        "--out", str(tmp_path / "c"),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=580, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    [run], summary = lines[:-1], lines[-1]
    assert summary["ok"] == 1 and summary["faults_total"] == 2, lines  # injected, handled
    assert run["leftover_pids"] == [] and run["identical"] and run["epochs_once"], run
    assert run["kind"] == "unresponsive" and run["causes"][0].startswith("owner of part"), run
    [extra] = run["extra"]
    assert extra["handled"] and extra["detect_s"] is not None, run
