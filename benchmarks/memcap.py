"""Cap the memory of every process of a benchmark run, each on its own (Linux cgroup v1).

``MemCap(cap_bytes)`` creates a memory cgroup limited to ``cap_bytes`` for the driver (the
processes Ray starts from it, the raylet, GCS and object store included, inherit it and share
that one cap) and makes every Ray worker process move itself into a cgroup of its own with the
same limit as soon as it starts (``worker_process_setup_hook``), before it imports torch or
maps a shard (what it allocated before, Ray's own start-up, stays charged to the driver's
group: this kernel cannot move charges). A process that needs more than the cap is killed by
the kernel's OOM killer, which the run sees as a dead worker. The groups' peak usage, limit
hits and OOM kills are read back at the end, and the groups are removed. Page-cache pages
count against the group that first read them and are reclaimed under pressure; drop the
caches before a run (``--drop-caches``) so each process's shard pages are charged to it.

Usage (root, memory controller mounted at ``/sys/fs/cgroup/memory``)::

    with MemCap(1400 * 2**20) as cap:
        cap.init_ray(num_cpus=8)
        run()
    print(cap.report())
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

_ROOT = Path("/sys/fs/cgroup/memory")
_ENV_DIR, _ENV_BYTES = "GNNSYS_CAP_CGROUP", "GNNSYS_CAP_BYTES"


def _own_group() -> Path:
    """The memory cgroup this process is in."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return _ROOT / path.lstrip("/")
    raise RuntimeError("no memory cgroup controller (cgroup v1) for this process")


def _join(group: Path, cap_bytes: int) -> None:
    """Create ``group`` limited to ``cap_bytes`` and move this process in (its new pages count)."""
    group.mkdir()
    (group / "memory.limit_in_bytes").write_text(str(cap_bytes))
    (group / "cgroup.procs").write_text(str(os.getpid()))


def cap_this_worker() -> None:
    """Ray's ``worker_process_setup_hook``: this worker process joins a capped group of its own."""
    parent, cap = os.environ.get(_ENV_DIR), os.environ.get(_ENV_BYTES)
    if parent and cap:
        _join(Path(parent) / f"worker-{os.getpid()}", int(cap))


class MemCap:
    """See the module docstring."""

    def __init__(self, cap_bytes: int) -> None:
        self.cap_bytes = cap_bytes
        self.dir = _own_group() / f"gnnsys-cap-{os.getpid()}"
        self._report: list[dict[str, Any]] = []

    def __enter__(self) -> MemCap:
        self.dir.mkdir()
        os.environ[_ENV_DIR], os.environ[_ENV_BYTES] = str(self.dir), str(self.cap_bytes)
        _join(self.dir / "driver", self.cap_bytes)
        return self

    def init_ray(self, **kwargs: Any) -> None:
        """``ray.init`` as gnnsys's private instance does, with the per-worker cap hook."""
        import sys

        import ray
        from ray import cloudpickle

        from gnnsys.train.control.cluster import LOOPBACK

        cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers lack this file
        ray.init(
            address="local",
            include_dashboard=False,
            _node_ip_address=LOOPBACK,
            log_to_driver=False,
            runtime_env={"worker_process_setup_hook": cap_this_worker},
            **kwargs,
        )

    def report(self) -> list[dict[str, Any]]:
        """One record per cgroup: name, cap, peak usage (MiB), limit hits, OOM kills."""
        return self._report

    def _read(self) -> None:
        for group in sorted(p for p in self.dir.iterdir() if p.is_dir()):
            stat = dict(
                line.split() for line in (group / "memory.oom_control").read_text().splitlines()
            )
            self._report.append(
                {
                    "group": group.name,
                    "cap_mib": round(self.cap_bytes / 2**20, 1),
                    "peak_mib": round(
                        int((group / "memory.max_usage_in_bytes").read_text()) / 2**20, 1
                    ),
                    "limit_hits": int((group / "memory.failcnt").read_text()),
                    "oom_kills": int(stat.get("oom_kill", 0)),
                }
            )

    def __exit__(self, *exc: object) -> None:
        import ray

        if ray.is_initialized():
            ray.shutdown()
        self._read()
        parent = self.dir.parent / "cgroup.procs"
        parent.write_text(str(os.getpid()))  # the driver leaves its group first
        deadline = time.monotonic() + 30
        for group in [*(p for p in self.dir.iterdir() if p.is_dir()), self.dir]:
            while True:
                try:
                    group.rmdir()
                    break
                except OSError:  # processes still exiting
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
