"""``gnnsys partition parquet:DIR --memory-budget SIZE``: the graph built on disk, then mapped.

The Parquet tables become a CSR graph on disk (``gnnsys.out_of_core.disk_graph``, a Ray Data
pipeline), which is opened memory-mapped for the partitioner and the store writer: no process
holds the graph. Ray runs for the whole command (started private and loopback-only, its object
store sized from the budget, unless ``--address`` joins a cluster).

The on-disk graph lives in ``--work-dir`` (kept, and reused while its tables are unchanged) or
in a temporary directory beside ``--out`` that is removed at the end, whatever happens.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gnnsys.partitioners.measure import GraphSource

log = logging.getLogger(__name__)

_METIS_BYTES_PER_EDGE = 40
"""What pymetis needs per directed edge, roughly (symmetric adjacency in int64, plus copies)."""


@contextlib.contextmanager
def disk_graph(args: argparse.Namespace) -> Iterator[GraphSource]:
    """The memory-mapped on-disk graph of ``parquet:DIR``, its parts written on Ray Data.

    Raises:
        ValueError: The dataset is not ``parquet:DIR``, the budget is unreadable or too small,
            or ``--method metis`` would need more than the budget.
    """
    from gnnsys.datasets.parquet import open_parquet, parquet_dir
    from gnnsys.out_of_core.disk_graph import build_disk_graph, disk_graph_bytes, open_disk_graph
    from gnnsys.out_of_core.parts import ray_parts_writer
    from gnnsys.out_of_core.runtime import (
        Plan,
        cluster_cpus,
        parse_bytes,
        plan_dict,
        start_ray,
        stop_ray,
    )
    from gnnsys.partitioners.measure import GraphSource, Measured

    budget = parse_bytes(args.memory_budget)
    family, _, variant = args.dataset.partition(":")
    if family != "parquet" or not variant:
        raise ValueError(
            f"--memory-budget needs a parquet:DIR dataset, not {args.dataset!r}; write one with "
            f"`gnnsys export {args.dataset} --format parquet --out DIR`"
        )
    pg = open_parquet(parquet_dir(variant, args.root))
    if args.method == "metis" and _METIS_BYTES_PER_EDGE * pg.num_edge_rows > budget:
        need = _METIS_BYTES_PER_EDGE * pg.num_edge_rows / 2**30
        raise ValueError(
            f"--method metis holds the whole graph (~{need:.1f} GiB here) and cannot stay under "
            f"--memory-budget {args.memory_budget}; use a streaming method (ldg, fennel) or "
            "hash/range"
        )
    out = Path(args.out)
    keep = args.work_dir is not None
    if not keep:
        _remove_stale(out)
    work = (
        Path(args.work_dir)
        if keep
        else out.parent / f"{_prefix(out)}{os.getpid()}-{uuid.uuid4().hex[:8]}"
    )
    started = start_ray(budget, getattr(args, "address", None))
    try:
        with Measured() as load_m:
            if not (keep and _current(work, pg)):
                build_disk_graph(pg, work, memory_budget=budget, overwrite=keep)
            else:
                log.info("reusing the on-disk graph in %s (its tables are unchanged)", work)
            graph = open_disk_graph(work)
        plan = Plan.of(budget, pg.num_nodes, cluster_cpus())
        extra = {
            "out_of_core": True,
            "memory_budget_bytes": budget,
            "graph_bytes": disk_graph_bytes(pg),
            "plan": plan_dict(plan),
        }
        writer = ray_parts_writer(work, args.parts, plan, progress=False)
        yield GraphSource(graph, load_m, extra, writer)
    finally:
        if started:
            stop_ray()
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def _prefix(out: Path) -> str:
    """Start of the name of a temporary on-disk graph for ``out`` (the pid of its run follows)."""
    return f".{out.name}.graph-"


def _remove_stale(out: Path) -> None:
    """Remove what runs for ``out`` whose process is gone left behind.

    A run killed by SIGKILL cannot clean up after itself: its temporary on-disk graph, or that
    graph's staging directory (``.<graph dir name>.tmp-...``), stays beside ``out``. Their names
    carry the run's pid; a live pid's directory is left alone.
    """
    import psutil

    prefix = _prefix(out).lstrip(".")
    if not out.parent.is_dir():
        return
    for path in out.parent.iterdir():
        name = path.name.lstrip(".")
        if not name.startswith(prefix):
            continue
        pid_text = name[len(prefix) :].split("-", 1)[0]
        if not pid_text.isdigit() or psutil.pid_exists(int(pid_text)):
            continue
        log.warning("removing %s, left by a run (pid %s) that no longer exists", path, pid_text)
        shutil.rmtree(path, ignore_errors=True)


def _current(work: Path, pg: Any) -> bool:
    """Whether ``work`` holds a complete on-disk graph of exactly ``pg``'s tables."""
    from gnnsys.out_of_core.disk_graph import GRAPH_JSON, source_of

    try:
        meta = json.loads((work / GRAPH_JSON).read_text())
    except (OSError, ValueError):
        return False
    return bool(meta.get("source") == source_of(pg))
