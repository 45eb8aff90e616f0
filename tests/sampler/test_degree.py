"""Whole-graph in-degrees on sampled blocks: ``DegreeTable`` and ``NeighborSampler(degrees=)``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnsys.sampler import CSRNeighborSource, DegreeTable, NeighborSampler, with_in_degree
from gnnsys.types import Graph


def test_dense_table_equals_graph_in_degree(tiny_graph: Graph) -> None:
    table = DegreeTable.from_indptr(tiny_graph.indptr)
    gid = torch.tensor([0, 999, 17, 17, 500])
    np.testing.assert_array_equal(table.in_degree(gid).numpy(), tiny_graph.in_degree[gid])
    assert table.in_degree(gid).dtype == torch.int64


def test_sparse_table_lookup_reports_misses() -> None:
    table = DegreeTable.from_pairs(np.array([9, 2, 5]), np.array([90, 20, 50]))
    got = table.lookup(np.array([5, 3, 9, 2, 11, 0]))
    np.testing.assert_array_equal(got.degree_K, [50, 0, 90, 20, 0, 0])
    np.testing.assert_array_equal(got.miss_pos, [1, 4, 5])
    with pytest.raises(ValueError, match="gid 3 is not in this DegreeTable"):
        table.in_degree(torch.tensor([2, 3]))
    empty = DegreeTable.from_pairs(np.zeros(0, np.int64), np.zeros(0, np.int64))
    np.testing.assert_array_equal(empty.lookup(np.array([0, 4])).miss_pos, [0, 1])


def test_table_rejects_unsorted_or_mismatched_gids() -> None:
    with pytest.raises(ValueError, match="strictly ascending"):
        DegreeTable(np.array([1, 2]), np.array([4, 3]))
    with pytest.raises(ValueError, match="one degree per gid"):
        DegreeTable(np.array([1, 2]), np.array([4]))


@pytest.mark.parametrize("fanouts", [(-1, -1), (5, 3), (4, 3, 2)])
def test_every_block_carries_whole_graph_degrees(tiny_graph: Graph, fanouts: tuple[int]) -> None:
    sampler = NeighborSampler(
        NeighborSampler.Config(fanouts=fanouts),
        source=CSRNeighborSource.from_graph(tiny_graph),
        degrees=DegreeTable.from_indptr(tiny_graph.indptr),
    )
    sub = sampler.sample(torch.arange(0, 1000, 37), seed=5)
    for block in sub.blocks:
        assert block.src_in_degree is not None
        want = tiny_graph.in_degree[sub.n_id[: block.num_src].numpy()]
        np.testing.assert_array_equal(block.src_in_degree.numpy(), want)
    plain = NeighborSampler(
        NeighborSampler.Config(fanouts=fanouts), source=CSRNeighborSource.from_graph(tiny_graph)
    ).sample(torch.arange(0, 1000, 37), seed=5)
    assert all(b.src_in_degree is None for b in plain.blocks)
    torch.testing.assert_close(plain.n_id, sub.n_id)  # degrees change nothing else


def test_with_in_degree_checks_the_length(tiny_graph: Graph) -> None:
    sampler = NeighborSampler(
        NeighborSampler.Config(fanouts=(3,)), source=CSRNeighborSource.from_graph(tiny_graph)
    )
    sub = sampler.sample(torch.tensor([1, 2]), seed=0)
    with pytest.raises(ValueError, match="one degree per n_id"):
        with_in_degree(sub, torch.zeros(int(sub.n_id.numel()) + 1, dtype=torch.int64))
