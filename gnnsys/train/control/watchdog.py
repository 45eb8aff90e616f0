"""Ends a local run's Ray processes when its driver dies, and finds those an earlier run left.

Why (Ray 2.60, measured; docs/training.md, "Ray processes when the driver dies"): Ray ties the
processes the driver starts (gcs_server, raylet, dashboard, monitor, log monitor) to the driver
with ``PR_SET_PDEATHSIG`` (``ray._private.services.start_ray_process(fate_share=True)``), so a
SIGKILLed driver takes them along, and the workers exit when their raylet does. The raylet's own
children do not share its fate that way: ``ray::DashboardAgent`` and ``ray::RuntimeEnvAgent``
notice the dead raylet (``ray._private.process_watcher``), then block publishing that error to the
dead GCS and stay alive, reparented to init, for more than a minute (measured: 67-85 s).

``connect`` therefore starts this file as a script (``python -I watchdog.py``, not ``-m``: the
package's ``__init__`` imports numpy and more, and a watchdog should cost ~15 MiB) in its own
session, with a pipe on its stdin whose write end only the driver holds. The watchdog

* tracks the session's processes: the driver's descendants that belong to the session directory,
  then every 2 s their descendants (workers and agents are reparented to init when the raylet
  dies, so they must be known before);
* on EOF of the pipe, or when the driver's pid is gone or reused (create time differs), SIGKILLs
  every tracked process plus any Ray process of this user whose command line or open files name
  the session directory (:func:`session_of`), raylet first so it starts no new worker, and
  removes the ``/dev/shm`` files they had mapped that still exist (none seen with Ray 2.60);
* exits after that, or when gcs_server and raylet are gone while the driver lives (a normal
  ``ray.shutdown``), after ending any leftover of the session the same way.

A marker file per ``connect`` (``<tmp>/gnnsys-<uid>/drivers/<pid>-<ns>.json``, written before
``ray.init``) records the driver; Ray names the session ``session_<time>_<driver pid>``. A later
run's ``connect`` calls :func:`find_stale`: a session whose driver's marker names a dead driver is
provably this user's gnnsys run, orphaned, and :func:`end_stale` ends its processes.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import select
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

__all__ = [
    "StaleSession",
    "end_session",
    "end_stale",
    "find_stale",
    "mapped_shm_files",
    "marker_dir",
    "session_of",
    "write_marker",
]

POLL_S = 0.5
"""How often the driver's pid is checked besides the pipe (one stat: free)."""
TRACK_EVERY = 4
"""Polls between two scans for new session processes (a scan costs ~20 ms on a loaded 2-core
machine with 80 processes: ~1 % of a core at 2 s; the final sweep catches what a scan missed)."""
SESSION_RE = re.compile(r"(/[^\s=:'\"]*/session_(\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d)_\d+_(\d+))")
"""A Ray session directory inside a command line or path; groups: dir, start time, creator pid."""
RAY_PROGRAM_RE = re.compile(r"/ray/.*(\.py|/gcs_server|/raylet)$")
"""A Ray binary or script among a command line's first arguments."""
_ROOTS = ("gcs_server", "raylet")

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StaleSession:
    """Processes of a gnnsys run's Ray session whose driver is dead."""

    session_dir: str
    driver_pid: int
    pids: tuple[int, ...]
    marker: Path


def marker_dir() -> Path:
    """Where ``connect`` records its drivers (per user, mode 0700)."""
    return Path(tempfile.gettempdir()) / f"gnnsys-{os.getuid()}" / "drivers"


def write_marker(directory: Path | None = None) -> Path:
    """Record this process as a driver about to start a private Ray; returns the marker."""
    directory = directory or marker_dir()
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    me = psutil.Process()
    path = directory / f"{me.pid}-{time.time_ns()}.json"
    path.write_text(json.dumps({"pid": me.pid, "create_time": me.create_time()}))
    return path


def session_of(proc: psutil.Process) -> str | None:
    """The Ray session directory of ``proc`` if it is a Ray process, else ``None``.

    Found from the command line or the open files. Ray's processes are its binaries and
    scripts (``.../ray/core/src/ray/raylet/raylet``, ``.../ray/dashboard/dashboard.py``) or
    renamed ones (``ray::IDLE``). Only those count: a ``tail -f <session>/logs/raylet.out``
    must survive the session. The renamed ones are found through their stdout/stderr and log
    files, which Ray opens in ``<session>/logs``.
    """
    try:
        name, cmdline = proc.name(), proc.cmdline()
        if name.startswith("ray::"):
            links = _fd_targets(proc.pid)
            return next((m.group(1) for m in map(SESSION_RE.search, links) if m), None)
        if any(RAY_PROGRAM_RE.search(arg) for arg in cmdline[:3]):
            m = SESSION_RE.search(" ".join(cmdline))
            return m.group(1) if m else None
    except (psutil.Error, OSError):
        pass
    return None


def _fd_targets(pid: int) -> list[str]:
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            out.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:  # closed meanwhile
            continue
    return out


def _same_user() -> list[psutil.Process]:
    uid, me = os.getuid(), os.getpid()
    out = []
    for proc in psutil.process_iter(["uids"]):
        uids = proc.info["uids"]
        if proc.pid != me and uids is not None and uids.real == uid:
            out.append(proc)
    return out


def _alive(proc: psutil.Process) -> bool:
    """Running and not a zombie (``is_running`` also catches a reused pid)."""
    try:
        return bool(proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _name(proc: psutil.Process) -> str:
    try:
        return str(proc.name())
    except psutil.Error:
        return ""


def _descendants(procs: set[psutil.Process]) -> set[psutil.Process]:
    """``procs`` and all their descendants, from one scan of the process table (~5 ms).

    One scan, not ``children(recursive=True)`` per process: psutil scans the table per call.
    """
    children: dict[int, list[psutil.Process]] = {}
    for proc in psutil.process_iter(["ppid"]):
        children.setdefault(proc.info["ppid"], []).append(proc)
    out, todo = set(procs), [p.pid for p in procs]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child.pid)
    return {p for p in out if p.pid != os.getpid()}


def mapped_shm_files(procs: set[psutil.Process]) -> set[str]:
    """``/dev/shm`` files ``procs`` have mapped (``/proc/<pid>/maps``; smaps would cost ~100x)."""
    out: set[str] = set()
    for proc in procs:
        try:
            with open(f"/proc/{proc.pid}/maps") as maps:
                out.update(line.split(None, 5)[5].strip() for line in maps if "/dev/shm/" in line)
        except (OSError, IndexError):
            continue
    return {p for p in out if not p.endswith(" (deleted)")}


def _kill(procs: set[psutil.Process]) -> list[int]:
    """SIGKILL ``procs``, raylet and GCS first so no new worker starts; returns the pids hit."""
    shm, hit = mapped_shm_files(procs), []
    for proc in sorted(procs, key=lambda p: _name(p) not in _ROOTS):
        try:
            proc.kill()  # psutil refuses if the pid now names another process
            hit.append(proc.pid)
        except psutil.Error:
            continue
    deadline = time.monotonic() + 2  # not psutil.wait_procs: it waits for init to reap zombies
    while any(_alive(p) for p in procs) and time.monotonic() < deadline:
        time.sleep(0.02)
    for path in shm:
        Path(path).unlink(missing_ok=True)
    return hit


def end_session(session_dir: str, tracked: set[psutil.Process]) -> list[int]:
    """SIGKILL every process of ``session_dir``; returns their pids.

    First the tracked processes and their descendants (no scan of other processes: fast), then
    up to two rounds over this user's processes whose command line or open files name the
    session (catches a child forked between a scan and its kill; ~10 ms per 100 processes).
    """
    killed = _kill({p for p in _descendants(tracked) if _alive(p)})
    for _ in range(2):
        found = {p for p in _same_user() if _alive(p) and session_of(p) == session_dir}
        if not found:
            break
        killed += _kill(_descendants(found))
    return sorted(set(killed))


def _driver_gone(driver: psutil.Process, stdin_fd: int) -> bool:
    """Waits up to ``POLL_S`` for EOF on the driver's pipe; also checks its pid directly."""
    ready, _, _ = select.select([stdin_fd], [], [], POLL_S)
    if ready and not os.read(stdin_fd, 4096):
        return True  # EOF: the only write end died with the driver
    return not _alive(driver)


def watch(driver_pid: int, session_dir: str, marker: Path | None) -> None:
    """Track ``session_dir``'s processes until the driver or the session ends, then end them."""
    driver = psutil.Process(driver_pid)
    tracked = {p for p in _descendants({driver}) if session_of(p) == session_dir}
    tracked.discard(driver)
    roots = {p for p in tracked if _name(p) in _ROOTS}
    polls = 0
    while not _driver_gone(driver, sys.stdin.fileno()):
        polls += 1
        if polls % TRACK_EVERY == 0:
            tracked = {p for p in _descendants(tracked) if _alive(p)}
        if roots and not any(_alive(r) for r in roots):
            time.sleep(2 * POLL_S)  # a normal shutdown: let Ray's own teardown finish first
            break
    start = time.monotonic()
    killed = end_session(session_dir, tracked)
    log.info("session %s over; killed %s in %.2f s", session_dir, killed, time.monotonic() - start)
    if marker is not None:
        marker.unlink(missing_ok=True)


def _session_start(session_dir: str) -> float:
    stamp = SESSION_RE.search(session_dir)
    assert stamp is not None, session_dir  # only called on directories the regex matched
    return time.mktime(time.strptime(stamp.group(2), "%Y-%m-%d_%H-%M-%S"))


def _dead_drivers(directory: Path) -> dict[int, tuple[float, Path]]:
    """Markers whose driver is gone: pid -> (driver create time, marker)."""
    out = {}
    for path in directory.glob("*.json") if directory.is_dir() else []:
        try:
            rec = json.loads(path.read_text())
            pid, created = int(rec["pid"]), float(rec["create_time"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        # a live pid is skipped even with another create time: a new process reusing the pid
        # may have started a session of that pid, and it is not provably orphaned
        if not psutil.pid_exists(pid):
            out[pid] = (created, path)
    return out


def find_stale(directory: Path | None = None) -> list[StaleSession]:
    """Ray sessions of this user's earlier gnnsys runs whose driver is dead (no side effects).

    Costs one scan of this user's processes, and only when a dead driver's marker exists.
    """
    dead = _dead_drivers(directory or marker_dir())
    if not dead:
        return []
    by_session: dict[str, list[int]] = {}
    for proc in _same_user():
        session = session_of(proc)
        if session is not None and _alive(proc):
            by_session.setdefault(session, []).append(proc.pid)
    out = []
    for session, pids in sorted(by_session.items()):
        m = SESSION_RE.search(session)
        pid = int(m.group(3)) if m else -1
        # the session started after that driver did (1 s slack: the name has whole seconds)
        if pid in dead and _session_start(session) >= dead[pid][0] - 1:
            out.append(StaleSession(session, pid, tuple(sorted(pids)), dead[pid][1]))
    for pid, (_, path) in dead.items():  # no process left: the marker is done
        if all(s.driver_pid != pid for s in out):
            path.unlink(missing_ok=True)
    return out


def end_stale(stale: StaleSession) -> list[int]:
    """End ``stale``'s processes (SIGKILL); returns the pids still alive afterwards."""
    procs = set()
    for pid in stale.pids:
        try:
            procs.add(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    end_session(stale.session_dir, procs)
    left = [p.pid for p in procs if _alive(p)]
    if not left:
        stale.marker.unlink(missing_ok=True)
    return left


def main(argv: list[str] | None = None) -> None:
    """``watchdog.py --driver PID --session-dir DIR [--marker PATH]`` (started by ``connect``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--driver", type=int, required=True)
    parser.add_argument("--session-dir", required=True)
    parser.add_argument("--marker", type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s watchdog %(message)s")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the driver's to handle
    try:
        watch(args.driver, args.session_dir, args.marker)
    except psutil.NoSuchProcess:  # the driver died before we looked: end what the dir names
        end_session(args.session_dir, set())


if __name__ == "__main__":
    main()
