"""NeighborSampler: PyG node order, hop-sliced blocks, one source call per hop."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import Tensor

from gnnsys.sampler import CSRNeighborSource, NeighborSampler, engine
from gnnsys.store import read_shard, write_partitions
from gnnsys.types import (
    ONE_RELATION,
    Assignment,
    Graph,
    NeighborSample,
    PartitionBook,
    SampledSubgraph,
)


def _sampler(graph: Graph, fanouts: tuple[int, ...], replace: bool = False) -> NeighborSampler:
    config = NeighborSampler.Config(fanouts=fanouts, replace=replace)
    return NeighborSampler(config, source=CSRNeighborSource.from_graph(graph))


def _shard_sources(
    graph: Graph, part_N: np.ndarray, root: Path
) -> tuple[PartitionBook, list[CSRNeighborSource]]:
    """``graph`` written at ``root`` in the parts of ``part_N``: its book, a source per part.

    Each source serves its shard's one relation, whose type-local ids are the gids.
    """
    num_parts = int(part_N.max()) + 1
    book = write_partitions(graph, Assignment(part_N, num_parts, "test"), root)
    return book, [
        CSRNeighborSource.from_relation(read_shard(root, p), ONE_RELATION, book.lid_N)
        for p in range(num_parts)
    ]


def _block_dst(rowptr: Tensor) -> Tensor:
    return torch.repeat_interleave(torch.arange(rowptr.shape[0] - 1), rowptr.diff())


@pytest.mark.parametrize("replace", [False, True])
def test_layout_and_edges(tiny_graph: Graph, replace: bool) -> None:
    seeds = torch.tensor([10, 3, 999, 0, 512])
    sub = _sampler(tiny_graph, (4, 3, 2), replace).sample(seeds, seed=123)
    assert torch.equal(sub.n_id[: sub.batch_size], seeds) and sub.batch_size == 5
    assert sum(sub.num_sampled_nodes) == sub.n_id.numel() == sub.n_id.unique().numel()
    assert len(sub.num_sampled_nodes) == 4 and len(sub.num_sampled_edges) == 3
    assert [b.num_edges for b in sub.blocks] == [
        sum(sub.num_sampled_edges[:3]),
        sum(sub.num_sampled_edges[:2]),
        sub.num_sampled_edges[0],
    ]
    indices = torch.from_numpy(tiny_graph.indices.astype(np.int64))
    dst_of_edge = torch.from_numpy(tiny_graph.dst_of_edges())
    for block in sub.blocks:
        assert (
            block.rowptr.shape[0] == block.num_dst + 1 and int(block.rowptr[-1]) == block.num_edges
        )
        assert int(block.col.max()) < block.num_src and block.num_src <= sub.n_id.numel()
        src_gid, dst_gid = sub.n_id[block.col], sub.n_id[_block_dst(block.rowptr)]
        assert torch.equal(indices[block.e_id], src_gid)
        assert torch.equal(dst_of_edge[block.e_id], dst_gid)
    assert sub.blocks[-1].num_dst == 5  # seed hop last


def test_counts_per_node_match_fanout(tiny_graph: Graph) -> None:
    fanouts = (5, 2)
    sub = _sampler(tiny_graph, fanouts).sample(torch.arange(0, 1000, 7), seed=1)
    deg = torch.from_numpy(tiny_graph.in_degree)
    counts = sub.blocks[0].rowptr.diff()
    start = 0
    for hop, fanout in enumerate(fanouts):
        dst_gid = sub.n_id[start : start + sub.num_sampled_nodes[hop]]
        hop_counts = counts[start : start + dst_gid.numel()]
        assert torch.equal(hop_counts, deg[dst_gid].clamp(max=fanout))
        start += dst_gid.numel()


def test_no_duplicate_edges_without_replacement(tiny_graph: Graph) -> None:
    sub = _sampler(tiny_graph, (6, 6)).sample(torch.arange(50), seed=9)
    e_id = sub.blocks[0].e_id
    assert e_id.unique().numel() == e_id.numel()


def test_full_neighborhood(tiny_graph: Graph) -> None:
    sub = _sampler(tiny_graph, (-1,)).sample(torch.tensor([4, 8]), seed=0)
    want = int(tiny_graph.in_degree[4] + tiny_graph.in_degree[8])
    assert sub.num_sampled_edges == (want,)


def test_determinism(tiny_graph: Graph) -> None:
    seeds = torch.arange(100, 160)
    a = _sampler(tiny_graph, (5, 5)).sample(seeds, seed=42)
    sampler = _sampler(tiny_graph, (5, 5))
    sampler.sample(torch.arange(300, 400), seed=1)  # state left by an earlier batch is reset
    b = sampler.sample(seeds, seed=42)
    c = sampler.sample(seeds, seed=43)
    assert torch.equal(a.n_id, b.n_id) and torch.equal(a.blocks[0].e_id, b.blocks[0].e_id)
    assert not torch.equal(a.blocks[0].e_id, c.blocks[0].e_id)


class _CountingSource:
    """Wraps a source, recording each request (the runtime batches one request per call)."""

    def __init__(self, inner: CSRNeighborSource) -> None:
        self.inner = inner
        self.requests: list[Tensor] = []

    def sample_neighbors(
        self, dst_gid: Tensor, fanout: int, *, seed: int, hop: int, replace: bool = False
    ) -> NeighborSample:
        self.requests.append(dst_gid)
        return self.inner.sample_neighbors(dst_gid, fanout, seed=seed, hop=hop, replace=replace)


def test_one_deduplicated_request_per_hop(tiny_graph: Graph) -> None:
    source = _CountingSource(CSRNeighborSource.from_graph(tiny_graph))
    sampler = NeighborSampler(NeighborSampler.Config(fanouts=(8, 8, 8)), source=source)
    sub = sampler.sample(torch.arange(20), seed=0)
    assert len(source.requests) == 3
    for request in source.requests:
        assert request.unique().numel() == request.numel()
    assert sum(r.numel() for r in source.requests) == sum(sub.num_sampled_nodes[:3])


class _RoutedSource:
    """Sends each gid to its owner's shard source, as the distributed runtime does."""

    def __init__(self, book: PartitionBook, parts: list[CSRNeighborSource]) -> None:
        self.book, self.parts = book, parts

    def sample_neighbors(
        self, dst_gid: Tensor, fanout: int, *, seed: int, hop: int, replace: bool = False
    ) -> NeighborSample:
        owner = torch.from_numpy(self.book.owner(dst_gid))
        count = torch.zeros(dst_gid.numel(), dtype=torch.int64)
        src_by_dst: list[Tensor] = [torch.zeros(0, dtype=torch.int64)] * dst_gid.numel()
        eid_by_dst = list(src_by_dst)
        for part, source in enumerate(self.parts):
            where = torch.nonzero(owner == part).squeeze(1)
            got = source.sample_neighbors(
                dst_gid[where], fanout, seed=seed, hop=hop, replace=replace
            )
            count[where] = got.count_M
            for pos, src, eid in zip(
                where.tolist(),
                got.src_gid_E.split(got.count_M.tolist()),
                got.e_id_E.split(got.count_M.tolist()),
                strict=True,
            ):
                src_by_dst[pos], eid_by_dst[pos] = src, eid
        return NeighborSample(count, torch.cat(src_by_dst), torch.cat(eid_by_dst))


def test_partitioned_sampling_equals_whole_graph(tiny_graph: Graph, tmp_path: Path) -> None:
    part_N = (np.random.default_rng(1).random(tiny_graph.num_nodes) < 0.5).astype(np.int32)
    book, parts = _shard_sources(tiny_graph, part_N, tmp_path / "parts")
    config = NeighborSampler.Config(fanouts=(4, 3))
    routed = NeighborSampler(config, source=_RoutedSource(book, parts))
    whole = _sampler(tiny_graph, (4, 3))
    seeds = torch.tensor([1, 77, 500, 3])
    a, b = routed.sample(seeds, seed=5), whole.sample(seeds, seed=5)
    assert torch.equal(a.n_id, b.n_id)
    assert torch.equal(a.blocks[0].col, b.blocks[0].col)
    assert torch.equal(a.blocks[0].e_id, b.blocks[0].e_id)


def test_rejects_bad_input(tiny_graph: Graph) -> None:
    with pytest.raises(ValueError, match="fanouts"):
        NeighborSampler.Config(fanouts=(5, 0))
    with pytest.raises(ValueError, match="fanouts"):
        NeighborSampler.Config(fanouts=())
    sampler = _sampler(tiny_graph, (3,))
    with pytest.raises(ValueError, match="repeated"):
        sampler.sample(torch.tensor([1, 2, 1]), seed=0)
    with pytest.raises(ValueError, match="non-empty"):
        sampler.sample(torch.tensor([], dtype=torch.int64), seed=0)
    with pytest.raises(ValueError, match="not held"):
        sampler.sample(torch.tensor([5000]), seed=0)
    sub = sampler.sample(torch.tensor([1, 2]), seed=0)  # usable after errors
    assert sub.batch_size == 2


def test_isolated_seeds_give_empty_hops() -> None:
    graph = Graph.from_edge_index(np.array([[0], [1]]), 4)
    sampler = _sampler(graph, (2, 2))
    sub = sampler.sample(torch.tensor([2, 3]), seed=0)
    assert sub.num_sampled_nodes == (2, 0, 0) and sub.num_sampled_edges == (0, 0)
    assert sub.blocks[0].rowptr.tolist() == [0, 0, 0]


def test_store_shards_sample_like_the_whole_graph(tiny_graph: Graph, tmp_path: Path) -> None:
    part_N = (np.arange(tiny_graph.num_nodes) % 3).astype(np.int32)
    book, parts = _shard_sources(tiny_graph, part_N, tmp_path / "parts")
    routed = NeighborSampler(
        NeighborSampler.Config(fanouts=(3, 3)), source=_RoutedSource(book, parts)
    )
    seeds = torch.tensor([0, 10, 20, 31])
    a, b = routed.sample(seeds, seed=8), _sampler(tiny_graph, (3, 3)).sample(seeds, seed=8)
    assert torch.equal(a.n_id, b.n_id) and torch.equal(a.blocks[0].e_id, b.blocks[0].e_id)


class _SerialSource(_CountingSource):
    """A source that does not allow concurrent calls (like a remote owner)."""

    concurrent_calls = False


def _tables_clean(sampler: NeighborSampler) -> bool:
    """Every id table the sampler keeps is back to unseen (-1)."""
    return all(
        not bool((torch.from_numpy(ids.table_N) != -1).any())
        for ctx in sampler.engine._free
        for ids in ctx.ids.values()
    )


def _every_field(sub: SampledSubgraph) -> list[Tensor]:
    block = sub.blocks[0]
    return [sub.n_id, block.rowptr, block.col, block.e_id]


@pytest.mark.parametrize("replace", [False, True])
def test_thread_count_never_changes_the_batch(
    tiny_graph: Graph, replace: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine, "_MIN_DST_PER_CHUNK", 4)  # split even tiny hops
    seeds = torch.arange(0, 1000, 9)
    subs = []
    for threads in (1, 2, 3):
        config = NeighborSampler.Config(fanouts=(5, 4, -1), replace=replace, num_threads=threads)
        sampler = NeighborSampler(config, source=CSRNeighborSource.from_graph(tiny_graph))
        subs.append(sampler.sample(seeds, seed=17))
        subs.append(sampler.sample(seeds, seed=17))  # and again, on the reset table
    for sub in subs[1:]:
        assert sub.num_sampled_nodes == subs[0].num_sampled_nodes
        assert sub.num_sampled_edges == subs[0].num_sampled_edges
        for got, want in zip(_every_field(sub), _every_field(subs[0]), strict=True):
            assert torch.equal(got, want)


def test_serial_source_gets_one_call_per_hop_at_any_thread_count(
    tiny_graph: Graph, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine, "_MIN_DST_PER_CHUNK", 4)
    source = _SerialSource(CSRNeighborSource.from_graph(tiny_graph))
    config = NeighborSampler.Config(fanouts=(6, 6), num_threads=2)
    got = NeighborSampler(config, source=source).sample(torch.arange(40), seed=3)
    want = _sampler(tiny_graph, (6, 6)).sample(torch.arange(40), seed=3)
    assert len(source.requests) == 2
    for a, b in zip(_every_field(got), _every_field(want), strict=True):
        assert torch.equal(a, b)


def test_error_in_a_worker_thread_leaves_the_sampler_usable(
    tiny_graph: Graph, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(engine, "_MIN_DST_PER_CHUNK", 4)
    part_N = (np.arange(tiny_graph.num_nodes) % 2).astype(np.int32)
    _, (shard, _) = _shard_sources(tiny_graph, part_N, tmp_path / "parts")
    sampler = NeighborSampler(NeighborSampler.Config(fanouts=(3,), num_threads=2), source=shard)
    with pytest.raises(ValueError, match="not held"):
        sampler.sample(torch.tensor([0, 2, 4, 6, 8, 10, 12, 1]), seed=0)  # gid 1: other shard
    assert _tables_clean(sampler)
    sub = sampler.sample(torch.tensor([0, 2, 4, 6, 8, 10]), seed=0)
    assert sub.batch_size == 6


def test_num_threads_config() -> None:
    with pytest.raises(ValueError, match="num_threads"):
        NeighborSampler.Config(num_threads=0)
    assert NeighborSampler.Config().num_threads is None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.timeout(60)  # without the fork guard the child waits forever on a dead worker
def test_sampler_used_before_fork_works_in_the_child(
    tiny_graph: Graph, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine, "_MIN_DST_PER_CHUNK", 4)
    config = NeighborSampler.Config(fanouts=(5, 5), num_threads=2)
    sampler = NeighborSampler(config, source=CSRNeighborSource.from_graph(tiny_graph))
    want = sampler.sample(torch.arange(0, 1000, 2), seed=4).n_id  # starts the worker thread
    pid = os.fork()
    if pid == 0:  # child: the parent's worker thread does not exist here
        ok = torch.equal(sampler.sample(torch.arange(0, 1000, 2), seed=4).n_id, want)
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0


@pytest.mark.parametrize("num_workers", [1, 2, 3])
def test_sample_batches_equals_sequential_sampling(tiny_graph: Graph, num_workers: int) -> None:
    sampler = _sampler(tiny_graph, (4, 3, 2))
    requests = [(torch.arange(b, 1000, 37), 100 + b) for b in range(20)]
    want = [sampler.sample(seeds, seed=s) for seeds, s in requests]
    got = list(sampler.sample_batches(iter(requests), num_workers=num_workers))
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert a.num_sampled_nodes == b.num_sampled_nodes
        for x, y in zip(_every_field(a), _every_field(b), strict=True):
            assert torch.equal(x, y)
    assert len(sampler.engine._free) <= num_workers + 1  # one id table per concurrent call, reused


def test_sample_batches_raises_at_the_bad_batch(tiny_graph: Graph) -> None:
    sampler = _sampler(tiny_graph, (3,))
    requests = [(torch.arange(10), 0), (torch.tensor([1, 1]), 1), (torch.arange(5), 2)]
    it = sampler.sample_batches(requests, num_workers=2)
    assert next(it).batch_size == 10
    with pytest.raises(ValueError, match="repeated"):
        next(it)
    assert _tables_clean(sampler)
    with pytest.raises(ValueError, match="num_workers"):
        sampler.sample_batches(requests, num_workers=0)
