"""Ctrl-C or a SIGKILLed driver tears everything down: no process of the run's Ray session left.

A process belongs to the run's Ray session when its command line or open files name the session
directory (``watchdog.session_of``), not only by its session id: that is how processes escaped
before (the raylet's agents, reparented to init, in the driver's session but found by neither).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from gnnsys.train.control import watchdog

pytestmark = pytest.mark.ray

_TRAIN = [
    sys.executable, "-m", "gnnsys", "train", "synthetic:sbm", "--num-nodes", "1000",
    "--parts", "2", "--partitioner", "random", "--fanouts", "5,5", "--hidden", "16",
    "--batch-size", "64", "--epochs", "500", "--eval-every", "0", "--no-progress",
]  # fmt: skip


def _session_members(sid: int) -> list[psutil.Process]:
    out = []
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) == sid:
                out.append(proc)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return out


def _ray_session_members(session_dir: str) -> list[psutil.Process]:
    """Live (not zombie) Ray processes of ``session_dir``, and any process whose command line
    names it (the watchdog's does)."""
    out = []
    for proc in psutil.process_iter():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and (
                watchdog.session_of(proc) == session_dir or session_dir in " ".join(proc.cmdline())
            ):
                out.append(proc)
        except psutil.Error:
            continue
    return out


def _start_training(tmp_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start a long run in a new session; returns it and its Ray session directory once the
    first epoch's metrics are written."""
    log = tmp_path / "stderr.log"  # a file, not a pipe: an unread pipe blocks a chatty child
    with log.open("w") as err:
        proc = subprocess.Popen(
            [*_TRAIN, "--out", str(tmp_path / "run")],
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
    sessions = {watchdog.session_of(p) for p in psutil.Process(proc.pid).children()} - {None}
    assert len(sessions) == 1, sessions
    return proc, str(sessions.pop())


def _wait_gone(session_dir: str, timeout: float) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    while (left := _ray_session_members(session_dir)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.mark.timeout(240)
def test_ctrl_c_kills_every_actor_and_ray(tmp_path: Path) -> None:
    proc, session_dir = _start_training(tmp_path)
    log = tmp_path / "stderr.log"
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
    assert not _wait_gone(session_dir, 10), log.read_text()[-3000:]  # the watchdog exited too


@pytest.mark.timeout(240)
def test_driver_sigkill_leaves_no_ray_process_and_no_shared_memory(tmp_path: Path) -> None:
    shm_before = set(os.listdir("/dev/shm"))
    proc, session_dir = _start_training(tmp_path)
    members = _ray_session_members(session_dir)
    names = sorted(p.name() for p in members)
    assert "raylet" in names and any(n.startswith("ray::") for n in names), names
    mapped = watchdog.mapped_shm_files(set(members))
    proc.kill()  # SIGKILL, the driver alone: nothing of it runs, no handler, no atexit
    killed_at = time.monotonic()
    proc.wait()
    left = _wait_gone(session_dir, 15)
    took = time.monotonic() - killed_at
    if left:  # do not leak into the next tests, then fail
        for p in left:
            p.kill()
    assert not left, f"left {took:.1f} s after the SIGKILL: {[(p.pid, p.name()) for p in left]}"
    print(f"all {len(members)} processes of {session_dir} gone {took:.2f} s after the SIGKILL")
    assert not [p for p in mapped if os.path.exists(p)]
    new_shm = set(os.listdir("/dev/shm")) - shm_before
    assert not [n for n in new_shm if "plasma" in n or "ray" in n.lower()], new_shm
