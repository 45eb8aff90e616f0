"""``HeteroExtendedSampler``: disjoint, temporal and weighted draws over typed nodes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnsys.datasets.hetero import EdgeType, HeteroGraph
from gnnsys.datasets.mag import synthetic_mag
from gnnsys.sampler.csr_source import CSRNeighborSource
from gnnsys.sampler.extended import ExtendedSampler
from gnnsys.sampler.hetero import HeteroSampledSubgraph, csr_sources, relation_seed
from gnnsys.sampler.hetero_extended import HeteroExtendedSampler

CITES: EdgeType = ("paper", "cites", "paper")
WRITES: EdgeType = ("author", "writes", "paper")


@pytest.fixture(scope="module")
def graph() -> HeteroGraph:
    return synthetic_mag(0.004, seed=5, reverse=True)


def make(
    graph: HeteroGraph, fanouts: tuple[int, ...] = (4, 3), **kw: object
) -> HeteroExtendedSampler:
    options = {k: kw.pop(k) for k in ("replace", "disjoint", "temporal_strategy") if k in kw}
    config = HeteroExtendedSampler.Config(
        fanouts={et: fanouts for et in graph.edge_types},
        **options,  # type: ignore[arg-type]
    )
    num_nodes = {t: s.num_nodes for t, s in graph.nodes.items()}
    return HeteroExtendedSampler(
        config,
        sources=csr_sources(graph),
        num_nodes=num_nodes,
        **kw,  # type: ignore[arg-type]
    )


def year(graph: HeteroGraph) -> torch.Tensor:
    return torch.from_numpy(graph.nodes["paper"].attrs["year"])


def check_trees(graph: HeteroGraph, sub: HeteroSampledSubgraph) -> None:
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
def test_one_relation_equals_the_homogeneous_sampler(mode: str, options: dict) -> None:
    """With one type and relation, the typed draws are ExtendedSampler's at the relation seed."""
    source, num_nodes, num_edges = _one_relation_graph()
    gen = torch.Generator().manual_seed(1)
    values = {
        "node_time": torch.randint(0, 50, (num_nodes,), generator=gen),
        "edge_weight": torch.rand(num_edges, generator=gen),
    }
    flat = {mode: values[mode]} if mode in values else {}
    key = ("p", "to", "p") if mode == "edge_weight" else "p"
    typed = {mode: {key: values[mode]}} if mode in values else {}
    plain = ExtendedSampler(
        ExtendedSampler.Config(fanouts=(3, 2), **options), source=source, **flat
    )
    hetero = HeteroExtendedSampler(
        HeteroExtendedSampler.Config(fanouts={("p", "to", "p"): (3, 2)}, **options),
        sources={("p", "to", "p"): source},
        num_nodes={"p": num_nodes},
        **typed,  # type: ignore[arg-type]
    )
    seeds = torch.randperm(num_nodes, generator=gen)[:16]
    want = plain.sample(seeds, seed=relation_seed(7, ("p", "to", "p")))
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
    with pytest.raises(ValueError, match="has no time attribute; pass input_time"):
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
