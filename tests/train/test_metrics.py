"""Exact metrics agree with scikit-learn's definitions to 1e-6 and combine across ranks."""

from __future__ import annotations

import numpy as np
import pytest

from gnnsys.train.metrics import accuracy, confusion_matrix, macro_f1, roc_auc

sklearn_metrics = pytest.importorskip("sklearn.metrics")


@pytest.mark.parametrize("seed", range(20))
def test_macro_f1_and_accuracy_match_sklearn(seed: int) -> None:
    rng = np.random.default_rng(seed)
    num_classes = int(rng.integers(2, 9))
    n = int(rng.integers(1, 300))
    y = rng.integers(0, num_classes, n)
    pred = np.where(rng.random(n) < 0.6, y, rng.integers(0, num_classes, n))
    confusion = confusion_matrix(y, pred, num_classes)
    assert accuracy(confusion) == pytest.approx(sklearn_metrics.accuracy_score(y, pred), abs=1e-6)
    want = sklearn_metrics.f1_score(y, pred, average="macro", zero_division=0)
    assert macro_f1(confusion) == pytest.approx(want, abs=1e-6)


@pytest.mark.parametrize("seed", range(20))
def test_roc_auc_matches_sklearn_with_ties(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 400))
    label = rng.integers(0, 2, n)
    label[0], label[1] = 0, 1  # both classes present
    score = np.round(rng.normal(size=n) + label * rng.random(), 1)  # rounding makes ties
    want = sklearn_metrics.roc_auc_score(label, score)
    assert roc_auc(score, label) == pytest.approx(want, abs=1e-6)


def test_roc_auc_one_class_is_none() -> None:
    assert roc_auc(np.array([0.1, 0.2]), np.array([1, 1])) is None


def test_confusion_matrices_add_across_ranks() -> None:
    rng = np.random.default_rng(0)
    y, pred = rng.integers(0, 5, 500), rng.integers(0, 5, 500)
    parts = np.array_split(np.arange(500), 3)
    summed = sum(confusion_matrix(y[p], pred[p], 5) for p in parts)
    np.testing.assert_array_equal(summed, confusion_matrix(y, pred, 5))


def test_confusion_rejects_out_of_range_label() -> None:
    with pytest.raises(ValueError, match="num_classes=3"):
        confusion_matrix(np.array([0, 3]), np.array([0, 1]), 3)


def test_macro_f1_ignores_absent_classes() -> None:
    y = np.array([0, 0, 1, 1])
    pred = np.array([0, 1, 1, 1])
    want = sklearn_metrics.f1_score(y, pred, average="macro")
    assert macro_f1(confusion_matrix(y, pred, 6)) == pytest.approx(want, abs=1e-6)
