"""Sample the memory of Ray worker processes from ``/proc`` while a benchmark runs.

``MemProbe(title, store)`` starts a thread that, every ``interval_s`` seconds, reads
``/proc/<pid>/status`` of every process whose command line starts with ``title`` (Ray names
actor processes ``ray::<Class>``) and that maps files of ``store`` (other runs on the machine
are left out). It keeps each one's peak anonymous, file-backed and shared (Ray's object store)
resident memory, its peak RSS and its peak ``VmData`` (what ``RLIMIT_DATA`` caps). The part a
process serves is read from its memory maps (``<store>/part-<k>/...``). Linux only; a process
that exits between two samples keeps its last peaks.

Usage::

    with MemProbe("ray::TrainWorker", "/work/stores/products") as probe:
        run()
    print(probe.peaks())      # [{"part": 0, "rss_mib": ..., "anon_mib": ..., ...}, ...]
"""

from __future__ import annotations

import os
import re
import threading
import time
from typing import Any

FIELDS = ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmData")
_PART = re.compile(r"/part-(\d+)/")


def _status(pid: int) -> dict[str, int] | None:
    """``FIELDS`` of one process in bytes, or ``None`` when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            text = f.read()
    except OSError:
        return None
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in FIELDS:
            out[key] = int(value.split()[0]) * 1024
    return out


def _part_of(pid: int, store: str) -> int | None:
    """The part of ``store`` whose files the process maps, if it maps exactly one part's."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            lines = [line for line in f if store in line]
    except OSError:
        return None
    parts = {int(m.group(1)) for line in lines for m in _PART.finditer(line)}
    return parts.pop() if len(parts) == 1 else None


class MemProbe:
    """Peak memory of every process titled ``title`` mapping files of ``store``."""

    def __init__(self, title: str, store: str, interval_s: float = 0.25) -> None:
        self.title, self.store, self.interval_s = title.encode(), store, interval_s
        self._peaks: dict[int, dict[str, int]] = {}
        self.series: list[tuple[float, int, dict[str, int]]] = []
        """``(unix time, pid, status)`` of every sample, for timelines."""
        self._parts: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> MemProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _pids(self) -> list[int]:
        out = []
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if f.read().startswith(self.title):
                        out.append(int(name))
            except OSError:
                continue
        return out

    def _loop(self) -> None:
        while not self._stop.is_set():
            for pid in self._pids():
                if pid not in self._parts:
                    part = _part_of(pid, self.store)
                    if part is None:
                        continue  # not (yet) one of this run's workers
                    self._parts[pid] = part
                status = _status(pid)
                if status is None:
                    continue
                self.series.append((time.time(), pid, status))
                peak = self._peaks.setdefault(pid, dict.fromkeys(FIELDS, 0))
                for key, value in status.items():
                    peak[key] = max(peak[key], value)
            self._stop.wait(self.interval_s)

    def peaks(self) -> list[dict[str, Any]]:
        """One record per process seen: its part and peaks in MiB, by part."""
        rows = []
        for pid, peak in self._peaks.items():
            row: dict[str, Any] = {"pid": pid, "part": self._parts[pid]}
            for key, name in zip(FIELDS, ("rss", "anon", "file", "shmem", "vmdata"), strict=True):
                row[f"{name}_mib"] = round(peak[key] / 2**20, 1)
            rows.append(row)
        return sorted(rows, key=lambda r: (r["part"], r["pid"]))
