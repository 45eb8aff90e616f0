"""``RelationalSampler``: edges exist, per-relation fanouts, -1/0, determinism, layout."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from gnnsys.datasets.mag import synthetic_mag
from gnnsys.sampler.neighbor import RelationalSampler, RelationalSubgraph, csr_sources
from gnnsys.types import EdgeType
from gnnsys.types.relations import HeteroGraph

WRITES: EdgeType = ("author", "writes", "paper")
CITES: EdgeType = ("paper", "cites", "paper")


@pytest.fixture(scope="module")
def graph() -> HeteroGraph:
    return synthetic_mag(0.004, seed=5, reverse=True)


def make(
    graph: HeteroGraph, fanouts: dict[EdgeType, tuple[int, ...]], **kw: bool
) -> RelationalSampler:
    config = RelationalSampler.Config(fanouts=fanouts, **kw)
    return RelationalSampler(config, sources=csr_sources(graph), node_types=graph.node_types)


def uniform(graph: HeteroGraph, fanouts: tuple[int, ...]) -> dict[EdgeType, tuple[int, ...]]:
    return {et: fanouts for et in graph.edge_types}


def check_edges_exist(graph: HeteroGraph, sub: RelationalSubgraph) -> None:
    for et, edge_index in sub.edge_index.items():
        src, _, dst = et
        rel = graph.relations[et]
        src_gid = sub.n_id[src][edge_index[0]].numpy()
        dst_gid = sub.n_id[dst][edge_index[1]].numpy()
        e_id = sub.e_id[et].numpy()
        assert np.array_equal(rel.indices[e_id], src_gid), et  # e_id names this very edge
        assert np.array_equal(rel.dst_of_edges()[e_id], dst_gid), et


def test_every_edge_exists_and_ids_are_unique(graph: HeteroGraph) -> None:
    sub = make(graph, uniform(graph, (6, 4))).sample(torch.arange(40), input_type="paper", seed=3)
    check_edges_exist(graph, sub)
    assert torch.equal(sub.n_id["paper"][:40], torch.arange(40))  # seeds first
    assert sub.batch_size == 40 and sub.input_type == "paper"
    for node_type, n_id in sub.n_id.items():
        assert n_id.unique().numel() == n_id.numel(), node_type
        assert sum(sub.num_sampled_nodes[node_type]) == n_id.numel()
        assert len(sub.num_sampled_nodes[node_type]) == 3
    for et in graph.edge_types:
        assert sum(sub.num_sampled_edges[et]) == sub.edge_index[et].shape[1]
    assert sub.num_sampled_nodes["author"][0] == 0  # only the input type has seeds


def test_fanout_per_relation_and_minus_one_and_zero(graph: HeteroGraph) -> None:
    fanouts = uniform(graph, (0, 0))
    fanouts[WRITES] = (3, 2)
    fanouts[CITES] = (-1, 1)
    seeds = torch.arange(10, 60)
    sub = make(graph, fanouts).sample(seeds, input_type="paper", seed=9)
    check_edges_exist(graph, sub)
    for et in graph.edge_types:
        if et not in (WRITES, CITES):
            assert sub.edge_index[et].shape[1] == 0, et
    dst_types = {WRITES: "paper", CITES: "paper"}
    for et, hop_fanouts in ((WRITES, (3, 2)), (CITES, (-1, 1))):
        rel = graph.relations[et]
        count = torch.bincount(sub.edge_index[et][1], minlength=sub.n_id[dst_types[et]].numel())
        segments = np.cumsum((0,) + sub.num_sampled_nodes["paper"])
        for hop, fanout in enumerate(hop_fanouts):
            dst_lid = sub.n_id["paper"][segments[hop] : segments[hop + 1]].numpy()
            degree = np.diff(rel.indptr)[dst_lid]
            got = count[segments[hop] : segments[hop + 1]].numpy()
            expected = degree if fanout == -1 else np.minimum(degree, fanout)
            assert np.array_equal(got, expected), (et, hop)


def test_with_replacement_draws_exactly_the_fanout(graph: HeteroGraph) -> None:
    sub = make(graph, uniform(graph, (4,)), replace=True).sample(
        torch.arange(30), input_type="paper", seed=1
    )
    rel = graph.relations[WRITES]
    count = torch.bincount(sub.edge_index[WRITES][1], minlength=30).numpy()
    degree = np.diff(rel.indptr)[:30]
    assert np.array_equal(count, np.where(degree > 0, 4, 0))
    check_edges_exist(graph, sub)


def test_deterministic_with_a_seed(graph: HeteroGraph) -> None:
    sampler = make(graph, uniform(graph, (5, 3)))
    seeds = torch.arange(100, 132)
    a = sampler.sample(seeds, input_type="paper", seed=7)
    b = make(graph, uniform(graph, (5, 3))).sample(seeds, input_type="paper", seed=7)
    c = sampler.sample(seeds, input_type="paper", seed=8)
    for node_type in graph.node_types:
        assert torch.equal(a.n_id[node_type], b.n_id[node_type])
    for et in graph.edge_types:
        assert torch.equal(a.edge_index[et], b.edge_index[et])
        assert torch.equal(a.e_id[et], b.e_id[et])
    assert any(not torch.equal(a.e_id[et], c.e_id[et]) for et in graph.edge_types)


def test_blocks_are_typed_prefixes(graph: HeteroGraph) -> None:
    sub = make(graph, uniform(graph, (4, 3, 2))).sample(
        torch.arange(16), input_type="paper", seed=2
    )
    assert len(sub.blocks) == 3
    for layer, blocks in enumerate(sub.blocks):
        seen = 3 - layer
        for (src, rel, dst), block in blocks.items():
            et = (src, rel, dst)
            assert block.num_dst == sum(sub.num_sampled_nodes[dst][:seen])
            assert block.num_src == sum(sub.num_sampled_nodes[src][: seen + 1])
            assert block.num_edges == sum(sub.num_sampled_edges[et][:seen])
            assert (
                block.rowptr.shape == (block.num_dst + 1,)
                and int(block.rowptr[-1]) == block.num_edges
            )
            if block.num_edges:
                assert int(block.col.max()) < block.num_src
            dst_E = torch.repeat_interleave(torch.arange(block.num_dst), block.rowptr.diff())
            assert torch.equal(dst_E, sub.edge_index[et][1][: block.num_edges])
            assert torch.equal(block.col, sub.edge_index[et][0][: block.num_edges])
    seed_layer = sub.blocks[-1][WRITES]
    assert seed_layer.num_dst == 16


def test_seeds_of_another_type_and_errors(graph: HeteroGraph) -> None:
    sampler = make(graph, uniform(graph, (3, 2)))
    sub = sampler.sample(torch.tensor([4, 1]), input_type="author", seed=0)
    assert sub.n_id["author"][:2].tolist() == [4, 1] and sub.num_sampled_nodes["paper"][0] == 0
    check_edges_exist(graph, sub)
    with pytest.raises(ValueError, match="repeated"):
        sampler.sample(torch.tensor([1, 1]), input_type="paper", seed=0)
    with pytest.raises(ValueError, match="input_type"):
        sampler.sample(torch.tensor([1]), input_type="venue", seed=0)
    with pytest.raises(ValueError, match="hops must be the same"):
        RelationalSampler.Config(fanouts={WRITES: (1,), CITES: (1, 1)})
    # the tables were reset after the error: the next batch is unaffected
    again = sampler.sample(torch.tensor([4, 1]), input_type="author", seed=0)
    assert torch.equal(again.n_id["paper"], sub.n_id["paper"])


def test_concurrent_calls_match_sequential(graph: HeteroGraph) -> None:
    sampler = make(graph, uniform(graph, (5, 3)))
    batches = [torch.arange(i * 20, i * 20 + 20) for i in range(6)]
    expected = [sampler.sample(b, input_type="paper", seed=i) for i, b in enumerate(batches)]
    got: list[RelationalSubgraph | None] = [None] * len(batches)

    def run(i: int) -> None:
        got[i] = sampler.sample(batches[i], input_type="paper", seed=i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(batches))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for want, have in zip(expected, got, strict=True):
        assert have is not None
        for et in graph.edge_types:
            assert torch.equal(want.edge_index[et], have.edge_index[et])


def _fields(sub: RelationalSubgraph) -> list[torch.Tensor]:
    out = [sub.n_id[t] for t in sorted(sub.n_id)]
    for blocks in sub.blocks:
        for et in sorted(blocks):
            out += [blocks[et].rowptr, blocks[et].col, blocks[et].e_id]
    return out + [sub.edge_index[et] for et in sorted(sub.edge_index)]


@pytest.mark.parametrize("replace", [False, True])
def test_thread_count_never_changes_the_typed_batch(
    graph: HeteroGraph, replace: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The typed sampler runs on the threaded engine: chunks per relation, same batch."""
    from gnnsys.sampler import engine

    monkeypatch.setattr(engine, "_MIN_DST_PER_CHUNK", 4)  # split even tiny hops
    fanouts = uniform(graph, (5, 3))
    fanouts[WRITES] = (0, -1)
    subs = []
    for threads in (1, 2, 3):
        sampler = make(graph, fanouts, replace=replace)
        sampler.engine.num_threads = threads
        for _ in range(2):  # and again, on the reset tables
            subs.append(
                sampler.sample_types(
                    {"paper": torch.arange(0, 400, 3), "author": torch.arange(30)}, seed=17
                )
            )
        assert sampler.engine._free[0].pool.num_threads == threads
    for sub in subs[1:]:
        assert sub.num_sampled_nodes == subs[0].num_sampled_nodes
        assert sub.num_sampled_edges == subs[0].num_sampled_edges
        for got, want in zip(_fields(sub), _fields(subs[0]), strict=True):
            assert torch.equal(got, want)


def test_serial_sources_get_one_call_per_relation_and_hop(
    graph: HeteroGraph, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A source without concurrent calls (a remote owner) keeps one request per hop."""
    from gnnsys.sampler import engine

    monkeypatch.setattr(engine, "_MIN_DST_PER_CHUNK", 4)
    calls: list[EdgeType] = []

    class Serial:
        def __init__(self, et: EdgeType, inner: object) -> None:
            self.et, self.inner = et, inner

        def sample_neighbors(self, *args: object, **kw: object) -> object:
            calls.append(self.et)
            return self.inner.sample_neighbors(*args, **kw)  # type: ignore[attr-defined]

    fanouts = uniform(graph, (4, 2))
    config = RelationalSampler.Config(fanouts=fanouts)
    sources = {et: Serial(et, s) for et, s in csr_sources(graph).items()}
    serial = RelationalSampler(config, sources=sources, node_types=graph.node_types)
    serial.engine.num_threads = 2
    got = serial.sample(torch.arange(300), input_type="paper", seed=5)
    want = make(graph, fanouts).sample(torch.arange(300), input_type="paper", seed=5)
    assert calls and max(calls.count(et) for et in set(calls)) <= 2  # one call per hop at most
    for a, b in zip(_fields(got), _fields(want), strict=True):
        assert torch.equal(a, b)
