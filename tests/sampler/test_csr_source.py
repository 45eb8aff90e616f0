"""CSRNeighborSource: draws are valid, uniform, deterministic and identical over a shard."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from gnnsys.sampler import CSRNeighborSource, batch_seed
from gnnsys.sampler.draw import draw_positions
from gnnsys.store import read_shard, write_partitions
from gnnsys.types import ONE_RELATION, Assignment, Graph, PartitionBook


def _star(num_leaves: int) -> Graph:
    """Node 0 has in-edges from every leaf 1..num_leaves."""
    leaves = np.arange(1, num_leaves + 1)
    edge_index = np.stack([leaves, np.zeros_like(leaves)])
    return Graph.from_edge_index(edge_index, num_leaves + 1)


def _two_parts(graph: Graph, part_N: np.ndarray, root: Path) -> PartitionBook:
    """``graph`` written at ``root`` as a store of the two parts of ``part_N``."""
    return write_partitions(graph, Assignment(part_N, 2, "test"), root, num_hops=1)


def _dst_of(sample_count: torch.Tensor, dst_gid: torch.Tensor) -> torch.Tensor:
    return torch.repeat_interleave(dst_gid, sample_count)


@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("fanout", [1, 3, 7, -1])
def test_edges_exist_and_counts(tiny_graph: Graph, fanout: int, replace: bool) -> None:
    source = CSRNeighborSource.from_graph(tiny_graph)
    dst_gid = torch.arange(0, 1000, 3)
    out = source.sample_neighbors(dst_gid, fanout, seed=7, hop=1, replace=replace)
    deg = torch.from_numpy(tiny_graph.in_degree)[dst_gid]
    if fanout == -1:
        expected = deg
    elif replace:
        expected = torch.where(deg > 0, fanout, 0)
    else:
        expected = deg.clamp(max=fanout)
    assert torch.equal(out.count_M, expected)
    # The edge id is the CSR position: it must hold the sampled source and belong to the dst.
    indices = torch.from_numpy(tiny_graph.indices.astype(np.int64))
    assert torch.equal(indices[out.e_id_E], out.src_gid_E)
    dst_of_edge = torch.from_numpy(tiny_graph.dst_of_edges())[out.e_id_E]
    assert torch.equal(dst_of_edge, _dst_of(out.count_M, dst_gid))


def test_no_duplicates_without_replacement(tiny_graph: Graph) -> None:
    source = CSRNeighborSource.from_graph(tiny_graph)
    dst_gid = torch.arange(1000)
    out = source.sample_neighbors(dst_gid, 5, seed=3, hop=0)
    dst = _dst_of(out.count_M, dst_gid)
    pairs = dst * (1 << 32) + out.e_id_E
    assert pairs.unique().numel() == pairs.numel()


@pytest.mark.parametrize("replace", [False, True])
def test_uniform_on_star(replace: bool) -> None:
    num_leaves, fanout, trials = 40, 6, 3000
    source = CSRNeighborSource.from_graph(_star(num_leaves))
    hits = np.zeros(num_leaves + 1, dtype=np.int64)
    for t in range(trials):
        out = source.sample_neighbors(torch.tensor([0]), fanout, seed=t, hop=0, replace=replace)
        hits += np.bincount(out.src_gid_E.numpy(), minlength=num_leaves + 1)
    observed = hits[1:]
    assert observed.sum() == trials * fanout
    p_value = chisquare(observed).pvalue
    assert p_value > 1e-3, f"chi-square p={p_value:.2e}, counts {observed.tolist()}"


def test_floyd_distinct_and_in_range_for_hubs() -> None:
    deg = np.random.default_rng(0).integers(11, 200_000, 3000)
    gid = np.arange(3000, dtype=np.int64)
    count, pos = draw_positions(gid, np.zeros(3000, dtype=np.int64), deg, 10, key=5, replace=False)
    assert np.array_equal(count, np.full(3000, 10))
    offsets = pos.reshape(3000, 10)
    assert bool((offsets < deg[:, None]).all()) and bool((offsets >= 0).all())
    assert bool((np.diff(np.sort(offsets, axis=1), axis=1) > 0).all()), "duplicate offsets"


def test_deterministic_and_request_independent(tiny_graph: Graph) -> None:
    source = CSRNeighborSource.from_graph(tiny_graph)
    a = source.sample_neighbors(torch.tensor([5, 9, 11]), 4, seed=1, hop=2)
    b = source.sample_neighbors(torch.tensor([11, 500, 9, 5]), 4, seed=1, hop=2)
    c = source.sample_neighbors(torch.tensor([5, 9, 11]), 4, seed=2, hop=2)
    split_a = torch.split(a.e_id_E, a.count_M.tolist())
    split_b = torch.split(b.e_id_E, b.count_M.tolist())
    assert torch.equal(split_a[0], split_b[3]) and torch.equal(split_a[1], split_b[2])
    assert torch.equal(split_a[2], split_b[0])
    assert not torch.equal(a.e_id_E, c.e_id_E)


def test_int32_and_int64_indices_agree(tiny_graph: Graph) -> None:
    a = CSRNeighborSource(tiny_graph.indptr, tiny_graph.indices.astype(np.int32))
    b = CSRNeighborSource(tiny_graph.indptr, tiny_graph.indices.astype(np.int64))
    dst = torch.arange(1000)
    out_a = a.sample_neighbors(dst.int(), 5, seed=4, hop=0)
    out_b = b.sample_neighbors(dst, 5, seed=4, hop=0)
    assert torch.equal(out_a.src_gid_E, out_b.src_gid_E) and out_a.src_gid_E.dtype == torch.int64


@pytest.mark.parametrize("replace", [False, True])
def test_shard_draws_equal_whole_graph(tiny_graph: Graph, replace: bool, tmp_path: Path) -> None:
    part_N = (np.random.default_rng(0).random(tiny_graph.num_nodes) < 0.4).astype(np.int32)
    store = tmp_path / "store"
    book = _two_parts(tiny_graph, part_N, store)
    whole = CSRNeighborSource.from_graph(tiny_graph)
    for part in (0, 1):
        shard = read_shard(store, part)  # one relation; its type-local ids are the gids
        shard_source = CSRNeighborSource.from_relation(shard, ONE_RELATION, book.lid_N)
        dst = torch.from_numpy(np.flatnonzero(part_N == part)[::-1].copy())
        seed = batch_seed(11, 2, part)
        got = shard_source.sample_neighbors(dst, 4, seed=seed, hop=1, replace=replace)
        want = whole.sample_neighbors(dst, 4, seed=seed, hop=1, replace=replace)
        assert torch.equal(got.count_M, want.count_M)
        assert torch.equal(got.src_gid_E, want.src_gid_E)
        assert torch.equal(got.e_id_E, want.e_id_E)
        unread = CSRNeighborSource.from_relation(
            shard, ONE_RELATION, book.lid_N, edge_ids=False
        ).sample_neighbors(dst, 4, seed=seed, hop=1, replace=replace)
        assert torch.equal(unread.count_M, want.count_M)  # the same draw, without its ids
        assert torch.equal(unread.src_gid_E, want.src_gid_E)
        assert torch.equal(unread.e_id_E, torch.full_like(want.e_id_E, -1))


def test_shard_rejects_foreign_gid(tiny_graph: Graph, tmp_path: Path) -> None:
    part_N = (np.arange(tiny_graph.num_nodes) % 2).astype(np.int32)
    book = _two_parts(tiny_graph, part_N, tmp_path / "store")
    shard = read_shard(tmp_path / "store", 0)
    source = CSRNeighborSource.from_relation(shard, ONE_RELATION, book.lid_N)
    with pytest.raises(ValueError, match="gid 3 is not held"):
        source.sample_neighbors(torch.tensor([0, 3]), 2, seed=0, hop=0)
    with pytest.raises(ValueError, match="not held"):
        source.sample_neighbors(torch.tensor([tiny_graph.num_nodes]), 2, seed=0, hop=0)


def test_bad_fanout_and_inputs(tiny_graph: Graph) -> None:
    source = CSRNeighborSource.from_graph(tiny_graph)
    with pytest.raises(ValueError, match="fanout=0"):
        source.sample_neighbors(torch.tensor([0]), 0, seed=0, hop=0)
    with pytest.raises(ValueError, match="indptr"):
        CSRNeighborSource(torch.tensor([0, 2]), torch.tensor([1]))
    with pytest.raises(TypeError, match="dtype"):
        CSRNeighborSource(torch.tensor([0, 1]), torch.tensor([1.0]))


def test_batch_seed_mixes_every_argument() -> None:
    seeds = {batch_seed(b, e, i) for b in range(3) for e in range(3) for i in range(3)}
    assert len(seeds) == 27 and all(0 <= s < 2**63 for s in seeds)
    assert batch_seed(1, 2, 3) == batch_seed(1, 2, 3)
