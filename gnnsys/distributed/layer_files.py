"""The layer files of sharded layer-wise inference, and the barrier between layers.

Each rank writes its owned rows of a layer (:func:`save_rows`), the ranks meet
(:func:`barrier`, bounded), and each reads the rows of the nodes it needs from their owners'
files (:func:`owner_rows`). ``gnnsys.distributed.inference`` (``BasicGNN``) and
``gnnsys.distributed.to_hetero`` (``to_hetero`` models, a file per node type) share them.

Shape legend: ``N`` rows asked for, ``H`` layer width.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch import distributed as dist

from gnnsys.distributed.metrics import _wait

__all__ = ["barrier", "owner_rows", "save_rows"]


def barrier(what: str, timeout_s: float) -> None:
    """Every rank arrives, or this raises after ``timeout_s`` naming ``what``."""
    _wait(dist.all_reduce(torch.zeros(1), async_op=True), f"inference: {what}", timeout_s)


def save_rows(path: Path, rows: Tensor) -> Path:
    """One rank's rows of a layer as ``path`` (``.npy``, no pickle), written atomically."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("wb") as f:
        np.save(f, rows.numpy(), allow_pickle=False)
    os.replace(tmp, path)
    return path


def owner_rows(tables: list[np.ndarray], book: Any, gid: np.ndarray, width: int) -> Tensor:
    """``[N, H]`` rows of ``gid`` from their owners' layer tables."""
    part = np.asarray(book.part_N[gid], dtype=np.int64)
    pos = np.asarray(book.lid_N[gid], dtype=np.int64)
    x = np.empty((gid.shape[0], width), dtype=np.float32)
    for p, table in enumerate(tables):
        sel = np.flatnonzero(part == p)
        if sel.size:
            x[sel] = table[pos[sel]]
    return torch.from_numpy(x)
