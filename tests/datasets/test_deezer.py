from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gnnsys.datasets import load
from gnnsys.datasets.deezer import degree_features


def test_hu_counts_and_multilabel(shared_root: Path) -> None:
    g = load("deezer:hu", root=shared_root)
    assert (g.num_nodes, g.num_edges, g.num_classes) == (47538, 445774, 84)
    assert g.y is not None and g.y.dtype == np.bool_ and g.y.shape == (47538, 84)
    per_node = g.y.sum(axis=1)
    assert (int(per_node.min()), int(per_node.max())) == (1, 42)
    assert g.x is not None and g.x.shape == (47538, 17)


def test_feature_substitutes(shared_root: Path) -> None:
    rnd = load("deezer:hu", root=shared_root, features="random", num_features=8, seed=3)
    assert rnd.x is not None and rnd.x.shape == (47538, 8)
    assert load("deezer:hu", root=shared_root, features="none").x is None
    with pytest.raises(ValueError, match="choose one of"):
        load("deezer:hu", root=shared_root, features="pagerank")


def test_degree_features() -> None:
    x = degree_features(np.array([0, 1, 3, 100_000]))
    assert x[:, :16].argmax(axis=1).tolist() == [0, 1, 2, 15]
    assert x[:, 16].tolist() == pytest.approx(
        [0.0, np.log(2) / np.log1p(1e5), np.log(4) / np.log1p(1e5), 1.0]
    )
