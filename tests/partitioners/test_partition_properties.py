"""Hypothesis property tests on random small graphs, against brute-force definitions."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gnnsys.partitioners import partition
from gnnsys.partitioners.halo import halo_of_part
from gnnsys.partitioners.metrics import communication_volume, edge_cut
from gnnsys.types import Graph

FAST_METHODS = ["random", "hash", "range", "metis", "ldg", "fennel"]


@st.composite
def graphs(draw: st.DrawFn) -> Graph:
    n = draw(st.integers(1, 40))
    num_edges = draw(st.integers(0, 4 * n))
    src = draw(st.lists(st.integers(0, n - 1), min_size=num_edges, max_size=num_edges))
    dst = draw(st.lists(st.integers(0, n - 1), min_size=num_edges, max_size=num_edges))
    symmetric = draw(st.booleans())
    ei = np.array([src, dst], dtype=np.int64).reshape(2, -1)
    return Graph.from_edge_index(ei, n, symmetric=symmetric)


def edge_list(g: Graph) -> list[tuple[int, int]]:
    out = []
    for v in range(g.num_nodes):
        for u in g.indices[g.indptr[v] : g.indptr[v + 1]]:
            out.append((int(u), v))
    return out


@settings(max_examples=40, deadline=None)
@given(g=graphs(), data=st.data())
def test_every_strategy_valid(g: Graph, data: st.DataObject) -> None:
    num_parts = data.draw(st.integers(1, g.num_nodes))
    method = data.draw(st.sampled_from(FAST_METHODS))
    seed = data.draw(st.integers(0, 1000))
    a = partition(g, method, num_parts, seed=seed)
    assert a.part_N.shape == (g.num_nodes,)
    assert np.bincount(a.part_N, minlength=num_parts).min() > 0
    assert a.part_N.max() < num_parts
    np.testing.assert_array_equal(a.part_N, partition(g, method, num_parts, seed=seed).part_N)


@settings(max_examples=40, deadline=None)
@given(g=graphs(), data=st.data())
def test_metrics_match_brute_force(g: Graph, data: st.DataObject) -> None:
    num_parts = data.draw(st.integers(1, g.num_nodes))
    part = np.array(
        data.draw(
            st.lists(st.integers(0, num_parts - 1), min_size=g.num_nodes, max_size=g.num_nodes)
        ),
        dtype=np.int32,
    )
    edges = edge_list(g)
    assert edge_cut(g, part) == sum(part[u] != part[v] for u, v in edges)
    pairs = {(u, int(part[v])) for u, v in edges if part[u] != part[v]}
    assert communication_volume(g, part, num_parts) == len(pairs)
    hops = data.draw(st.integers(1, 3))
    p = data.draw(st.integers(0, num_parts - 1))
    reached = {v for v in range(g.num_nodes) if part[v] == p}
    frontier = set(reached)
    for _ in range(hops):
        frontier = {u for u, v in edges if v in frontier} - reached
        reached |= frontier
    expected = sorted(v for v in reached if part[v] != p)
    assert halo_of_part(g, part, p, hops).tolist() == expected
