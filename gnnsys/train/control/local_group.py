"""In-process executor: the ranks of one run as threads, the shard owners as plain objects.

Same ``TrainWorker``, ``Trainer``, samplers, feature sources, caches and ``ShardOwner`` code as
the Ray runtime, and the same ledger; only two handles differ: :class:`LocalOwnerClient` calls
the owners directly instead of through actors, and :class:`ThreadSync` averages gradients
between threads instead of over gloo. With no process start-up per run it is the executor of
``gnnsys bench comm``, which trains dozens of configurations. No failure recovery: a rank that
raises aborts the shared barrier, so every other rank stops too and the error is re-raised.

Gradient average: each rank deposits its flat gradient, then every rank sums the deposits in
rank order (so all ranks hold bit-identical sums and their models stay equal), then waits until
all have read before anyone deposits the next step's.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from gnnsys.train.control.coordinator import METRICS_NAME, Evaluator, epoch_metrics
from gnnsys.train.control.prepare import prepare_store
from gnnsys.train.control.run import TrainResult, resolved_codec, summary_of, worker_template
from gnnsys.train.control.shards import assemble_graph
from gnnsys.train.remote.client import RayOwnerClient
from gnnsys.train.remote.ledger import Ledger
from gnnsys.train.remote.server import ShardOwner
from gnnsys.train.worker import TrainWorker, WorkerEpochReport, WorkerSpec

if TYPE_CHECKING:
    from gnnsys.config import RunConfig

__all__ = ["LocalOwnerClient", "ThreadSync", "train_local"]

log = logging.getLogger(__name__)


class _Direct:
    """Makes ``owner.method.remote(*args)`` a direct call (the actor-handle call syntax)."""

    def __init__(self, obj: object) -> None:
        self._obj = obj

    def __getattr__(self, name: str) -> SimpleNamespace:
        return SimpleNamespace(remote=getattr(self._obj, name))


class LocalOwnerClient(RayOwnerClient):
    """``OwnerClient`` over in-process ``ShardOwner`` objects: every call returns at once.

    Subclasses the Ray client, so each owner method the Ray client knows works here too.
    """

    def __init__(self, owners: list[ShardOwner]) -> None:
        super().__init__([_Direct(o) for o in owners], deadline_s=float("inf"))

    def _get(self, refs: dict[int, Any], what: str) -> dict[int, Any]:
        return dict(refs)  # already the answers


class _Room:
    """Where the ranks of one process meet for each gradient average."""

    def __init__(self, world_size: int, timeout_s: float) -> None:
        self.barrier = threading.Barrier(world_size, timeout=timeout_s)
        self.slots: list[Tensor | None] = [None] * world_size


class ThreadSync:
    """``GradSync`` between the threads of one process; counts its payload like gloo's.

    Args:
        room: Shared by all ranks of the run.
        rank: This rank.
        ledger: This rank's ledger (``allreduce``).
    """

    def __init__(self, room: _Room, rank: int, ledger: Ledger) -> None:
        self.room, self.rank, self.ledger = room, rank, ledger

    def allreduce_mean_(self, flat: Tensor) -> None:
        """Average ``flat`` over ranks in place; raises ``BrokenBarrierError`` if a rank failed."""
        self.ledger.record("allreduce", flat)
        self.room.slots[self.rank] = flat.clone()
        self.room.barrier.wait()
        total = torch.zeros_like(flat)
        for deposit in self.room.slots:
            assert deposit is not None  # every rank deposited before the barrier opened
            total += deposit
        self.room.barrier.wait()
        flat.copy_(total / len(self.room.slots))


def _thread_sync(room: _Room, rank: int) -> Callable[[Ledger], ThreadSync]:
    return lambda ledger: ThreadSync(room, rank, ledger)


def _run_epoch(
    workers: list[TrainWorker], room: _Room, epoch: int, num_batches: int
) -> list[WorkerEpochReport]:
    """One epoch on every rank at once; re-raises the first rank's error."""
    reports: list[WorkerEpochReport | None] = [None] * len(workers)
    errors: list[tuple[int, BaseException]] = []

    def work(rank: int) -> None:
        try:
            reports[rank] = workers[rank].train_epoch(epoch, num_batches)
        except BaseException as err:  # noqa: BLE001 - re-raised below, on the driver thread
            errors.append((rank, err))
            room.barrier.abort()  # the other ranks leave their wait instead of hanging

    threads = [threading.Thread(target=work, args=(r,), daemon=True) for r in range(len(workers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    real = [e for e in errors if not isinstance(e[1], threading.BrokenBarrierError)]
    if errors:
        rank, err = (real or errors)[0]
        raise RuntimeError(f"rank {rank} failed in epoch {epoch}: {err!r}") from err
    return [r for r in reports if r is not None]


def train_local(
    config: RunConfig,
    run_dir: str | os.PathLike[str],
    *,
    traffic_only: bool = False,
    threads: int | None = None,
) -> TrainResult:
    """Train ``config`` in this process; writes ``metrics.jsonl`` and ``summary.json``.

    The topology is always ``partitioned`` (every remote row and neighbor list goes through an
    owner and the ledger). ``config.cluster.address`` is ignored; nothing starts Ray.

    Args:
        config: The run.
        run_dir: Output directory (created).
        traffic_only: Replay every epoch's sampling and fetching without the model
            (``Trainer.replay_epoch``): the same traffic and cache counters, no accuracy.
        threads: torch intra-op threads for the ranks' forward/backward (which run one at a
            time, see ``Trainer``); ``None`` keeps 1, as a Ray worker has (bit-equal results).
    """
    run_path = Path(run_dir)
    run_path.mkdir(parents=True, exist_ok=True)
    wall = time.perf_counter()
    store = prepare_store(
        config.data,
        num_parts=config.cluster.parts,
        num_hops=len(config.sampler.fanouts),
        seed=config.trainer.seed,
        run_dir=run_path,
        reuse=False,
    )
    graph = assemble_graph(store, with_data=True)
    config = replace(config, codec=resolved_codec(config, graph))
    template = worker_template(config, store, graph, "partitioned")
    threads_before = torch.get_num_threads()
    try:
        history = _train_epochs(config, template, graph, run_path, traffic_only, threads)
    finally:
        torch.set_num_threads(threads_before)  # TrainWorker pins 1 thread per rank
    resolved = replace(config, cluster=replace(config.cluster, topology="partitioned"))
    summary = summary_of(resolved, [] if traffic_only else history, store, "partitioned", 0)
    summary["executor"] = "local"
    summary["wall_seconds"] = time.perf_counter() - wall
    (run_path / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return TrainResult(history=history, summary=summary, run_dir=run_path)


def _train_epochs(
    config: RunConfig,
    template: WorkerSpec,
    graph: Any,
    run_path: Path,
    traffic_only: bool,
    threads: int | None,
) -> list[dict[str, Any]]:
    parts = template.world_size
    owners = [ShardOwner(template.store, p) for p in range(parts)]
    client = LocalOwnerClient(owners)
    room = _Room(parts, config.loop.deadline_s)
    rng_lock = threading.Lock()
    workers = [
        TrainWorker(
            replace(template, rank=r),
            [],
            client=client,
            sync=_thread_sync(room, r),
            rng_lock=rng_lock,
        )
        for r in range(parts)
    ]
    num_batches = max(w.num_local_batches() for w in workers)
    if threads is not None:
        torch.set_num_threads(threads)  # after TrainWorker pinned 1
    evaluator = None if traffic_only else Evaluator(graph, template)
    metrics_path = run_path / METRICS_NAME
    metrics_path.write_text("")
    history: list[dict[str, Any]] = []
    for epoch in range(config.loop.epochs):
        start = time.perf_counter()
        if evaluator is None:
            reports = [w.replay_epoch(epoch, num_batches) for w in workers]
        else:
            reports = _run_epoch(workers, room, epoch, num_batches)
        seconds = time.perf_counter() - start
        t_eval = time.perf_counter()
        accs = {} if evaluator is None else evaluator.accuracies(workers[0].state()["model"])
        metrics = epoch_metrics(
            epoch,
            reports,
            accs,
            epoch_seconds=seconds,
            eval_seconds=time.perf_counter() - t_eval,
            num_batches=num_batches,
            restarts=0,
        )
        history.append(metrics)
        with open(metrics_path, "a") as fh:
            fh.write(json.dumps(metrics) + "\n")
        log.info("epoch %d: %s (%.1fs)", epoch, accs or "traffic replayed", seconds)
    return history
