"""Synthetic generators: determinism, structure, and the parameters' validation."""

from __future__ import annotations

import numpy as np
import pytest

from gnnsys.datasets import load
from gnnsys.datasets.rmat import _level_table
from gnnsys.types import Graph

SMALL = {
    "sbm": dict(num_nodes=2000, num_classes=4, avg_degree=8, num_features=8),
    "rmat": dict(num_nodes=3000, avg_degree=12, num_classes=4, num_features=8, chunk_edges=4096),
}
FIELDS = ("indptr", "indices", "x", "y", "train_mask", "val_mask", "test_mask")


def build(variant: str, seed: int) -> Graph:
    return load(f"synthetic:{variant}", seed=seed, **SMALL[variant])


@pytest.mark.parametrize("variant", sorted(SMALL))
def test_same_seed_identical_other_seed_different(variant: str) -> None:
    first, again, other = build(variant, 0), build(variant, 0), build(variant, 1)
    for name in FIELDS:
        assert np.array_equal(getattr(first, name), getattr(again, name)), name
    assert not np.array_equal(first.indices, other.indices)
    assert not np.array_equal(first.x, other.x)


def _edge_keys(g: Graph) -> np.ndarray:
    return g.dst_of_edges() * g.num_nodes + g.indices


@pytest.mark.parametrize("variant", sorted(SMALL))
def test_symmetric_no_loops_no_duplicates_sorted_rows(variant: str) -> None:
    g = build(variant, 0)
    dst, src = g.dst_of_edges(), g.indices.astype(np.int64)
    assert not np.any(src == dst)
    keys = _edge_keys(g)
    assert np.all(np.diff(keys) > 0), "rows sorted ascending, no duplicates"
    assert np.array_equal(np.sort(src * g.num_nodes + dst), keys), "symmetric"


def test_rmat_is_power_law_and_homophilous() -> None:
    g = load("synthetic:rmat", num_nodes=20_000, avg_degree=20, num_features=4, seed=0)
    degree = g.in_degree
    assert degree.max() > 50 * degree.mean()  # heavy tail
    assert g.indices.dtype == np.int32 and g.x is not None and g.x.dtype == np.float32
    assert g.y is not None and np.bincount(g.y).tolist() == [2500] * 8
    same = g.y[g.dst_of_edges()] == g.y[g.indices]
    assert 0.7 < same.mean() < 0.8  # homophily=0.7 plus R-MAT's own in-block bias
    drawn = 20_000 * 20
    assert 0.85 * drawn < g.num_edges <= drawn


def test_rmat_chunking_changes_nothing_but_the_draws() -> None:
    a = load("synthetic:rmat", num_nodes=3000, avg_degree=12, num_features=0, chunk_edges=1000)
    b = load("synthetic:rmat", num_nodes=3000, avg_degree=12, num_features=0, chunk_edges=1000)
    assert a.x is None and np.array_equal(a.indices, b.indices)
    c = load("synthetic:rmat", num_nodes=3000, num_edges=10_000, num_features=0)
    assert c.num_edges <= 10_000


def test_level_table_probabilities() -> None:
    table = _level_table(2, (0.57, 0.19, 0.19))
    freq = np.bincount(table, minlength=16) / table.shape[0]
    # outcome = src_bits << 2 | dst_bits, most significant level first; quadrant (src bit,
    # dst bit): a = (0, 0), b = (0, 1), c = (1, 0), d = (1, 1)
    assert freq[0b0000] == pytest.approx(0.57**2, abs=2e-6)  # a, a
    assert freq[0b1111] == pytest.approx(0.05**2, abs=2e-6)  # d, d
    assert freq[0b0101] == pytest.approx(0.57 * 0.05, abs=2e-6)  # a, d
    assert freq[0b1001] == pytest.approx(0.19 * 0.19, abs=2e-6)  # c, b


@pytest.mark.parametrize(
    ("params", "match"),
    [
        (dict(num_classes=1), "num_classes"),
        (dict(homophily=1.5), "homophily"),
        (dict(abc=(0.6, 0.3, 0.3)), "abc"),
        (dict(num_edges=-2), "num_edges"),
    ],
)
def test_rmat_rejects_bad_params(params: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        load("synthetic:rmat", num_nodes=100, **params)


def test_unknown_synthetic_variant() -> None:
    with pytest.raises(ValueError, match="choose one of"):
        load("synthetic:er")
