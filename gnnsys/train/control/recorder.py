"""What a run leaves on disk, written in one place: ``metrics.jsonl`` lines and checkpoints.

:class:`EpochMetrics` is the typed record of one epoch; its JSON form is one line of
``metrics.jsonl`` (layout documented in docs/training.md: evaluation metrics such as
``val_acc`` at the top level, traffic by category under ``bytes``/``messages``). The
:class:`Recorder` appends a line, then writes the checkpoint, so a checkpoint of epoch ``e``
always has ``e``'s line; on resume it keeps the lines before the checkpoint's next epoch.

Both files survive a failed write (full disk, read-only file system, ...): ``begin`` rewrites
``metrics.jsonl`` atomically, ``append`` adds a line whole or truncates back, and either raises
``DiskError`` naming the path (``gnnsys.store.diskio``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gnnsys.store.diskio import append_whole, atomic_write, disk_error
from gnnsys.train.control.checkpoint import (
    Checkpoint,
    load_checkpoint,
    remove_checkpoints,
    save_checkpoint,
)
from gnnsys.train.control.tensorboard import TensorBoardSink
from gnnsys.train.eval.evaluate import EvalResult
from gnnsys.train.metrics import is_metric_key
from gnnsys.train.pipeline import STAGES
from gnnsys.train.remote.ledger import CATEGORIES, LedgerSnapshot
from gnnsys.train.worker import WorkerEpochReport

__all__ = ["METRICS_NAME", "EpochMetrics", "Recorder", "epoch_metrics"]

METRICS_NAME = "metrics.jsonl"
_PHASES = (*STAGES, "stall", "overlap")


@dataclass(frozen=True, slots=True)
class EpochMetrics:
    """One epoch of a run (one ``metrics.jsonl`` line).

    Attributes:
        epoch: 0-based epoch index.
        loss: Mean training cross-entropy over the epoch's seeds.
        batch_train_acc: Training accuracy of the mini-batches (dropout on).
        evaluation: ``{split}_{acc,f1,auc}`` of the sharded exact evaluation (empty when the
            epoch was not evaluated).
        seconds: ``total`` epoch time; per rank, averaged over ranks: each stage's busy time
            (``sample``, ``fetch``, ``transfer``, ``compute``, ``sync``), the compute loop's
            ``stall`` (waiting for its next batch) and ``overlap`` (stage time / the rank's
            loop time: above 1 when prefetching hid stages); ``eval`` (slowest rank's
            evaluation).
        traffic: The epoch's training traffic summed over ranks.
        eval_traffic: Evaluation traffic summed over ranks.
        eval_cache: Layer-0 halo rows evaluation needed and those its caches served.
        warmup_bytes: Traffic before epoch 0 (presample, prefetch), repeated on every line.
        cache: Ranks' cache counters summed over the epoch (empty without a cache).
        num_batches: Batches per rank.
        peak_rss_bytes: Peak RSS of every rank's process so far (its evaluation included).
        threads: torch threads each rank computed with (its CPUs, less one when prefetching).
        devices: Each rank's step device (``cpu``, ``cuda:0``).
        peak_device_bytes: Each rank's peak device memory so far, its evaluation included (0 on
            CPU).
        num_ray_nodes: Distinct nodes the ranks ran on.
        restarts: Group restarts so far.
    """

    epoch: int
    loss: float
    batch_train_acc: float
    evaluation: dict[str, float | None]
    seconds: dict[str, float]
    traffic: LedgerSnapshot
    eval_traffic: LedgerSnapshot
    eval_cache: dict[str, int]
    warmup_bytes: dict[str, int]
    cache: dict[str, float] = field(default_factory=dict)
    num_batches: int = 0
    peak_rss_bytes: tuple[int, ...] = ()
    threads: tuple[int, ...] = ()
    devices: tuple[str, ...] = ()
    peak_device_bytes: tuple[int, ...] = ()
    num_ray_nodes: int = 1
    restarts: int = 0
    ranks: tuple[dict[str, Any], ...] = ()
    balance: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The ``metrics.jsonl`` object."""
        out: dict[str, Any] = {"epoch": self.epoch, "loss": self.loss, **self.evaluation}
        out |= {
            "batch_train_acc": self.batch_train_acc,
            "seconds": self.seconds,
            "bytes": self.traffic.bytes,
            "messages": self.traffic.messages,
            "counts": self.traffic.counts,
            "eval": {
                "bytes": self.eval_traffic.bytes,
                "messages": self.eval_traffic.messages,
                **self.eval_cache,
            },
            "warmup_bytes": self.warmup_bytes,
            "num_batches": self.num_batches,
            "peak_rss_bytes": list(self.peak_rss_bytes),
            "threads": list(self.threads),
            "devices": list(self.devices),
            "peak_device_bytes": list(self.peak_device_bytes),
            "num_ray_nodes": self.num_ray_nodes,
            "restarts": self.restarts,
        }
        if self.ranks:
            out["ranks"], out["balance"] = list(self.ranks), self.balance
        if self.cache:
            out["cache"] = self.cache
        if self.traffic.by_type:  # heterogeneous runs: bytes per node type and category
            out["bytes_by_type"] = self.traffic.by_type
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> EpochMetrics:
        """Inverse of :meth:`to_json` (lines of a run being resumed)."""
        evaluation = {k: v for k, v in obj.items() if is_metric_key(k)}
        evaluation.pop("batch_train_acc", None)
        ev = obj.get("eval", {})
        return cls(
            epoch=int(obj["epoch"]),
            loss=float(obj["loss"]),
            batch_train_acc=float(obj["batch_train_acc"]),
            evaluation=evaluation,
            seconds=dict(obj["seconds"]),
            traffic=LedgerSnapshot(
                _every_category(obj["bytes"]),
                _every_category(obj["messages"]),
                obj.get("counts", {}),
                obj.get("bytes_by_type", {}),
            ),
            eval_traffic=LedgerSnapshot(ev.get("bytes", {}), ev.get("messages", {}), {}),
            eval_cache={k: int(v) for k, v in ev.items() if k not in ("bytes", "messages")},
            warmup_bytes=dict(obj.get("warmup_bytes", {})),
            cache=dict(obj.get("cache", {})),
            num_batches=int(obj.get("num_batches", 0)),
            peak_rss_bytes=tuple(obj.get("peak_rss_bytes", ())),
            threads=tuple(obj.get("threads", ())),
            devices=tuple(obj.get("devices", ())),
            peak_device_bytes=tuple(obj.get("peak_device_bytes", ())),
            num_ray_nodes=int(obj.get("num_ray_nodes", 1)),
            restarts=int(obj.get("restarts", 0)),
            ranks=tuple(obj.get("ranks", ())),
            balance=dict(obj.get("balance", {})),
        )


def _every_category(values: dict[str, int]) -> dict[str, int]:
    """``values`` with every ledger category (a line written before a category existed has 0)."""
    return dict.fromkeys(CATEGORIES, 0) | values


def _cache_totals(reports: list[WorkerEpochReport]) -> dict[str, float]:
    """The ranks' cache counters summed, with the overall hit rate (empty without a cache)."""
    counters = [r.cache for r in reports if r.cache is not None]
    if not counters:
        return {}
    cache: dict[str, float] = dict(sum(counters[1:], counters[0]).to_json())
    looked = cache["rows_requested"]
    cache["hit_rate"] = cache["rows_hit"] / looked if looked else 0.0
    return cache


def epoch_metrics(
    epoch: int,
    reports: list[WorkerEpochReport],
    evaluation: EvalResult,
    *,
    epoch_seconds: float,
    num_batches: int,
    restarts: int,
) -> EpochMetrics:
    """One epoch's record from the ranks' training reports and their combined evaluation."""
    seeds = max(sum(r.stats.num_seeds for r in reports), 1)
    split = {k: sum(r.stats.seconds.get(k, 0.0) for r in reports) / len(reports) for k in _PHASES}
    return EpochMetrics(
        epoch=epoch,
        loss=sum(r.stats.loss_sum for r in reports) / seeds,
        batch_train_acc=sum(r.stats.num_correct for r in reports) / seeds,
        evaluation=evaluation.metrics,
        seconds={"total": epoch_seconds, **split, "eval": evaluation.seconds},
        traffic=sum((r.traffic for r in reports), LedgerSnapshot()),
        eval_traffic=evaluation.traffic,
        eval_cache={"halo_rows": evaluation.halo_rows, "cache_hits": evaluation.cache_hits},
        warmup_bytes=sum((r.warmup for r in reports), LedgerSnapshot()).bytes,
        cache=_cache_totals(reports),
        num_batches=num_batches,
        threads=tuple(r.stats.threads for r in reports),
        devices=tuple(r.stats.device for r in reports),
        peak_device_bytes=tuple(
            max([r.stats.peak_device_bytes, *evaluation.peak_device_bytes[i : i + 1]])
            for i, r in enumerate(reports)
        ),
        peak_rss_bytes=tuple(
            max([r.peak_rss_bytes, *evaluation.peak_rss_bytes[i : i + 1]])
            for i, r in enumerate(reports)
        ),
        num_ray_nodes=len({r.node_id for r in reports}),
        restarts=restarts,
        ranks=(work := rank_work(reports)),
        balance=balance(work),
    )


WORK = ("seeds", "sampled_edges", "feature_bytes", "compute_s")
"""Per-rank work of an epoch (``metrics.jsonl`` ``ranks``), each with its ``balance``."""


def rank_work(reports: list[WorkerEpochReport]) -> tuple[dict[str, Any], ...]:
    """Each rank's work: seeds, sampled edges, layer-0 bytes received, its compute and sync."""
    out = []
    for r in sorted(reports, key=lambda r: r.rank):
        received = r.traffic.bytes.get("feature_response", 0)
        received += r.traffic.bytes.get("partial_response", 0)
        out.append({
            "rank": r.rank, "seeds": r.stats.num_seeds, "sampled_edges": r.stats.sampled_edges,
            "feature_bytes": int(received),
            "compute_s": round(float(r.stats.seconds.get("compute", 0.0)), 4),
            "sync_s": round(float(r.stats.seconds.get("sync", 0.0)), 4),
        })  # fmt: skip
    return tuple(out)


def balance(work: tuple[dict[str, Any], ...]) -> dict[str, float]:
    """Max over mean of each :data:`WORK` figure (1.0: every rank did the same)."""
    out = {}
    for key in WORK:
        values = [float(w[key]) for w in work]
        mean = sum(values) / len(values) if values else 0.0
        out[key] = round(max(values) / mean, 4) if mean > 0 else 1.0
    return out


class Recorder:
    """Owns ``run_dir/metrics.jsonl`` and the checkpoints of one run.

    Args:
        run_dir: The run directory (created).
        tensorboard: A directory where every line is also written as TensorBoard scalars
            (``gnnsys.train.control.tensorboard``), or ``None``.
    """

    def __init__(self, run_dir: Path, tensorboard: str | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.metrics_path = self.run_dir / METRICS_NAME
        self.sink = TensorBoardSink(tensorboard) if tensorboard is not None else None

    def begin(self, resume: bool) -> tuple[Checkpoint | None, list[EpochMetrics]]:
        """Start a run: the checkpoint to continue from and the metric lines kept before it.

        A fresh run (``resume=False``) removes an old checkpoint and empties the metrics.

        Raises:
            DiskError: The run directory or ``metrics.jsonl`` cannot be written; the old
                ``metrics.jsonl`` is kept whole.
        """
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise disk_error(err, self.run_dir) from err
        ckpt = load_checkpoint(self.run_dir) if resume else None
        if not resume:
            remove_checkpoints(self.run_dir)  # both: a fresh run never falls back to an old one
        kept = self.lines_before(0 if ckpt is None else ckpt.epoch + 1)
        text = "".join(json.dumps(m.to_json()) + "\n" for m in kept)
        atomic_write(self.metrics_path, text.encode())
        if self.sink is not None:
            self.sink.begin([m.to_json() for m in kept])
        return ckpt, kept

    def lines_before(self, epoch: int) -> list[EpochMetrics]:
        """Parsed lines of ``metrics.jsonl`` with an epoch below ``epoch``."""
        if not self.metrics_path.exists():
            return []
        lines = [ln for ln in self.metrics_path.read_text().splitlines() if ln.strip()]
        records = [EpochMetrics.from_json(json.loads(ln)) for ln in lines]
        return [m for m in records if m.epoch < epoch]

    def append(self, metrics: EpochMetrics) -> None:
        """Add one line (written before the epoch's checkpoint is).

        Raises:
            DiskError: The line could not be written; the file is truncated back to its old
                size, so it never ends in half a line.
        """
        line = metrics.to_json()
        append_whole(self.metrics_path, (json.dumps(line) + "\n").encode())
        if self.sink is not None:
            self.sink.write(line)

    def close(self) -> None:
        """Close the TensorBoard files, if any (the run is over)."""
        if self.sink is not None:
            self.sink.close()

    def save(self, ckpt: Checkpoint) -> None:
        """Write the checkpoint atomically."""
        save_checkpoint(self.run_dir, ckpt)

    def last_checkpoint(self) -> Checkpoint | None:
        """The newest readable checkpoint (after a failure), or ``None``."""
        return load_checkpoint(self.run_dir)
