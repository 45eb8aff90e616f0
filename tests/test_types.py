"""Validation and constructors of gnnsys.types.Graph."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnsys.types import Graph

EDGES = np.array([[0, 1, 2, 2, 0], [1, 2, 0, 0, 0]])  # one duplicate (2->0), one self-loop


def test_from_edge_index_dedupes_and_builds_in_csr() -> None:
    g = Graph.from_edge_index(EDGES, 3)
    assert g.num_edges == 4
    assert g.indptr.tolist() == [0, 2, 3, 4]
    assert g.indices.tolist() == [0, 2, 0, 1]  # in-neighbors of 0: {0, 2}; of 1: {0}; of 2: {1}


def test_symmetric_and_self_loop_options() -> None:
    g = Graph.from_edge_index(EDGES, 3, symmetric=True, self_loops=False)
    assert g.num_edges == 6
    assert not np.any(g.indices == g.dst_of_edges())
    loops = Graph.from_edge_index(EDGES, 3, self_loops=True)
    assert loops.num_edges == 3 + 3


def test_pyg_round_trip(tiny_graph: Graph) -> None:
    data = tiny_graph.to_pyg()
    assert data.num_edges == tiny_graph.num_edges
    back = Graph.from_pyg(data)
    assert np.array_equal(back.indptr, tiny_graph.indptr)
    assert np.array_equal(back.indices, tiny_graph.indices)
    assert np.array_equal(back.x, tiny_graph.x)
    assert torch.equal(data.y, torch.from_numpy(tiny_graph.y))


def base(**kw: object) -> dict[str, object]:
    fields: dict[str, object] = dict(
        indptr=np.array([0, 1, 2], dtype=np.int64),
        indices=np.array([1, 0], dtype=np.int32),
        num_nodes=2,
    )
    fields.update(kw)
    return fields


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        (base(indices=np.array([1, 5], dtype=np.int32)), "ids must lie in"),
        (base(indices=np.array([-1, 0], dtype=np.int32)), "ids must lie in"),
        (base(indptr=np.array([0, 2, 1], dtype=np.int64)), "non-decreasing"),
        (base(indptr=np.array([0, 2], dtype=np.int64)), r"indptr has shape"),
        (base(indices=np.array([1, 0, 1], dtype=np.int32)), r"indices has shape"),
        (base(x=np.array([[0.0], [np.nan]], dtype=np.float32)), "NaN or inf value in row 1"),
        (base(x=np.array([[0.0], [np.inf]], dtype=np.float32)), "NaN or inf"),
        (base(x=np.zeros((3, 2), dtype=np.float32)), r"x has shape"),
        (base(x=np.zeros((2, 2), dtype=np.float64)), "astype"),
        (base(y=np.array([0, 3]), num_classes_hint=2), "labels must lie in"),
        (base(y=np.array([0, -2])), "labels are >= 0"),
        (base(y=np.array([0, 1, 1])), r"y has shape"),
        (base(train_mask=np.array([True])), r"train_mask has shape"),
        (base(val_mask=np.array([1, 0])), r"val_mask has dtype"),
        (base(test_mask=np.array([0.0, 1.0])), r"test_mask has dtype"),
    ],
)
def test_validation_errors_name_the_value(fields: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Graph(**fields)  # type: ignore[arg-type]


def test_edge_index_out_of_range_names_the_fix() -> None:
    with pytest.raises(ValueError, match="raise num_nodes"):
        Graph.from_edge_index(np.array([[0, 9], [1, 0]]), 3)
    with pytest.raises(ValueError, match="negative node id"):
        Graph.from_edge_index(np.array([[0, -1], [1, 0]]), 3)


def _coo_to_csr_by_unique(
    src: np.ndarray, dst: np.ndarray, n: int, symmetric: bool, self_loops: bool | None
) -> tuple[np.ndarray, np.ndarray]:
    """The implementation ``coo_to_csr`` had before the sort-based dedupe (np.unique)."""
    if symmetric:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    if self_loops is not None:
        keep = src != dst
        src, dst = src[keep], dst[keep]
        if self_loops:
            loops = np.arange(n, dtype=np.int64)
            src, dst = np.concatenate([src, loops]), np.concatenate([dst, loops])
    key = np.unique(dst.astype(np.int64) * max(n, 1) + src)
    dst_sorted = key // max(n, 1)
    indices = key - dst_sorted * max(n, 1)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst_sorted, minlength=n), out=indptr[1:])
    return indptr, indices.astype(np.int32 if n < 2**31 else np.int64)


@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("self_loops", [None, False, True])
@pytest.mark.parametrize("n, num_edges", [(1, 5), (7, 0), (7, 1), (50, 400), (3000, 20000)])
def test_coo_to_csr_equals_the_unique_implementation(
    symmetric: bool, self_loops: bool | None, n: int, num_edges: int
) -> None:
    from gnnsys.types import coo_to_csr

    rng = np.random.default_rng(n * 31 + num_edges)
    src = rng.integers(0, n, num_edges)
    dst = rng.integers(0, n, num_edges)
    if num_edges > 2:  # force duplicates and self loops into every non-trivial case
        src[: num_edges // 4] = src[num_edges // 4 : 2 * (num_edges // 4)]
        dst[: num_edges // 4] = dst[num_edges // 4 : 2 * (num_edges // 4)]
        dst[-2:] = src[-2:]
    for src_dtype in (np.int64, np.int32):
        got = coo_to_csr(src.astype(src_dtype), dst, n, symmetric=symmetric, self_loops=self_loops)
        want = _coo_to_csr_by_unique(src.astype(src_dtype), dst, n, symmetric, self_loops)
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype and np.array_equal(g, w)
