"""Exact metrics over every rank of a ``torch.distributed`` group.

Each rank passes the labels and predictions (or binary scores) of the nodes it evaluated; the
ranks combine what adds exactly, as ``gnnsys train``'s sharded evaluation does
(:mod:`gnnsys.train.metrics`):

- accuracy and macro-F1 from the ``[C, C]`` int64 confusion matrix, summed by one
  ``all_reduce``: the same integers, so the same floats, as one process over all the nodes;
- ROC-AUC from every rank's scores and labels, gathered (sizes first, then padded rows): the
  Mann-Whitney statistic does not depend on their order.

Every rank must call each function (they are collectives), with the same ``num_classes``. Each
collective waits at most ``timeout_s`` and then raises, naming it: a rank that never arrives
does not hang the others.

Shape legend: ``K`` nodes of this rank, ``C`` classes.
"""

from __future__ import annotations

from collections import deque
from datetime import timedelta
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch import distributed as dist

from gnnsys.train import metrics as exact
from gnnsys.train.metrics import accuracy, macro_f1  # of a summed confusion matrix

__all__ = [
    "accuracy",
    "all_gather_counts",
    "all_reduce_confusion",
    "classification_metrics",
    "macro_f1",
    "roc_auc",
]

DEFAULT_TIMEOUT_S = 300.0
"""Seconds a collective waits for the other ranks before it raises."""


def _numpy(values: Tensor | np.ndarray | Any) -> np.ndarray:
    if isinstance(values, Tensor):
        return values.detach().cpu().numpy()
    return np.asarray(values)


_HELD: list[Any] = []
"""The default process group, referenced from Python (see :func:`_check_group`)."""


def _check_group() -> None:
    """A clear error without a process group; else hold a Python reference to it.

    DDP's reducer owns the group too. Freed last by the reducer (when the model is collected
    after ``destroy_process_group``), the group's destructor joins gloo's worker threads with
    the GIL held, and a worker still releasing a finished work's Python tensors waits for the
    GIL: the job hangs at exit (seen in one torchrun run of three; PyTorch's no-GIL destructor
    covers the Python object only). Held here, the group is freed by that Python object.
    """
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(
            "gnnsys.distributed needs a torch.distributed process group, and none is "
            "initialised; call torch.distributed.init_process_group('gloo' or 'nccl') first "
            "(torchrun and Ray Train's TorchTrainer set its environment)"
        )
    group = dist.group.WORLD
    if not _HELD or _HELD[0] is not group:
        _HELD[:] = [group]  # the previous group (a test's) goes back through Python


_RETIRED: deque[Any] = deque(maxlen=16)
"""The last finished collectives, kept so that Python, not gloo's worker thread, drops them.

A gloo work holds its tensors; when the worker thread releases the last reference it needs the
GIL to free their Python objects, which deadlocks if the group's destructor is joining it with
the GIL held (:func:`_check_group`). With the last reference here the thread never frees one
of gnnsys's works; 16 collectives later it has long let go."""


def _wait(work: Any, what: str, timeout_s: float) -> None:
    """Wait for an async collective at most ``timeout_s``; raise naming it."""
    _RETIRED.append(work)
    try:
        done = work.wait(timeout=timedelta(seconds=timeout_s))
    except RuntimeError as err:
        raise TimeoutError(
            f"{what} did not complete within {timeout_s:g} s on rank {dist.get_rank()}: a rank "
            "did not call it (every rank must) or died; raise timeout_s for slow ranks"
        ) from err
    if done is False:
        raise TimeoutError(f"{what} did not complete within {timeout_s:g} s")


def all_gather_counts(values: list[int], what: str, timeout_s: float, group: Any = None) -> Tensor:
    """``[W, K]`` int64: every rank's ``values`` (one ``all_gather``, bounded by ``timeout_s``)."""
    mine = torch.tensor(values, dtype=torch.int64)
    out = [torch.zeros_like(mine) for _ in range(dist.get_world_size(group))]
    _wait(dist.all_gather(out, mine, group=group, async_op=True), what, timeout_s)
    return torch.stack(out)


def all_reduce_confusion(
    y_true_K: Tensor | np.ndarray,
    y_pred_K: Tensor | np.ndarray,
    num_classes: int,
    *,
    group: Any = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> np.ndarray:
    """``[C, C]`` int64 confusion matrix (``[true, pred]``) of every rank's nodes.

    Raises:
        RuntimeError: No process group.
        ValueError: A label outside ``[0, num_classes)``.
        TimeoutError: The all-reduce did not complete in ``timeout_s``.
    """
    _check_group()
    local = exact.confusion_matrix(_numpy(y_true_K), _numpy(y_pred_K), int(num_classes))
    total = torch.from_numpy(np.ascontiguousarray(local, dtype=np.int64))
    _wait(dist.all_reduce(total, group=group, async_op=True), "all_reduce(confusion)", timeout_s)
    out: np.ndarray = total.numpy()
    return out


def classification_metrics(
    y_true_K: Tensor | np.ndarray,
    y_pred_K: Tensor | np.ndarray,
    num_classes: int,
    *,
    group: Any = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> dict[str, float]:
    """``{"acc": ..., "f1": ...}`` over every rank's nodes, from one all-reduce."""
    confusion = all_reduce_confusion(
        y_true_K, y_pred_K, num_classes, group=group, timeout_s=timeout_s
    )
    return {"acc": exact.accuracy(confusion), "f1": exact.macro_f1(confusion)}


def roc_auc(
    score_K: Tensor | np.ndarray,
    label_K: Tensor | np.ndarray,
    *,
    group: Any = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> float | None:
    """ROC-AUC of a binary task over every rank's nodes (``None`` when a class is absent).

    Raises:
        RuntimeError: No process group.
        ValueError: ``score_K`` and ``label_K`` differ in length.
        TimeoutError: A gather did not complete in ``timeout_s``.
    """
    _check_group()
    score = np.ascontiguousarray(_numpy(score_K), dtype=np.float64).reshape(-1)
    label = np.ascontiguousarray(_numpy(label_K), dtype=np.float64).reshape(-1)
    if score.shape != label.shape:
        raise ValueError(f"score_K has {score.size} values but label_K {label.size}; pass one each")
    world = dist.get_world_size(group)
    sizes = all_gather_counts([score.size], "all_gather(sizes)", timeout_s, group)[:, 0]
    longest = max(int(s) for s in sizes)
    rows = torch.zeros(2, longest, dtype=torch.float64)
    rows[0, : score.size] = torch.from_numpy(score)
    rows[1, : label.size] = torch.from_numpy(label)
    gathered = [torch.empty_like(rows) for _ in range(world)]
    _wait(
        dist.all_gather(gathered, rows, group=group, async_op=True), "all_gather(scores)", timeout_s
    )
    parts = [g[:, : int(n)] for g, n in zip(gathered, sizes, strict=True)]
    every = torch.cat(parts, dim=1).numpy()
    return exact.roc_auc(every[0], every[1])
