"""Hypothesis: write + load reproduces every shard exactly on random graphs and assignments."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gnnsys.store import load_book, load_shard, verify, write_partitions
from gnnsys.types import Assignment, Graph


@st.composite
def graph_and_assignment(draw: st.DrawFn) -> tuple[Graph, Assignment, int]:
    n = draw(st.integers(1, 30))
    m = draw(st.integers(0, 3 * n))
    ei = np.array(
        [
            draw(st.lists(st.integers(0, n - 1), min_size=m, max_size=m)),
            draw(st.lists(st.integers(0, n - 1), min_size=m, max_size=m)),
        ],
        dtype=np.int64,
    ).reshape(2, -1)
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    g = Graph.from_edge_index(ei, n, x=x, y=np.arange(n, dtype=np.int64))
    num_parts = draw(st.integers(1, n))
    part = np.array(
        draw(st.lists(st.integers(0, num_parts - 1), min_size=n, max_size=n)), dtype=np.int32
    )
    hops = draw(st.integers(1, 3))
    return g, Assignment(part_N=part, num_parts=num_parts, method="test"), hops


@settings(max_examples=6, deadline=None)  # each example writes and fsyncs a store (~2.6 s)
@given(case=graph_and_assignment())
def test_round_trip_on_random_graphs(case: tuple[Graph, Assignment, int]) -> None:
    g, a, hops = case
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "parts"
        write_partitions(g, a, root, num_hops=hops)
        verify(root)
        np.testing.assert_array_equal(load_book(root).part_N, a.part_N)
        seen = np.zeros(g.num_nodes, dtype=int)
        for p in range(a.num_parts):
            s = load_shard(root, p)
            seen[s.owned_gid] += 1
            assert np.all(a.part_N[s.owned_gid] == p)
            np.testing.assert_array_equal(s.y, s.owned_gid)
            np.testing.assert_array_equal(s.x, g.x[s.owned_gid])
            pos = np.concatenate(
                [np.arange(g.indptr[v], g.indptr[v + 1]) for v in s.owned_gid] + [np.zeros(0, int)]
            )
            np.testing.assert_array_equal(s.e_id, pos)
            np.testing.assert_array_equal(s.indices_gid, g.indices[pos])
            local = np.concatenate([s.owned_gid, s.halo_gid])
            np.testing.assert_array_equal(local[s.indices_local], s.indices_gid)
            assert np.all(a.part_N[s.halo_gid] != p)
            np.testing.assert_array_equal(s.halo_part, a.part_N[s.halo_gid])
        assert np.all(seen == 1)
