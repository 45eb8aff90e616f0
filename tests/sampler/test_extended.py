"""ExtendedSampler: weighted, temporal and disjoint draws; layout shared with NeighborSampler."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import Tensor

from gnnsys.sampler import CSRNeighborSource
from gnnsys.sampler.candidates import time_sorted
from gnnsys.sampler.extended import ExtendedSampler
from gnnsys.types import SampledSubgraph


def _source(src: list[int], dst: list[int], num_nodes: int) -> CSRNeighborSource:
    """In-edge CSR; edge id = position in the (src, dst) lists."""
    dst_t = torch.tensor(dst)
    perm = torch.sort(dst_t, stable=True).indices
    indptr = torch.zeros(num_nodes + 1, dtype=torch.int64)
    torch.cumsum(torch.bincount(dst_t, minlength=num_nodes), 0, out=indptr[1:])
    return CSRNeighborSource(indptr, torch.tensor(src)[perm], perm)


def _star(degree: int) -> CSRNeighborSource:
    """Node 0 with in-neighbors 1..degree."""
    return _source(list(range(1, degree + 1)), [0] * degree, degree + 1)


def test_weighted_draws_follow_the_weights_and_never_take_weight_zero() -> None:
    sampler = ExtendedSampler(
        ExtendedSampler.Config(fanouts=(1,)),
        source=_star(4),
        edge_weight=torch.tensor([0.0, 1.0, 2.0, 7.0]),
    )
    picks = [int(sampler.sample(torch.tensor([0]), seed=s).n_id[1]) for s in range(3000)]
    freq = np.bincount(picks, minlength=5)[1:] / len(picks)
    assert freq[0] == 0.0
    assert np.allclose(freq[1:], [0.1, 0.2, 0.7], atol=0.03), freq


def test_weighted_with_replacement_draws_fanout_edges() -> None:
    config = ExtendedSampler.Config(fanouts=(5,), replace=True)
    weight = torch.tensor([0.0, 0.0, 1.0])
    sampler = ExtendedSampler(config, source=_star(3), edge_weight=weight)
    sub = sampler.sample(torch.tensor([0]), seed=3)
    assert sub.num_sampled_edges == (5,)
    assert sub.blocks[0].e_id.tolist() == [2] * 5  # only the weighted edge


def test_node_temporal_keeps_neighbors_no_later_than_the_seed() -> None:
    # A path 0 <- 1 <- 2 <- 3 <- 4 with node times 0..4: seed 4 (t=4) may reach everything.
    src, dst = [1, 2, 3, 4, 0, 1, 2, 3], [0, 1, 2, 3, 1, 2, 3, 4]
    time = torch.tensor([5, 1, 2, 3, 4])
    sampler = ExtendedSampler(
        ExtendedSampler.Config(fanouts=(-1, -1)), source=_source(src, dst, 5), node_time=time
    )
    sub = sampler.sample(torch.tensor([4, 2]), seed=0)
    assert sub.batch is not None
    for tree, seed_gid in enumerate([4, 2]):
        nodes = sub.n_id[sub.batch == tree]
        assert bool((time[nodes] <= time[seed_gid]).all()), nodes
    assert 0 not in sub.n_id.tolist()  # time 5 is later than every seed


def test_edge_temporal_needs_seed_time_and_filters_edges() -> None:
    src, dst = [0, 1, 1, 2, 2, 3, 3, 4], [1, 0, 2, 1, 3, 2, 4, 3]
    edge_time = torch.arange(8)
    sampler = ExtendedSampler(
        ExtendedSampler.Config(fanouts=(-1, -1)),
        source=_source(src, dst, 5),
        edge_time=edge_time,
    )
    with pytest.raises(ValueError, match="needs a time per seed"):
        sampler.sample(torch.tensor([0]), seed=0)
    for gid in range(5):
        sub = sampler.sample(torch.tensor([gid]), seed=0, seed_time=torch.tensor([4]))
        assert bool((edge_time[sub.blocks[0].e_id] <= 4).all())


def test_last_strategy_takes_the_most_recent_neighbors() -> None:
    time = torch.tensor([9, 5, 1, 7, 3])  # node 0 at t=9 has in-neighbors 1..4
    config = ExtendedSampler.Config(fanouts=(2,), temporal_strategy="last")
    sampler = ExtendedSampler(config, source=_star(4), node_time=time)
    sub = sampler.sample(torch.tensor([0]), seed=1)
    assert sorted(sub.n_id[1:].tolist()) == [1, 3]  # times 5 and 7


def test_disjoint_trees_repeat_nodes_and_stay_separate() -> None:
    src, dst = [1, 2, 2, 3], [0, 0, 1, 2]
    sampler = ExtendedSampler(
        ExtendedSampler.Config(fanouts=(-1, -1), disjoint=True), source=_source(src, dst, 4)
    )
    sub = sampler.sample(torch.tensor([0, 1, 0]), seed=0)
    assert sub.batch is not None and sub.n_id[:3].tolist() == [0, 1, 0]
    block = sub.blocks[0]
    dst_local = torch.repeat_interleave(
        torch.arange(block.num_dst), block.rowptr[1:] - block.rowptr[:-1]
    )
    assert torch.equal(sub.batch[block.col], sub.batch[dst_local])  # no edge crosses trees
    assert (sub.n_id[sub.batch == 0].tolist()) == (sub.n_id[sub.batch == 2].tolist())


def test_draws_depend_only_on_the_seed_and_blocks_are_prefixes() -> None:
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 200, 3000).tolist(), rng.integers(0, 200, 3000).tolist()
    config = ExtendedSampler.Config(fanouts=(4, 3))
    weight = torch.rand(3000, generator=torch.Generator().manual_seed(0))
    sampler = ExtendedSampler(config, source=_source(src, dst, 200), edge_weight=weight)
    a, b = (sampler.sample(torch.arange(20), seed=7) for _ in range(2))
    assert torch.equal(a.n_id, b.n_id) and torch.equal(a.blocks[0].e_id, b.blocks[0].e_id)
    assert not torch.equal(a.n_id, sampler.sample(torch.arange(20), seed=8).n_id)
    inner, outer = a.blocks[1], a.blocks[0]
    assert inner.num_dst == a.batch_size and torch.equal(outer.col[: inner.num_edges], inner.col)
    assert sum(a.num_sampled_edges) == a.blocks[0].num_edges


def test_zero_hops_and_bad_inputs() -> None:
    sampler = ExtendedSampler(ExtendedSampler.Config(fanouts=()), source=_star(3))
    sub = sampler.sample(torch.tensor([2, 0]), seed=0)
    assert sub.n_id.tolist() == [2, 0] and sub.blocks == () and sub.num_sampled_nodes == (2,)
    with pytest.raises(ValueError, match="repeated"):
        sampler.sample(torch.tensor([1, 1]), seed=0)
    with pytest.raises(ValueError, match="temporal_strategy"):
        ExtendedSampler.Config(temporal_strategy="newest")
    with pytest.raises(ValueError, match="negative"):
        ExtendedSampler(
            ExtendedSampler.Config(), source=_star(2), edge_weight=torch.tensor([1.0, -1.0])
        )
    with pytest.raises(ValueError, match="not both"):
        ExtendedSampler(
            ExtendedSampler.Config(),
            source=_star(2),
            node_time=torch.zeros(3),
            edge_time=torch.zeros(2),
        )


def _random_timed(num_nodes: int = 200, num_edges: int = 3000) -> tuple[CSRNeighborSource, Tensor]:
    rng = np.random.default_rng(3)
    src, dst = rng.integers(0, num_nodes, num_edges), rng.integers(0, num_nodes, num_edges)
    time = torch.from_numpy(rng.integers(0, 40, num_nodes))
    return _source(src.tolist(), dst.tolist(), num_nodes), time


def _tree_edges(sub: SampledSubgraph) -> set[tuple[int, int]]:
    """``(tree, edge id)`` of every sampled edge."""
    block = sub.blocks[0]
    assert sub.batch is not None
    dst = torch.repeat_interleave(torch.arange(block.num_dst), block.rowptr[1:] - block.rowptr[:-1])
    return set(zip(sub.batch[dst].tolist(), block.e_id.tolist(), strict=True))


@pytest.mark.parametrize("fanouts", [(-1, -1), (3, 2)])
def test_time_sorted_rows_take_the_same_last_neighbors_in_o_k(fanouts: tuple[int, ...]) -> None:
    """In time-sorted rows a tree's candidates are a prefix (found by bisection, no scoring);
    ``'last'`` then takes the same edges as the scored path on the unsorted rows."""
    source, time = _random_timed()
    ordered = time_sorted(source, src_time=time)
    config = ExtendedSampler.Config(fanouts=fanouts, temporal_strategy="last")
    fast = ExtendedSampler(config, source=ordered, node_time=time)
    scored = ExtendedSampler(config, source=source, node_time=time)
    assert fast._candidates.prefix and not scored._candidates.prefix
    seeds = torch.arange(0, 200, 5)
    seed_time = torch.from_numpy(np.random.default_rng(4).integers(0, 40, seeds.numel()))
    got = fast.sample(seeds, seed=0, seed_time=seed_time)
    want = scored.sample(seeds, seed=0, seed_time=seed_time)
    assert _tree_edges(got) == _tree_edges(want) and len(_tree_edges(got)) > 100
    size = got.batch_size  # the seeds themselves may be later than the seed_time given
    assert bool((time[got.n_id[size:]] <= seed_time[got.batch[size:]]).all())


def test_time_sorted_uniform_draws_are_uniform_among_the_candidates() -> None:
    time = torch.tensor([9, 1, 2, 3, 4, 5, 6])  # node 0 at t=9 has in-neighbors 1..6
    config = ExtendedSampler.Config(fanouts=(2,))
    sampler = ExtendedSampler(config, source=time_sorted(_star(6), src_time=time), node_time=time)
    assert sampler._candidates.prefix
    picks = np.zeros(7)
    for seed in range(2000):
        sub = sampler.sample(torch.tensor([0]), seed=seed, seed_time=torch.tensor([4]))
        assert sub.num_sampled_edges == (2,)
        picks[sub.n_id[1:].numpy()] += 1
    assert picks[5:].sum() == 0  # times 5 and 6 are later than the seed's 4
    assert np.allclose(picks[1:5] / 2000, 0.5, atol=0.04), picks
