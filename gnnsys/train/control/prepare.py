"""Where the training data comes from: an existing partition store, or one written now.

``gnnsys train`` without ``--store`` loads the dataset, partitions it and writes the store under
the run directory before any actor starts, so every worker reads the same memory-mapped files.
That step runs in a child process (its peak RSS is reported), so the driver never holds the
graph: afterwards it reads only the manifest and the per-part label files
(``gnnsys.store.info.store_info``).

**When the child fails.** A ``DiskError`` it raises (full disk, read-only file system, ...)
reaches the driver as itself: the child's writer already removed its temporary store. A child
killed by a signal (the out-of-memory killer's SIGKILL, a SIGBUS on a memory-mapped file) runs
no cleanup, so the driver removes the ``.store.tmp-*`` it left in the run directory and raises
``ProcessDiedError`` naming the signal and the target. Either way a fresh run directory (no
checkpoint) loses the ``run.json`` the pre-flight wrote, since no run started.
"""

from __future__ import annotations

import logging
import multiprocessing
import resource
import shutil
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor

from gnnsys.errors import DiskError, ProcessDiedError
from gnnsys.store.diskio import mount_of
from gnnsys.store.info import part_array
from gnnsys.store.source import DataConfig
from gnnsys.train.control.checkpoint import CHECKPOINT_NAME, PREVIOUS_NAME, RUN_NAME

__all__ = [
    "PreparedStore",
    "feature_chunks",
    "prepare_store",
    "store_has_links",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PreparedStore:
    """The store a run trains on.

    Attributes:
        path: Partition store directory.
        written: Whether this run wrote it (partitioned in a child process).
        seconds: Time of that step (0 when reused).
        peak_rss_bytes: Peak RSS of the child process that partitioned (0 when reused).
    """

    path: Path
    written: bool = False
    seconds: float = 0.0
    peak_rss_bytes: int = 0


def feature_chunks(
    store: str | Path, rows: int = 1 << 16, *, node_type: str | None = None
) -> Iterator[Tensor]:
    """Every part's feature rows as float32 chunks of ``rows`` rows (one chunk in memory).

    ``node_type``: the rows of that node type in a typed store.
    """
    root = Path(store)
    parts = len(list(root.glob("part-*")))
    for part in range(parts):
        x = part_array(root, part, "x", node_type)
        if x is None:
            continue
        for start in range(0, int(x.shape[0]), rows):
            yield torch.from_numpy(np.array(x[start : start + rows], dtype=np.float32))
        del x  # unmap before the next part, so at most one part's pages stay resident


def prepare_store(
    spec: DataConfig,
    *,
    num_parts: int,
    num_hops: int,
    seed: int,
    run_dir: Path,
    reuse: bool,
    hetero: bool = False,
) -> PreparedStore:
    """Return a store with ``num_parts`` parts, writing ``run_dir/store`` if none is given.

    Args:
        spec: Data settings.
        num_parts: ``P``; a given store must have exactly this many parts.
        num_hops: Halo depth written into a new store (the model's layer count).
        seed: Partitioner seed.
        run_dir: Run directory (the new store goes to ``run_dir/store``).
        reuse: Keep an existing ``run_dir/store`` with ``num_parts`` parts (used by ``--resume``).
        hetero: The dataset and store are heterogeneous (``gnnsys.store.manifest``).

    Raises:
        ValueError: The given store has a different number of parts.
        DiskError: Writing the store failed for a file-system reason (raised by the child).
        ProcessDiedError: The child was killed (by a signal) or exited without a result.
    """
    from gnnsys.store import read_store_manifest

    if spec.store is not None:
        manifest = read_store_manifest(spec.store)
        if manifest.num_parts != num_parts:
            raise ValueError(
                f"store {spec.store} has {manifest.num_parts} parts but --parts={num_parts}; "
                f"pass --parts {manifest.num_parts} or re-partition"
            )
        return PreparedStore(Path(spec.store))
    target = run_dir / "store"
    if reuse and (target / "manifest.json").exists():
        held = read_store_manifest(target)
        same_task = (held.kind == "typed") == hetero  # the same dataset's kind and task
        same_task = same_task and (spec.link_split is not None) == store_has_links(target)
        if held.num_parts == num_parts and same_task:
            log.info("reusing the partition store %s", target)
            return PreparedStore(target)
    start = time.perf_counter()
    write = _write_hetero_store if hetero else _write_store
    try:
        peak = _in_child(write, spec, num_parts, num_hops, seed, target)
    except (DiskError, ProcessDiedError):
        _forget_fresh_run(run_dir)
        raise
    seconds = time.perf_counter() - start
    log.info("partitioned in %.1f s in a child process (peak RSS %.2f GiB)", seconds, peak / 2**30)
    return PreparedStore(target, written=True, seconds=seconds, peak_rss_bytes=peak)


class _SpawnTracker:
    """The ``spawn`` context, keeping each process it creates (to name a dead child's signal)."""

    def __init__(self) -> None:
        self._ctx = multiprocessing.get_context("spawn")
        self.processes: list[BaseProcess] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)

    def Process(self, *args: Any, **kwargs: Any) -> BaseProcess:  # noqa: N802 -- BaseContext's
        """``BaseContext.Process``, remembered."""
        proc: BaseProcess = self._ctx.Process(*args, **kwargs)
        self.processes.append(proc)
        return proc


_SIGNAL_HINTS = {
    signal.SIGKILL: "usually the out-of-memory killer; free memory or use a larger machine",
    signal.SIGBUS: "a memory-mapped file failed (a full disk, or a file truncated meanwhile); "
    "free space on {mount} or choose another --out",
}


def _in_child(write: Any, spec: DataConfig, *args: Any) -> int:
    """``write(spec, *args)`` in a spawned child (it holds the graph; the driver never does).

    Raises:
        ProcessDiedError: The child died without raising; its ``.store.tmp-*`` is removed.
    """
    target: Path = args[-1]
    tracker = _SpawnTracker()
    # Duck-typed: the executor only calls the context's factories (Process, queues, locks).
    broken: BrokenProcessPool | None = None
    with ProcessPoolExecutor(max_workers=1, mp_context=cast(BaseContext, tracker)) as pool:
        try:
            return int(pool.submit(write, spec, *args).result())
        except BrokenProcessPool as err:
            broken = err
    # The pool's shutdown joined the dead child, so only now is its exit code known.
    codes = [p.exitcode for p in tracker.processes if p.exitcode]
    _remove_staged(target)
    raise _died(spec.dataset, target, codes[0] if codes else None) from broken


def _died(dataset: str, target: Path, exitcode: int | None) -> ProcessDiedError:
    """The error of a partitioning child that died with ``exitcode`` (``-N``: signal ``N``)."""
    how, hint = "died abruptly", ""
    if exitcode is not None and exitcode > 0:
        how = f"exited with code {exitcode}"
    elif exitcode is not None:
        try:
            sig = signal.Signals(-exitcode)
            how, hint = f"was killed by {sig.name} (signal {-exitcode})", _SIGNAL_HINTS.get(sig, "")
        except ValueError:  # a number this platform has no name for
            how = f"was killed by signal {-exitcode}"
    hint = hint.format(mount=mount_of(target))
    return ProcessDiedError(
        f"the child process partitioning {dataset} into {target} {how}; its partial store was "
        f"removed{'; ' + hint if hint else ''}",
        str(target),
        exitcode,
    )


def _remove_staged(target: Path) -> None:
    """Remove the temporary stores (``.NAME.tmp-*``) a killed writer left beside ``target``."""
    for tmp in target.parent.glob(f".{target.name}.tmp-*"):
        log.warning("removing %s, left by the partitioning child", tmp)
        shutil.rmtree(tmp, ignore_errors=True)


def _forget_fresh_run(run_dir: Path) -> None:
    """Remove the pre-flight's ``run.json`` when no run ever trained here (no checkpoint)."""
    if not any((run_dir / name).exists() for name in (CHECKPOINT_NAME, PREVIOUS_NAME)):
        (run_dir / RUN_NAME).unlink(missing_ok=True)


def _write_store(spec: DataConfig, num_parts: int, num_hops: int, seed: int, target: Path) -> int:
    """Load, partition and write (in the child process); returns the child's peak RSS."""
    from gnnsys.datasets import load, load_link_split
    from gnnsys.datasets.transforms import FEATURE_NORMS
    from gnnsys.partitioners import partition
    from gnnsys.store import write_partitions

    params = dict(spec.dataset_params)
    links = None
    if spec.link_split is not None:
        links = load_link_split(spec.dataset, spec.root, config=spec.link_split, **params)
        graph = FEATURE_NORMS[spec.feature_norm](links.graph)  # held-out links removed first
    else:
        graph = FEATURE_NORMS[spec.feature_norm](load(spec.dataset, root=spec.root, **params))
    log.info(
        "partitioning %s (%d nodes, %d edges) into %d parts with %s",
        graph.name,
        graph.num_nodes,
        graph.num_edges,
        num_parts,
        spec.partitioner,
    )
    assignment = partition(graph, spec.partitioner, num_parts, seed=seed)
    write_partitions(graph, assignment, target, num_hops=num_hops, overwrite=True, links=links)
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # KiB on Linux


def store_has_links(target: Path) -> bool:
    """Whether the store at ``target`` holds a link split (either kind of store)."""
    from gnnsys.store.links import link_edge_type

    return link_edge_type(target) is not None


def _write_hetero_store(
    spec: DataConfig, num_parts: int, num_hops: int, seed: int, target: Path
) -> int:
    """``_write_store`` for a heterogeneous dataset (every node type in one assignment)."""
    from gnnsys.datasets import load_hetero
    from gnnsys.datasets.transforms import per_type_feature_norm
    from gnnsys.partitioners import partition_hetero
    from gnnsys.store import write_partitions

    graph = load_hetero(spec.dataset, root=spec.root, **dict(spec.dataset_params))
    graph = per_type_feature_norm(graph, spec.feature_norm)  # the rows, before any split
    links = None
    if spec.link_split is not None:  # held-out links leave the graph before partitioning
        from gnnsys.datasets.link_split import relation_edge_split

        if not spec.link_split.edge_type:
            names = sorted("__".join(e) for e in graph.edge_types)
            raise ValueError(
                f"{spec.dataset} is heterogeneous: name the relation to predict with "
                f"--target-edge SRC__REL__DST, one of {names}"
            )
        links = relation_edge_split(graph, spec.link_split.target, spec.link_split)
        graph = links.graph
    log.info(
        "partitioning %s (%d nodes, %d edges) into %d parts with %s",
        graph.name,
        graph.num_nodes(),
        graph.num_edges,
        num_parts,
        spec.partitioner,
    )
    assignment = partition_hetero(graph, spec.partitioner, num_parts, seed)
    write_partitions(graph, assignment, target, num_hops=num_hops, overwrite=True, links=links)
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # KiB on Linux
