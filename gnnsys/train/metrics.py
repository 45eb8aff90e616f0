"""Exact classification metrics from sums the ranks can add: confusion matrices and score lists.

Each rank evaluates only the nodes it owns, so every metric here is computed from pieces that
combine exactly across ranks:

- accuracy and macro-F1 from a ``[C, C]`` confusion matrix (``confusion[true, pred]``), which
  ranks add element-wise;
- ROC-AUC (binary tasks) from the positive-class scores and labels of the split, which ranks
  concatenate (a rank holds ``|split ∩ owned|`` of them, far less than the graph).

Definitions follow scikit-learn's (``accuracy_score``, ``f1_score(average="macro")`` over the
labels present in ``y_true`` or ``y_pred``, ``roc_auc_score`` with tied scores sharing their
average rank); ``tests/train/test_metrics.py`` checks agreement to 1e-6. None needs sklearn.

Shape legend: ``C`` classes, ``K`` nodes of one split.
"""

from __future__ import annotations

import numpy as np
from torch import Tensor

__all__ = [
    "HITS_AT",
    "LINK_METRICS",
    "METRICS",
    "accuracy",
    "confusion_matrix",
    "is_metric_key",
    "link_metrics",
    "link_ranks",
    "link_sums",
    "macro_f1",
    "roc_auc",
    "split_counts",
]

METRICS = ("acc", "auc", "f1")
"""Names ``--metric`` accepts (``auc`` needs binary labels)."""


def confusion_matrix(y_true_K: np.ndarray, y_pred_K: np.ndarray, num_classes: int) -> np.ndarray:
    """``[C, C]`` int64 counts of (true, predicted) pairs; labels must lie in ``[0, C)``.

    Raises:
        ValueError: A label outside ``[0, num_classes)``.
    """
    true = np.asarray(y_true_K, dtype=np.int64)
    pred = np.asarray(y_pred_K, dtype=np.int64)
    for name, arr in (("y_true", true), ("y_pred", pred)):
        if arr.size and (arr.min() < 0 or arr.max() >= num_classes):
            raise ValueError(
                f"{name} has labels in [{arr.min()}, {arr.max()}] but num_classes={num_classes}; "
                "labels must lie in [0, num_classes)"
            )
    flat = np.bincount(true * num_classes + pred, minlength=num_classes * num_classes)
    return flat.reshape(num_classes, num_classes).astype(np.int64)


def accuracy(confusion_CC: np.ndarray) -> float:
    """Correct / total (0.0 for an empty split)."""
    total = int(confusion_CC.sum())
    return float(np.trace(confusion_CC)) / total if total else 0.0


def macro_f1(confusion_CC: np.ndarray) -> float:
    """Unweighted mean F1 over the classes present in the true or predicted labels.

    Matches ``sklearn.metrics.f1_score(y_true, y_pred, average="macro")``: a class that never
    occurs in either is left out; one that occurs but is never predicted right scores 0.
    """
    tp = np.diag(confusion_CC).astype(np.float64)
    fp = confusion_CC.sum(axis=0) - tp
    fn = confusion_CC.sum(axis=1) - tp
    present = (confusion_CC.sum(axis=0) + confusion_CC.sum(axis=1)) > 0
    if not present.any():
        return 0.0
    f1 = 2 * tp[present] / (2 * tp[present] + fp[present] + fn[present])
    return float(f1.mean())


def roc_auc(score_K: np.ndarray, label_K: np.ndarray) -> float | None:
    """Area under the ROC curve of a binary task (``None`` when a class is absent).

    The Mann-Whitney statistic with tied scores sharing their average rank, which equals
    ``sklearn.metrics.roc_auc_score`` (trapezoidal ROC with ties as diagonal segments).

    Args:
        score_K: Score of the positive class (any monotone transform gives the same AUC).
        label_K: 0/1 labels.
    """
    score = np.asarray(score_K, dtype=np.float64)
    label = np.asarray(label_K).astype(bool)
    num_pos = int(label.sum())
    num_neg = int(label.size - num_pos)
    if num_pos == 0 or num_neg == 0:
        return None
    _, inverse, counts = np.unique(score, return_inverse=True, return_counts=True)
    # Average 1-based rank of each distinct score: start of its run plus (count + 1) / 2.
    starts = np.cumsum(counts) - counts
    avg_rank = starts + (counts + 1) / 2.0
    rank_sum = float(avg_rank[inverse][label].sum())
    return (rank_sum - num_pos * (num_pos + 1) / 2.0) / (num_pos * num_neg)


# ---- link prediction ---------------------------------------------------------------------------
HITS_AT = (20, 50, 100)
"""``K`` of the Hits@K a link evaluation reports."""
LINK_METRICS = ("mrr", *(f"hits@{k}" for k in HITS_AT))
"""Names ``--metric`` accepts for ``--task link``."""


def is_metric_key(key: str) -> bool:
    """Whether a ``metrics.jsonl`` key is an evaluation metric (``val_acc``, ``test_hits@50``)."""
    return key.endswith(tuple(f"_{m}" for m in (*METRICS, "mrr"))) or "_hits@" in key


def link_ranks(pos_K: np.ndarray, neg_KQ: np.ndarray) -> np.ndarray:
    """``[K]`` float64 rank of each positive among its own ``Q`` negatives (1 = best).

    OGB's ``Evaluator._eval_mrr`` definition: ``1 + (optimistic + pessimistic) / 2``, where
    the optimistic rank counts negatives scoring strictly above the positive and the
    pessimistic one those scoring at least as high, so a tie counts half.
    """
    pos = np.asarray(pos_K, dtype=np.float64).reshape(-1, 1)
    neg = np.asarray(neg_KQ, dtype=np.float64)
    optimistic = (neg > pos).sum(axis=1)
    pessimistic = (neg >= pos).sum(axis=1)
    out: np.ndarray = 1.0 + 0.5 * (optimistic + pessimistic)
    return out


def link_sums(rank_K: np.ndarray) -> np.ndarray:
    """``[2 + len(HITS_AT)]`` float64 sums ranks can add: ``sum 1/rank``, hits per K, count."""
    rank = np.asarray(rank_K, dtype=np.float64)
    hits = [float((rank <= k).sum()) for k in HITS_AT]
    return np.array([float((1.0 / rank).sum()), *hits, float(rank.shape[0])], dtype=np.float64)


def link_metrics(sums: np.ndarray) -> dict[str, float | None]:
    """``mrr`` and ``hits@K`` from summed :func:`link_sums` (``None`` for an empty split).

    Equal to OGB's means over the concatenated per-link lists (MRR = mean of ``1/rank``,
    Hits@K = fraction of links with ``rank <= K``), up to float64 summation order.
    """
    count = float(sums[-1])
    names = LINK_METRICS
    if count == 0:
        return dict.fromkeys(names, None)
    return {name: float(sums[i]) / count for i, name in enumerate(names)}


def split_counts(
    logits_MC: Tensor, y_M: np.ndarray, masks: dict[str, np.ndarray | None]
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Per split: the confusion matrix, and the scores and labels of two-class tasks.

    ``RankEval``'s fields, over the split's labelled nodes. A missing mask selects nothing;
    unlabelled nodes (-1) count in no split.
    """
    num_classes = int(logits_MC.shape[1])
    pred_M = logits_MC.argmax(-1).numpy()
    confusion, scores, labels = {}, {}, {}
    for split, mask in masks.items():
        keep = np.zeros(y_M.shape[0], bool) if mask is None else np.array(mask, dtype=bool)
        keep &= y_M >= 0
        confusion[split] = confusion_matrix(y_M[keep], pred_M[keep], num_classes)
        if num_classes == 2:
            diff = (logits_MC[:, 1] - logits_MC[:, 0]).double().numpy()
            scores[split], labels[split] = diff[keep], y_M[keep]
    return confusion, scores, labels
