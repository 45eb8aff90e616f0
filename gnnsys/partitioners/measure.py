"""What a partition step costs (``Measured``: wall time and peak RSS) and what it reads.

``GraphSource`` is the graph a partition run splits, with the cost of loading it; the
``gnnsys partition`` command, its typed and out-of-core paths and the partition benchmark share
these.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

__all__ = ["GraphSource", "Measured", "stage_costs"]


class Measured:
    """Context manager measuring wall time and the process's peak RSS inside the block.

    RSS is sampled every 20 ms by a thread (psutil). Native code that holds the GIL (pymetis)
    stalls that thread, so the process's lifetime peak (``getrusage``) is used too whenever it
    rose inside the block, since that new peak must have been reached inside it.
    """

    def __init__(self, interval_s: float = 0.02) -> None:
        self.interval_s = interval_s
        self.seconds = 0.0
        self.peak_rss_bytes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start = 0.0
        self._maxrss_before = 0
        self.started_at = self.ended_at = 0.0
        """Unix times the block started and ended (to line up samples of other processes)."""

    def _poll(self) -> None:
        import psutil

        proc = psutil.Process()
        while True:
            self.peak_rss_bytes = max(self.peak_rss_bytes, int(proc.memory_info().rss))
            if self._stop.wait(self.interval_s):
                return

    def __enter__(self) -> Measured:
        self._maxrss_before = _lifetime_peak_rss()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        self._start = time.perf_counter()
        self.started_at = time.time()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.seconds = time.perf_counter() - self._start
        self.ended_at = time.time()
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        lifetime = _lifetime_peak_rss()
        if lifetime > self._maxrss_before:
            self.peak_rss_bytes = max(self.peak_rss_bytes, lifetime)


def stage_costs(load_m: Measured, assign_m: Measured, write_m: Measured) -> dict[str, Any]:
    """Seconds of each stage, the peak RSS over all three and the assignment's own peak."""
    return {
        "load_seconds": round(load_m.seconds, 3),
        "assign_seconds": round(assign_m.seconds, 3),
        "write_seconds": round(write_m.seconds, 3),
        "peak_rss_bytes": max(
            load_m.peak_rss_bytes, assign_m.peak_rss_bytes, write_m.peak_rss_bytes
        ),
        "assign_peak_rss_bytes": assign_m.peak_rss_bytes,
    }


def _lifetime_peak_rss() -> int:
    """Peak RSS of this process so far, in bytes (``ru_maxrss`` is KiB on Linux)."""
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


@dataclass(frozen=True, slots=True)
class GraphSource:
    """The graph to partition and how it got here."""

    graph: Any
    load: Measured
    """Time and peak RSS of loading (or building) it."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Summary fields of the way it was loaded (out of core: the budget and its plan)."""
    parts_writer: Any = None
    """``write_partitions``'s ``parts_writer`` (out of core: one Ray Data task per part)."""
