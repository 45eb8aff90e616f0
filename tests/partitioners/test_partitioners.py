from __future__ import annotations

import numpy as np
import pytest

from gnnsys.partitioners import PARTITIONERS, external, make_partitioner, partition
from gnnsys.partitioners.base import fill_empty_parts, vertex_weights
from gnnsys.partitioners.metis import metis_csr
from gnnsys.partitioners.streaming import capacity_argmax
from gnnsys.types import Graph

OPTIONAL = {"kahip": external.HAS_KAHIP, "mtkahypar": external.HAS_MTKAHYPAR}
METHODS = [
    pytest.param(m, marks=pytest.mark.skipif(not OPTIONAL.get(m, True), reason=f"{m} missing"))
    for m in PARTITIONERS
]


def path_graph(n: int) -> Graph:
    src = np.arange(n - 1)
    return Graph.from_edge_index(np.stack([src, src + 1]), n, symmetric=True)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("num_parts", [1, 3, 8])
def test_valid_assignment_no_empty_part(tiny_graph: Graph, method: str, num_parts: int) -> None:
    a = partition(tiny_graph, method, num_parts, seed=0)
    assert a.part_N.dtype == np.int32 and a.part_N.shape == (tiny_graph.num_nodes,)
    assert a.num_parts == num_parts and a.method == method
    counts = np.bincount(a.part_N, minlength=num_parts)
    assert counts.shape == (num_parts,) and counts.min() > 0


@pytest.mark.parametrize("method", METHODS)
def test_num_parts_equal_num_nodes(method: str) -> None:
    g = path_graph(6)
    a = partition(g, method, 6, seed=1)
    assert sorted(a.part_N.tolist()) == list(range(6))


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("bad", [0, 7, 100])
def test_num_parts_out_of_range_is_clear_error(method: str, bad: int) -> None:
    with pytest.raises(ValueError, match=rf"num_parts={bad}.*1 <= num_parts <= 6"):
        partition(path_graph(6), method, bad)


@pytest.mark.parametrize("method", METHODS)
def test_same_seed_identical(tiny_graph: Graph, method: str) -> None:
    a = partition(tiny_graph, method, 4, seed=7)
    b = partition(tiny_graph, method, 4, seed=7)
    np.testing.assert_array_equal(a.part_N, b.part_N)


@pytest.mark.parametrize("method", ["random", "hash", "ldg", "fennel"])
def test_other_seed_differs(tiny_graph: Graph, method: str) -> None:
    a = partition(tiny_graph, method, 4, seed=1)
    b = partition(tiny_graph, method, 4, seed=2)
    assert not np.array_equal(a.part_N, b.part_N)


def test_random_and_range_exactly_balanced(tiny_graph: Graph) -> None:
    for method in ("random", "range"):
        counts = np.bincount(partition(tiny_graph, method, 3).part_N)
        assert counts.max() - counts.min() <= 1


def test_range_is_contiguous() -> None:
    a = partition(path_graph(10), "range", 3)
    assert a.part_N.tolist() == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_metis_beats_random(tiny_graph: Graph) -> None:
    from gnnsys.partitioners.metrics import edge_cut

    metis = partition(tiny_graph, "metis", 4)
    rand = partition(tiny_graph, "random", 4)
    assert edge_cut(tiny_graph, metis.part_N) < 0.6 * edge_cut(tiny_graph, rand.part_N)
    assert np.bincount(metis.part_N).max() <= 1.03 * tiny_graph.num_nodes / 4


def test_metis_multi_constraint_balance() -> None:
    from gnnsys.datasets.synthetic import sbm
    from gnnsys.partitioners.metrics import part_loads

    g = sbm(num_nodes=20000, num_classes=4, avg_degree=8, num_features=1, seed=0)
    metis = partition(g, "metis", 4, balance=("nodes", "train", "edges"), recursive=False)
    loads = part_loads(g, metis.part_N, 4)
    for key in ("nodes", "train", "edges"):
        assert loads[key].max() / loads[key].mean() < 1.1, key
    assert metis.params["balance"] == ["nodes", "train", "edges"]


@pytest.mark.parametrize("method", ["ldg", "fennel"])
def test_streaming_capacity_and_cut(tiny_graph: Graph, method: str) -> None:
    from gnnsys.partitioners.metrics import edge_cut

    a = partition(tiny_graph, method, 4, seed=0, slack=0.05)
    assert np.bincount(a.part_N).max() <= int(np.ceil(1.05 * tiny_graph.num_nodes / 4))
    rand = partition(tiny_graph, "random", 4)
    assert edge_cut(tiny_graph, a.part_N) < edge_cut(tiny_graph, rand.part_N)


@pytest.mark.parametrize("order", ["random", "natural", "degree"])
def test_streaming_orders_and_passes(tiny_graph: Graph, order: str) -> None:
    a = partition(tiny_graph, "fennel", 4, order=order, passes=2, chunk=50)
    assert np.bincount(a.part_N, minlength=4).min() > 0
    assert a.params["order"] == order and a.params["passes"] == 2


def test_capacity_argmax_never_overfills() -> None:
    score = np.array([[3.0, 1.0], [2.0, 1.0], [5.0, 0.0], [1.0, 0.5]])
    choice = capacity_argmax(score, np.array([2, 5]))
    assert choice.tolist() == [0, 0, 1, 1]
    assert np.bincount(choice, minlength=2).tolist() == [2, 2]


def test_fill_empty_parts_moves_from_largest() -> None:
    part = fill_empty_parts(np.array([0, 0, 0, 1], dtype=np.int32), 3)
    assert part.tolist() == [0, 0, 2, 1]


def test_vertex_weights_columns(tiny_graph: Graph) -> None:
    w = vertex_weights(tiny_graph, ("edges", "train"))
    np.testing.assert_array_equal(w[:, 0], tiny_graph.in_degree + 1)
    np.testing.assert_array_equal(w[:, 1], tiny_graph.train_mask)


def test_bad_options_are_clear_errors(tiny_graph: Graph) -> None:
    with pytest.raises(ValueError, match="unknown partitioner 'nope'"):
        partition(tiny_graph, "nope", 2)
    with pytest.raises(ValueError, match="bad option for partitioner 'metis'"):
        make_partitioner("metis", fanout=3)
    with pytest.raises(ValueError, match="balance="):
        make_partitioner("metis", balance=("nodes", "vertices"))
    with pytest.raises(ValueError, match="order="):
        make_partitioner("fennel", order="bfs")
    no_train = Graph(indptr=tiny_graph.indptr, indices=tiny_graph.indices, num_nodes=1000)
    with pytest.raises(ValueError, match="no train_mask"):
        partition(no_train, "metis", 2, balance=("nodes", "train"))


def test_metis_csr_symmetrizes_directed_graph() -> None:
    g = Graph.from_edge_index(np.array([[0, 1, 2, 2], [1, 2, 0, 2]]), 3)
    xadj, adjncy = metis_csr(g)
    assert xadj.tolist() == [0, 2, 4, 6]
    assert adjncy.tolist() == [1, 2, 0, 2, 0, 1]
    sym = path_graph(5)
    xadj, adjncy = metis_csr(sym)
    np.testing.assert_array_equal(adjncy, sym.indices)


def test_missing_optional_package_names_the_extra(
    tiny_graph: Graph, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(external, "HAS_KAHIP", False)
    monkeypatch.setattr(external, "HAS_MTKAHYPAR", False)
    for method in ("kahip", "mtkahypar"):
        with pytest.raises(ImportError, match=r"gnnsys\[bench\]"):
            partition(tiny_graph, method, 2)


def test_edgeless_graph() -> None:
    g = Graph(indptr=np.zeros(6, dtype=np.int64), indices=np.zeros(0, np.int32), num_nodes=5)
    for method in ("metis", "ldg", "fennel", "hash"):
        assert np.bincount(partition(g, method, 2).part_N).min() > 0


def test_capacity_argmax_keeps_stayers_first() -> None:
    # part 0 has one free slot; row 1 already lives there, row 0 would like to move in
    score = np.array([[5.0, 1.0], [2.0, 1.0]])
    choice = capacity_argmax(score, np.array([1, 5]), current_K=np.array([1, 0]))
    assert choice.tolist() == [1, 0]


def test_restreaming_does_not_raise_the_cut(tiny_graph: Graph) -> None:
    from gnnsys.partitioners.metrics import edge_cut

    one = partition(tiny_graph, "fennel", 4, seed=3)
    three = partition(tiny_graph, "fennel", 4, seed=3, passes=3)
    assert edge_cut(tiny_graph, three.part_N) <= edge_cut(tiny_graph, one.part_N)


def test_metis_same_as_pymetis_direct(tiny_graph: Graph) -> None:
    import pymetis

    direct = pymetis.part_graph(
        4,
        pymetis.CSRAdjacency(tiny_graph.indptr, tiny_graph.indices.astype(np.int64)),
        options=pymetis.Options(seed=5),
    )
    ours = partition(tiny_graph, "metis", 4, seed=5)
    np.testing.assert_array_equal(ours.part_N, np.asarray(direct.vertex_part))


def test_symmetry_checks_agree() -> None:
    from gnnsys.partitioners.metis import _is_metis_ready, _is_metis_ready_by_sort

    cases = {
        "path": (path_graph(6), True),
        "directed": (Graph.from_edge_index(np.array([[0, 1], [1, 2]]), 3), False),
        "loop": (Graph.from_edge_index(np.array([[0, 1, 1], [1, 0, 1]]), 2), False),
        "unsorted": (
            Graph(
                indptr=np.array([0, 2, 3, 4], dtype=np.int64),
                indices=np.array([2, 1, 0, 0], dtype=np.int32),
                num_nodes=3,
            ),
            False,
        ),
    }
    for name, (g, expected) in cases.items():
        assert _is_metis_ready(g) is expected, name
        assert _is_metis_ready_by_sort(g) is expected, name


@pytest.mark.parametrize("method", ["ldg", "fennel"])
def test_edge_weight_spreads_in_edges_and_keeps_node_capacity(method: str) -> None:
    """On a skewed graph, counting in-edges in the load lowers the largest part's edge share."""
    from gnnsys.datasets import load
    from gnnsys.partitioners.metrics import part_loads

    graph = load("synthetic:rmat", num_nodes=1 << 13, num_features=2)
    plain = partition(graph, method, 4, seed=0, slack=0.5)
    weighted = partition(graph, method, 4, seed=0, slack=0.5, edge_weight=1.0)
    assert "edge_weight" not in plain.params and weighted.params["edge_weight"] == 1.0
    edges = [part_loads(graph, a.part_N, 4)["edges"] for a in (plain, weighted)]
    assert edges[1].max() < edges[0].max()
    capacity = int(np.ceil(1.5 * graph.num_nodes / 4))
    assert np.bincount(weighted.part_N, minlength=4).max() <= capacity


@pytest.mark.parametrize("bad", [-0.5, float("nan"), float("inf")])
def test_edge_weight_must_be_finite_and_non_negative(bad: float) -> None:
    with pytest.raises(ValueError, match=f"edge_weight={bad}; choose a finite value >= 0"):
        make_partitioner("fennel", edge_weight=bad)
