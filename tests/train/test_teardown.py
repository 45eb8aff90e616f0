"""Ctrl-C tears everything down: exit code 130 and no process of the run's session left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.ray


def _session_members(sid: int) -> list[psutil.Process]:
    out = []
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) == sid:
                out.append(proc)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return out


@pytest.mark.timeout(240)
def test_ctrl_c_kills_every_actor_and_ray(tmp_path: Path) -> None:
    cmd = [
        sys.executable, "-m", "gnnsys", "train", "synthetic:sbm", "--num-nodes", "1000",
        "--parts", "2", "--partitioner", "random", "--fanouts", "5,5", "--hidden", "16",
        "--batch-size", "8", "--epochs", "500", "--out", str(tmp_path / "run"), "--no-progress",
    ]  # fmt: skip
    log = tmp_path / "stderr.log"  # a file, not a pipe: an unread pipe blocks a chatty child
    with log.open("w") as err:
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
            # a suite started as a background job ignores SIGINT, and children inherit that
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    metrics = tmp_path / "run" / "metrics.jsonl"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not (metrics.exists() and metrics.read_text()):
        assert proc.poll() is None, log.read_text()
        time.sleep(0.2)
    assert len(_session_members(proc.pid)) > 2  # driver, Ray daemons and actors are running
    proc.send_signal(signal.SIGINT)
    try:
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert code == 130
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _session_members(proc.pid):
        time.sleep(0.5)
    left = [(p.pid, p.name()) for p in _session_members(proc.pid)]
    if left:  # do not leak into the next tests, then fail
        os.killpg(proc.pid, signal.SIGKILL)
    assert not left, f"processes left behind: {left}"
