from __future__ import annotations

import numpy as np
import pytest

from gnnsys.partitioners.halo import halo_of_part, khop_reach
from gnnsys.partitioners.metrics import (
    balance,
    communication_volume,
    compute_metrics,
    edge_cut,
    remote_fetch_upper_bound,
)
from gnnsys.types import Assignment, Graph


def path4(train: list[bool] | None = None) -> Graph:
    """0 - 1 - 2 - 3, undirected (6 directed edges)."""
    mask = None if train is None else np.array(train)
    return Graph.from_edge_index(
        np.array([[0, 1, 2], [1, 2, 3]]), 4, symmetric=True, train_mask=mask
    )


def assign(parts: list[int], num_parts: int = 2) -> Assignment:
    return Assignment(part_N=np.array(parts, dtype=np.int32), num_parts=num_parts, method="t")


def test_path_metrics_by_hand() -> None:
    g = path4(train=[True, False, False, False])
    m = compute_metrics(g, assign([0, 0, 1, 1]), num_hops=2)
    assert m.edge_cut == 2  # 1->2 and 2->1
    assert m.edge_cut_fraction == pytest.approx(2 / 6)
    assert m.node_balance == 1.0
    assert m.edge_balance == 1.0  # in-degrees 1,2 | 2,1
    assert m.train_balance == 2.0  # train loads [1, 0]: max 1 / mean 0.5
    assert m.comm_volume == 2  # (1 -> part 1), (2 -> part 0)
    assert m.halo_sizes == (2, 2)  # part 0: {2, 3}; part 1: {0, 1}
    assert m.halo_factor == 1.0
    assert m.remote_fetch_upper_bound == 1  # train seed 0: hop 1 {1}, hop 2 {2} -> {2}


def test_one_hop_halo_equals_comm_volume() -> None:
    g = path4()
    m = compute_metrics(g, assign([0, 1, 1, 1]), num_hops=1)
    assert m.halo_sizes == (1, 1)
    assert m.comm_volume == 2
    assert m.node_balance == 1.5
    assert m.edge_balance == pytest.approx(5 / 3)  # edges [1, 5], mean 3
    assert m.train_balance is None
    assert m.remote_fetch_upper_bound == 2  # no train mask: all owned nodes are seeds


def test_directed_edges_counted_once() -> None:
    g = Graph.from_edge_index(np.array([[0, 0, 2], [1, 2, 1]]), 3)  # 0->1, 0->2, 2->1
    part = np.array([0, 1, 1], dtype=np.int32)
    assert edge_cut(g, part) == 2
    assert communication_volume(g, part, 2) == 1  # node 0 shipped once to part 1
    assert halo_of_part(g, part, 1, 1).tolist() == [0]
    assert halo_of_part(g, part, 0, 3).tolist() == []  # node 0 has no in-edges
    assert remote_fetch_upper_bound(g, part, 2, 2) == 1


def test_khop_reach_hops() -> None:
    g = Graph.from_edge_index(np.array([[0, 1, 2, 3], [1, 2, 3, 4]]), 5)  # chain 0->1->2->3->4
    assert np.flatnonzero(khop_reach(g, np.array([4]), 0)).tolist() == [4]
    assert np.flatnonzero(khop_reach(g, np.array([4]), 2)).tolist() == [2, 3, 4]
    assert np.flatnonzero(khop_reach(g, np.array([4]), 9)).tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="num_hops"):
        khop_reach(g, np.array([0]), -1)


def test_balance_and_mismatch() -> None:
    assert balance(np.array([2, 2, 8])) == 2.0
    with pytest.raises(ValueError, match="covers 3 nodes"):
        compute_metrics(path4(), assign([0, 1, 1]))
