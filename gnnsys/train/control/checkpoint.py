"""Atomic checkpoints: ``torch.save`` to a temp file in the same folder, then ``os.replace``.

A reader never sees a half-written file: the rename is atomic on POSIX, and a crash mid-write
leaves the previous checkpoint intact. Loading uses ``weights_only=True``, so a checkpoint is
plain tensors, dicts, lists and numbers and cannot execute code.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

__all__ = ["Checkpoint", "load_checkpoint", "save_checkpoint"]

CHECKPOINT_NAME = "checkpoint.pt"
_FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True, eq=False)
class Checkpoint:
    """Everything needed to continue a run as if it never stopped.

    Attributes:
        epoch: Last completed epoch (0-based).
        model_state: ``state_dict`` of the model (identical on every rank after allreduce).
        optimizer_state: ``state_dict`` of the optimizer (identical on every rank).
        rng_by_rank: Rank -> that worker's RNG states (``{"torch": ByteTensor}``).
        best_val_acc: Best validation accuracy so far (for ``summary.json``).
    """

    epoch: int
    model_state: dict[str, Any]
    optimizer_state: dict[str, Any]
    rng_by_rank: list[dict[str, Any]]
    best_val_acc: float = -1.0


def save_checkpoint(run_dir: str | os.PathLike[str], ckpt: Checkpoint) -> Path:
    """Write ``run_dir/checkpoint.pt`` atomically and return its path."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    payload = {
        "format_version": _FORMAT_VERSION,
        "epoch": ckpt.epoch,
        "model_state": ckpt.model_state,
        "optimizer_state": ckpt.optimizer_state,
        "rng_by_rank": ckpt.rng_by_rank,
        "best_val_acc": ckpt.best_val_acc,
    }
    fd, tmp = tempfile.mkstemp(prefix=".checkpoint-", suffix=".tmp", dir=run_dir)
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(payload, fh)
            fh.flush()
            os.fsync(fh.fileno())
        final = run_dir / CHECKPOINT_NAME
        os.replace(tmp, final)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return final


def load_checkpoint(run_dir: str | os.PathLike[str]) -> Checkpoint | None:
    """Read ``run_dir/checkpoint.pt``, or return ``None`` when there is none.

    Raises:
        ValueError: The file has an unknown format version (written by another gnnsys).
    """
    path = Path(run_dir) / CHECKPOINT_NAME
    if not path.exists():
        return None
    payload = torch.load(path, weights_only=True)
    if payload.get("format_version") != _FORMAT_VERSION:
        raise ValueError(
            f"{path} has format_version {payload.get('format_version')}, expected "
            f"{_FORMAT_VERSION}; start a fresh run directory"
        )
    return Checkpoint(
        epoch=int(payload["epoch"]),
        model_state=payload["model_state"],
        optimizer_state=payload["optimizer_state"],
        rng_by_rank=list(payload["rng_by_rank"]),
        best_val_acc=float(payload["best_val_acc"]),
    )
