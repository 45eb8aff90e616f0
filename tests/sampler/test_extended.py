"""``ExtendedSampler``: weighted, temporal and disjoint draws, on one node type and on many.

A homogeneous graph is the one-type case (``over_graph`` / ``sample_graph``, the layout of
``NeighborSampler``); a typed graph gets one draw per relation (``gnnsys.sampler.neighbor``'s
layout).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import Tensor

from gnnsys.datasets.mag import synthetic_mag
from gnnsys.sampler import CSRNeighborSource
from gnnsys.sampler.candidates import time_sorted
from gnnsys.sampler.extended import ExtendedSampler
from gnnsys.sampler.neighbor import RelationalSubgraph, csr_sources, relation_seed
from gnnsys.types import ONE_RELATION, EdgeType, SampledSubgraph
from gnnsys.types.relations import HeteroGraph


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
    sampler = ExtendedSampler.over_graph(
        (1,), source=_star(4), edge_weight=torch.tensor([0.0, 1.0, 2.0, 7.0])
    )
    picks = [int(sampler.sample_graph(torch.tensor([0]), seed=s).n_id[1]) for s in range(3000)]
    freq = np.bincount(picks, minlength=5)[1:] / len(picks)
    assert freq[0] == 0.0
    assert np.allclose(freq[1:], [0.1, 0.2, 0.7], atol=0.03), freq


def test_weighted_with_replacement_draws_fanout_edges() -> None:
    weight = torch.tensor([0.0, 0.0, 1.0])
    sampler = ExtendedSampler.over_graph((5,), replace=True, source=_star(3), edge_weight=weight)
    sub = sampler.sample_graph(torch.tensor([0]), seed=3)
    assert sub.num_sampled_edges == (5,)
    assert sub.blocks[0].e_id.tolist() == [2] * 5  # only the weighted edge


def test_node_temporal_keeps_neighbors_no_later_than_the_seed() -> None:
    # A path 0 <- 1 <- 2 <- 3 <- 4 with node times 0..4: seed 4 (t=4) may reach everything.
    src, dst = [1, 2, 3, 4, 0, 1, 2, 3], [0, 1, 2, 3, 1, 2, 3, 4]
    time = torch.tensor([5, 1, 2, 3, 4])
    sampler = ExtendedSampler.over_graph((-1, -1), source=_source(src, dst, 5), node_time=time)
    sub = sampler.sample_graph(torch.tensor([4, 2]), seed=0)
    assert sub.batch is not None
    for tree, seed_gid in enumerate([4, 2]):
        nodes = sub.n_id[sub.batch == tree]
        assert bool((time[nodes] <= time[seed_gid]).all()), nodes
    assert 0 not in sub.n_id.tolist()  # time 5 is later than every seed


def test_edge_temporal_needs_seed_time_and_filters_edges() -> None:
    src, dst = [0, 1, 1, 2, 2, 3, 3, 4], [1, 0, 2, 1, 3, 2, 4, 3]
    edge_time = torch.arange(8)
    sampler = ExtendedSampler.over_graph((-1, -1), source=_source(src, dst, 5), edge_time=edge_time)
    with pytest.raises(ValueError, match="needs a time per seed"):
        sampler.sample_graph(torch.tensor([0]), seed=0)
    for gid in range(5):
        sub = sampler.sample_graph(torch.tensor([gid]), seed=0, seed_time=torch.tensor([4]))
        assert bool((edge_time[sub.blocks[0].e_id] <= 4).all())


def test_last_strategy_takes_the_most_recent_neighbors() -> None:
    time = torch.tensor([9, 5, 1, 7, 3])  # node 0 at t=9 has in-neighbors 1..4
    sampler = ExtendedSampler.over_graph(
        (2,), temporal_strategy="last", source=_star(4), node_time=time
    )
    sub = sampler.sample_graph(torch.tensor([0]), seed=1)
    assert sorted(sub.n_id[1:].tolist()) == [1, 3]  # times 5 and 7


def test_disjoint_trees_repeat_nodes_and_stay_separate() -> None:
    src, dst = [1, 2, 2, 3], [0, 0, 1, 2]
    sampler = ExtendedSampler.over_graph((-1, -1), disjoint=True, source=_source(src, dst, 4))
    sub = sampler.sample_graph(torch.tensor([0, 1, 0]), seed=0)
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
    weight = torch.rand(3000, generator=torch.Generator().manual_seed(0))
    sampler = ExtendedSampler.over_graph((4, 3), source=_source(src, dst, 200), edge_weight=weight)
    a, b = (sampler.sample_graph(torch.arange(20), seed=7) for _ in range(2))
    assert torch.equal(a.n_id, b.n_id) and torch.equal(a.blocks[0].e_id, b.blocks[0].e_id)
    assert not torch.equal(a.n_id, sampler.sample_graph(torch.arange(20), seed=8).n_id)
    inner, outer = a.blocks[1], a.blocks[0]
    assert inner.num_dst == a.batch_size and torch.equal(outer.col[: inner.num_edges], inner.col)
    assert sum(a.num_sampled_edges) == a.blocks[0].num_edges


def test_zero_hops_and_bad_inputs() -> None:
    sampler = ExtendedSampler.over_graph((), source=_star(3))
    sub = sampler.sample_graph(torch.tensor([2, 0]), seed=0)
    assert sub.n_id.tolist() == [2, 0] and sub.blocks == () and sub.num_sampled_nodes == (2,)
    with pytest.raises(ValueError, match="repeated"):
        sampler.sample_graph(torch.tensor([1, 1]), seed=0)
    with pytest.raises(ValueError, match="temporal_strategy"):
        ExtendedSampler.over_graph((2,), source=_star(2), temporal_strategy="newest")
    with pytest.raises(ValueError, match="ints > 0 or -1"):
        ExtendedSampler.over_graph((2, 0), source=_star(2))
    with pytest.raises(ValueError, match="negative"):
        ExtendedSampler.over_graph((2,), source=_star(2), edge_weight=torch.tensor([1.0, -1.0]))
    with pytest.raises(ValueError, match="not both"):
        ExtendedSampler.over_graph(
            (2,), source=_star(2), node_time=torch.zeros(3), edge_time=torch.zeros(2)
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
    fast, scored = (
        ExtendedSampler.over_graph(fanouts, temporal_strategy="last", source=s, node_time=time)
        for s in (ordered, source)
    )
    assert fast._draws[ONE_RELATION].prefix and not scored._draws[ONE_RELATION].prefix
    seeds = torch.arange(0, 200, 5)
    seed_time = torch.from_numpy(np.random.default_rng(4).integers(0, 40, seeds.numel()))
    got = fast.sample_graph(seeds, seed=0, seed_time=seed_time)
    want = scored.sample_graph(seeds, seed=0, seed_time=seed_time)
    assert _tree_edges(got) == _tree_edges(want) and len(_tree_edges(got)) > 100
    size = got.batch_size  # the seeds themselves may be later than the seed_time given
    assert bool((time[got.n_id[size:]] <= seed_time[got.batch[size:]]).all())


def test_time_sorted_uniform_draws_are_uniform_among_the_candidates() -> None:
    time = torch.tensor([9, 1, 2, 3, 4, 5, 6])  # node 0 at t=9 has in-neighbors 1..6
    sorted_star = time_sorted(_star(6), src_time=time)
    sampler = ExtendedSampler.over_graph((2,), source=sorted_star, node_time=time)
    assert sampler._draws[ONE_RELATION].prefix
    picks = np.zeros(7)
    for seed in range(2000):
        sub = sampler.sample_graph(torch.tensor([0]), seed=seed, seed_time=torch.tensor([4]))
        assert sub.num_sampled_edges == (2,)
        picks[sub.n_id[1:].numpy()] += 1
    assert picks[5:].sum() == 0  # times 5 and 6 are later than the seed's 4
    assert np.allclose(picks[1:5] / 2000, 0.5, atol=0.04), picks


# ---- typed graphs: one draw per relation ------------------------------------------------

CITES: EdgeType = ("paper", "cites", "paper")
WRITES: EdgeType = ("author", "writes", "paper")


@pytest.fixture(scope="module")
def graph() -> HeteroGraph:
    return synthetic_mag(0.004, seed=5, reverse=True)


def make(graph: HeteroGraph, fanouts: tuple[int, ...] = (4, 3), **kw: object) -> ExtendedSampler:
    options = {k: kw.pop(k) for k in ("replace", "disjoint", "temporal_strategy") if k in kw}
    config = ExtendedSampler.Config(
        fanouts={et: fanouts for et in graph.edge_types},
        **options,  # type: ignore[arg-type]
    )
    num_nodes = {t: s.num_nodes for t, s in graph.nodes.items()}
    return ExtendedSampler(
        config,
        sources=csr_sources(graph),
        num_nodes=num_nodes,
        **kw,  # type: ignore[arg-type]
    )


def year(graph: HeteroGraph) -> torch.Tensor:
    return torch.from_numpy(graph.nodes["paper"].attrs["year"])


def check_trees(graph: HeteroGraph, sub: RelationalSubgraph) -> None:
    """Every sampled edge exists, and joins two nodes of the same tree."""
    assert sub.batch is not None
    for et, edge_index in sub.edge_index.items():
        src, _, dst = et
        rel = graph.relations[et]
        e_id = sub.e_id[et].numpy()
        assert np.array_equal(rel.indices[e_id], sub.n_id[src][edge_index[0]].numpy()), et
        assert np.array_equal(rel.dst_of_edges()[e_id], sub.n_id[dst][edge_index[1]].numpy())
        assert torch.equal(sub.batch[src][edge_index[0]], sub.batch[dst][edge_index[1]]), et


def _one_relation_graph() -> tuple[CSRNeighborSource, int, int]:
    gen = np.random.default_rng(0)
    num_nodes, num_edges = 300, 2000
    src, dst = gen.integers(0, num_nodes, num_edges), gen.integers(0, num_nodes, num_edges)
    order = np.argsort(dst, kind="stable")
    indptr = np.zeros(num_nodes + 1, np.int64)
    np.cumsum(np.bincount(dst, minlength=num_nodes), out=indptr[1:])
    source = CSRNeighborSource(
        torch.from_numpy(indptr), torch.from_numpy(src[order]), torch.from_numpy(order)
    )
    return source, num_nodes, num_edges


@pytest.mark.parametrize(
    ("mode", "options"),
    [
        ("disjoint", {"disjoint": True}),
        ("node_time", {}),
        ("node_time", {"temporal_strategy": "last"}),
        ("edge_weight", {}),
        ("edge_weight", {"replace": True}),
    ],
)
def test_one_relation_draws_at_its_relation_seed_and_one_type_at_the_batch_seed(
    mode: str, options: dict
) -> None:
    """A typed sampler of one relation draws as ``over_graph``'s at the relation seed."""
    source, num_nodes, num_edges = _one_relation_graph()
    gen = torch.Generator().manual_seed(1)
    values = {
        "node_time": torch.randint(0, 50, (num_nodes,), generator=gen),
        "edge_weight": torch.rand(num_edges, generator=gen),
    }
    flat = {mode: values[mode]} if mode in values else {}
    key = ("p", "to", "p") if mode == "edge_weight" else "p"
    typed = {mode: {key: values[mode]}} if mode in values else {}
    plain = ExtendedSampler.over_graph((3, 2), source=source, **options, **flat)
    hetero = ExtendedSampler(
        ExtendedSampler.Config(fanouts={("p", "to", "p"): (3, 2)}, **options),
        sources={("p", "to", "p"): source},
        num_nodes={"p": num_nodes},
        **typed,  # type: ignore[arg-type]
    )
    seeds = torch.randperm(num_nodes, generator=gen)[:16]
    want = plain.sample_graph(seeds, seed=relation_seed(7, ("p", "to", "p")))
    got = hetero.sample(seeds, input_type="p", seed=7)
    assert torch.equal(got.n_id["p"], want.n_id)
    for layer, block in enumerate(want.blocks):
        typed_block = got.blocks[layer][("p", "to", "p")]
        assert torch.equal(typed_block.rowptr, block.rowptr)
        assert torch.equal(typed_block.col, block.col)
        assert torch.equal(typed_block.e_id, block.e_id)
    assert got.num_sampled_nodes["p"] == want.num_sampled_nodes
    if want.batch is None:
        assert got.batch is None
    else:
        assert got.batch is not None and torch.equal(got.batch["p"], want.batch)
    with pytest.raises(ValueError, match="sample_graph needs one node type"):
        ExtendedSampler(
            ExtendedSampler.Config(fanouts={("p", "to", "p"): (1,), ("q", "to", "p"): (1,)}),
            sources={("p", "to", "p"): source, ("q", "to", "p"): source},
            num_nodes={"p": num_nodes, "q": num_nodes},
        ).sample_graph(seeds, seed=0)


def test_disjoint_trees_span_every_type(graph: HeteroGraph) -> None:
    seeds = torch.tensor([0, 5, 5, 9])  # disjoint: a seed may repeat, each its own tree
    sub = make(graph, disjoint=True).sample(seeds, input_type="paper", seed=3)
    check_trees(graph, sub)
    assert sub.batch is not None
    assert torch.equal(sub.batch["paper"][:4], torch.arange(4))
    assert torch.equal(sub.n_id["paper"][:4], seeds)
    assert sub.num_sampled_nodes["author"][0] == 0 and sum(sub.num_sampled_nodes["author"]) > 0
    for node_type, n_id in sub.n_id.items():  # ids are unique within a tree, not across trees
        keys = sub.batch[node_type] * graph.num_nodes(node_type) + n_id
        assert keys.unique().numel() == keys.numel(), node_type
    trees = sub.batch["author"].unique().tolist()
    assert trees == [0, 1, 2, 3]  # every tree reached authors, the repeated seed's twice over


def test_node_time_bounds_every_timed_type_and_leaves_the_others(graph: HeteroGraph) -> None:
    sampler = make(graph, (-1, -1), node_time={"paper": year(graph)})
    seeds = torch.arange(0, 200, 7)
    sub = sampler.sample(seeds, input_type="paper", seed=0)
    check_trees(graph, sub)
    assert sub.batch is not None  # temporal is disjoint
    seed_year = year(graph)[seeds]
    node_year = year(graph)[sub.n_id["paper"]]
    assert bool((node_year <= seed_year[sub.batch["paper"]]).all())
    untimed = make(graph, (-1, -1), disjoint=True).sample(seeds, input_type="paper", seed=0)
    assert sub.n_id["paper"].numel() < untimed.n_id["paper"].numel()  # papers were dropped
    # Authors have no time: every author of a kept paper is kept, as without times.
    writes_ptr = graph.relations[WRITES].indptr
    expanded = sub.n_id["paper"][: sum(sub.num_sampled_nodes["paper"][:2])].numpy()
    want = int((writes_ptr[expanded + 1] - writes_ptr[expanded]).sum())
    assert sub.edge_index[WRITES].shape[1] == want


def test_seed_time_overrides_and_edge_time_needs_it(graph: HeteroGraph) -> None:
    sampler = make(graph, (-1, -1), node_time={"paper": year(graph)})
    seeds = torch.arange(10)
    early = sampler.sample(seeds, input_type="paper", seed=0, seed_time=torch.full((10,), 2010))
    assert bool((year(graph)[early.n_id["paper"][10:]] <= 2010).all())
    num_cites = graph.relations[CITES].num_edges
    edge_time = {CITES: torch.arange(num_cites) % 5}
    timed = make(graph, (-1,), edge_time=edge_time)
    with pytest.raises(ValueError, match="has no node time; pass input_time"):
        timed.sample(seeds, input_type="paper", seed=0)
    sub = timed.sample(seeds, input_type="paper", seed=0, seed_time=torch.full((10,), 1))
    assert bool((sub.e_id[CITES] % 5 <= 1).all())
    assert sub.e_id[WRITES].numel() > 0  # untimed relations are not filtered


def test_weights_steer_draws_and_missing_relations_are_uniform(graph: HeteroGraph) -> None:
    rel = graph.relations[CITES]
    weight = torch.zeros(rel.num_edges, dtype=torch.float64)
    weight[::3] = 1.0  # only every third citation may be drawn from a well-cited paper
    sampler = make(graph, (2,), edge_weight={CITES: weight})
    seeds = torch.arange(graph.num_nodes("paper"))
    sub = sampler.sample(seeds, input_type="paper", seed=1)
    degree = np.diff(rel.indptr)
    dst = sub.edge_index[CITES][1].numpy()
    many = degree[sub.n_id["paper"][dst].numpy()] > 2
    assert bool(many.any()) and bool((sub.e_id[CITES].numpy()[many] % 3 == 0).all())
    assert sub.e_id[WRITES].numel() > 0
    assert sub.batch is None  # weighted alone is not disjoint


def test_deterministic_per_seed_and_errors(graph: HeteroGraph) -> None:
    sampler = make(graph, disjoint=True)
    seeds = torch.arange(20)
    one = sampler.sample(seeds, input_type="paper", seed=4)
    two = sampler.sample(seeds, input_type="paper", seed=4)
    other = sampler.sample(seeds, input_type="paper", seed=5)
    assert all(torch.equal(one.n_id[t], two.n_id[t]) for t in one.n_id)
    assert not all(torch.equal(one.n_id[t], other.n_id[t]) for t in one.n_id)
    weighted = make(graph, edge_weight={CITES: torch.ones(graph.relations[CITES].num_edges)})
    with pytest.raises(ValueError, match="repeated ids"):
        weighted.sample(torch.tensor([1, 1]), input_type="paper", seed=0)
    with pytest.raises(ValueError, match="outside"):
        sampler.sample(torch.tensor([10**6]), input_type="paper", seed=0)
    with pytest.raises(ValueError, match="choose one of"):
        sampler.sample(seeds, input_type="venue", seed=0)
    with pytest.raises(ValueError, match="not both"):
        make(graph, node_time={"paper": year(graph)}, edge_time={CITES: torch.zeros(1)})
    with pytest.raises(ValueError, match="relations the graph lacks"):
        make(graph, edge_weight={("paper", "x", "venue"): torch.ones(1)})
    with pytest.raises(ValueError, match="the type has 2946 nodes"):
        make(graph, node_time={"paper": torch.zeros(5)})
    with pytest.raises(ValueError, match="negative"):
        make(graph, edge_weight={CITES: -torch.ones(graph.relations[CITES].num_edges)})
    with pytest.raises(ValueError, match="temporal_strategy"):
        make(graph, temporal_strategy="first")
