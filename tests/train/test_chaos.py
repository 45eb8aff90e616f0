"""A short seeded subset of ``benchmarks/chaos.py`` (the full run: N >= 50 faults, docs).

Two runs from outside, as a user's processes suffer them: a shard owner frozen during an epoch
(named as the cause, killed, the group restarted) and the driver SIGKILLed during an epoch, then
``--resume`` (the watchdog ends the run's Ray processes). Each must end with exit code 0, every
epoch once, metrics identical to the fault-free run and nothing left behind.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(600)
def test_chaos_subset(tmp_path: Path) -> None:
    cmd = [
        sys.executable, str(ROOT / "benchmarks" / "chaos.py"), "--n", "2", "--seed", "0",
        "--epochs", "4", "--heartbeat", "3", "--kinds", "freeze-owner,kill-driver",
        "--out", str(tmp_path / "c"),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=580, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    runs, summary = lines[:-1], lines[-1]
    assert summary["runs"] == 2 and summary["ok"] == 2, lines  # injected, handled, identical
    assert {r["fault"] for r in runs} == {"freeze-owner", "kill-driver"}, runs
    for run in runs:
        assert run["leftover_pids"] == [] and run["shm_left"] == [], run
        if run["fault"] == "freeze-owner":
            assert run["kind"] == "unresponsive" and run["causes"][0].startswith("owner of part")
            assert run["detect_s"] is not None, run
