"""Heterogeneous SAGE, GCN and R-GCN over typed blocks equal PyG's HeteroConv and RGCNConv."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch_geometric.data import HeteroData
from torch_geometric.nn import GCNConv, HeteroConv, RGCNConv, SAGEConv

from gnnsys.datasets.mag import synthetic_mag
from gnnsys.models import GCN
from gnnsys.models.relational import (
    RelationalGCN,
    RelationalGCNLayer,
    RelationalSAGE,
    RelationalSAGELayer,
    RGCNLayer,
    TypedBlocks,
)
from gnnsys.sampler.neighbor import RelationalSampler, csr_sources
from gnnsys.types import Block
from gnnsys.types.relations import HeteroGraph

WIDTHS = {"paper": 12, "author": 6, "institution": 5, "field_of_study": 7}


@pytest.fixture(scope="module")
def graph() -> HeteroGraph:
    return synthetic_mag(0.003, seed=2, num_features=0, reverse=True)


def features(graph: HeteroGraph, widths: dict[str, int]) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    return {t: torch.randn(graph.num_nodes(t), widths[t], generator=gen) for t in graph.node_types}


def full_blocks(graph: HeteroGraph) -> TypedBlocks:
    return {
        et: Block(
            num_src=rel.num_src,
            num_dst=rel.num_dst,
            rowptr=torch.from_numpy(rel.indptr),
            col=torch.from_numpy(rel.indices).long(),
            e_id=torch.arange(rel.num_edges),
        )
        for et, rel in graph.relations.items()
    }


def edge_index_dict(graph: HeteroGraph) -> dict[tuple[str, str, str], torch.Tensor]:
    data: HeteroData = graph.to_pyg()
    return {et: data[et].edge_index for et in data.edge_types}


def test_hetero_sage_layer_equals_pyg_heteroconv(graph: HeteroGraph) -> None:
    torch.manual_seed(0)
    pyg = HeteroConv(
        {et: SAGEConv((WIDTHS[et[0]], WIDTHS[et[2]]), 9) for et in graph.edge_types}, aggr="sum"
    )
    ours = RelationalSAGELayer(WIDTHS, 9, graph.edge_types)
    ours.load_state_dict(pyg.state_dict())  # strict: PyG's parameter names
    x = features(graph, WIDTHS)
    want = pyg(x, edge_index_dict(graph))
    got = ours(x, full_blocks(graph))
    assert set(got) == set(want)
    for node_type in want:
        diff = (got[node_type] - want[node_type]).abs().max().item()
        assert diff < 1e-5, f"{node_type}: max diff {diff:.2e}"


def test_rgcn_layer_equals_pyg_rgcnconv_on_the_homogeneous_graph(graph: HeteroGraph) -> None:
    torch.manual_seed(0)
    width = 8
    x = features(graph, dict.fromkeys(graph.node_types, width))
    data = graph.to_pyg()
    for node_type in data.node_types:
        data[node_type].x = x[node_type]
    homo = data.to_homogeneous()  # edge_type r = position in data.edge_types
    pyg = RGCNConv(width, 5, num_relations=len(data.edge_types), aggr="mean")
    ours = RGCNLayer(width, 5, list(data.edge_types))
    ours.load_state_dict(pyg.state_dict())
    want = pyg(homo.x, homo.edge_index, homo.edge_type)
    got = ours(x, full_blocks(graph))
    for index, node_type in enumerate(data.node_types):
        rows = want[homo.node_type == index]
        diff = (got[node_type] - rows).abs().max().item()
        assert diff < 1e-5, (
            f"{node_type}: max diff {diff:.2e} (mean {(got[node_type] - rows).abs().mean():.2e})"
        )


def test_two_layer_model_on_sampled_blocks_equals_full_graph(graph: HeteroGraph) -> None:
    torch.manual_seed(0)
    model = RelationalSAGE(WIDTHS, 10, 4, graph.edge_types, num_layers=2, dropout=0.0).eval()
    x = features(graph, WIDTHS)
    full = full_blocks(graph)
    want = model(x, (full, full))["paper"]
    config = RelationalSampler.Config(fanouts={et: (-1, -1) for et in graph.edge_types})
    sampler = RelationalSampler(config, sources=csr_sources(graph), node_types=graph.node_types)
    seeds = torch.tensor([0, 5, 9, 30])
    sub = sampler.sample(seeds, input_type="paper", seed=0)
    x_batch = {t: x[t][sub.n_id[t]] for t in graph.node_types}
    got = model(x_batch, sub.blocks)["paper"][: sub.batch_size]
    diff = (got - want[seeds]).abs().max().item()
    assert diff < 1e-5, f"max diff {diff:.2e}"


@pytest.mark.parametrize(("heads", "concat"), [(1, True), (3, True), (2, False)])
def test_hetero_gat_layer_equals_pyg_heteroconv_of_gatconv(
    graph: HeteroGraph, heads: int, concat: bool
) -> None:
    from torch_geometric.nn import GATConv

    from gnnsys.models.gat import RelationalGATLayer

    torch.manual_seed(0)
    pyg = HeteroConv(  # a relation from a type to itself: the homogeneous form, self loops
        {
            et: GATConv(WIDTHS[et[0]], 4, heads=heads, concat=concat)
            if et[0] == et[2]
            else GATConv(
                (WIDTHS[et[0]], WIDTHS[et[2]]), 4, heads=heads, concat=concat, add_self_loops=False
            )
            for et in graph.edge_types
        },
        aggr="sum",
    )
    assert any(et[0] == et[2] for et in graph.edge_types)
    for p in pyg.parameters():  # PyG starts biases at zero; make them count
        torch.nn.init.normal_(p, std=0.3)
    ours = RelationalGATLayer(WIDTHS, 4, graph.edge_types, heads, concat)
    ours.load_state_dict(pyg.state_dict())  # strict: PyG's parameter names
    x = features(graph, WIDTHS)
    want = pyg(x, edge_index_dict(graph))
    got = ours(x, full_blocks(graph))
    assert set(got) == set(want)
    for node_type in want:
        diff = (got[node_type] - want[node_type]).abs().max().item()
        assert diff < 1e-5, f"{node_type}: max diff {diff:.2e}"


def test_hetero_gcn_layer_equals_pyg_heteroconv_of_gcnconv(graph: HeteroGraph) -> None:
    same = [et for et in graph.edge_types if et[0] == et[2]]  # GCNConv's relations
    assert same
    torch.manual_seed(0)
    pyg = HeteroConv({et: GCNConv(WIDTHS[et[0]], 9) for et in same}, aggr="sum")
    ours = RelationalGCNLayer(WIDTHS, 9, same)
    ours.load_state_dict(pyg.state_dict())  # strict: PyG's parameter names
    x = features(graph, WIDTHS)
    want = pyg(x, {et: ei for et, ei in edge_index_dict(graph).items() if et in same})
    blocks = {
        et: replace(b, src_in_degree=b.rowptr[1:] - b.rowptr[:-1])  # whole-graph in-degrees
        for et, b in full_blocks(graph).items()
        if et in same
    }
    got = ours(x, blocks)
    assert set(got) == set(want)
    for node_type in want:
        diff = (got[node_type] - want[node_type]).abs().max().item()
        assert diff < 1e-5, f"{node_type}: max diff {diff:.2e}"


def test_hetero_gcn_on_one_relation_is_gcn() -> None:
    """A homogeneous graph's one relation: the same weights from the same seed, same outputs."""
    one = ("node", "to", "node")
    torch.manual_seed(3)
    gcn = GCN(8, 16, 4, num_layers=2, dropout=0.0)
    torch.manual_seed(3)
    typed = RelationalGCN({"node": 8}, 16, 4, [one], num_layers=2, dropout=0.0)
    for a, b in zip(gcn.state_dict().values(), typed.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    gen = torch.Generator().manual_seed(0)
    rowptr = torch.tensor([0, 2, 3, 5, 5, 6])
    col = torch.randint(0, 7, (6,), generator=gen)
    degree = torch.randint(0, 9, (7,), generator=gen)
    block = Block(num_src=7, num_dst=5, rowptr=rowptr, col=col, e_id=torch.arange(6))
    inner = Block(num_src=5, num_dst=2, rowptr=rowptr[:3], col=col[:3] % 5, e_id=torch.arange(3))
    blocks = [replace(b, src_in_degree=degree[: b.num_src]) for b in (block, inner)]
    x = torch.randn(7, 8, generator=gen)
    want = gcn(x, blocks)
    got = typed({"node": x}, tuple({one: b} for b in blocks))["node"]
    assert torch.equal(got, want)


def test_hetero_gcn_refuses_a_relation_between_two_types(graph: HeteroGraph) -> None:
    bipartite = next(et for et in graph.edge_types if et[0] != et[2])
    with pytest.raises(ValueError, match=r"joins two types.*#7637.*sage, gat or rgcn"):
        RelationalGCN(WIDTHS, 16, 4, [bipartite])


@pytest.mark.parametrize("name", ["sage", "gcn", "gat"])
def test_a_one_relation_stack_is_the_homogeneous_model(name: str) -> None:
    """One relation from a type to itself: the same weights from the same seed, saved and
    loaded under the homogeneous model's names, and the same outputs (checkpoints agree)."""
    from gnnsys.models import REGISTRY
    from gnnsys.models.gat import RelationalGAT
    from gnnsys.testing.reference import full_block
    from gnnsys.types import ONE_RELATION, ONE_TYPE

    typed_cls = {"sage": RelationalSAGE, "gcn": RelationalGCN, "gat": RelationalGAT}[name]
    torch.manual_seed(4)
    typed = typed_cls({ONE_TYPE: 8}, 12, 3, [ONE_RELATION], 2, 0.0)
    torch.manual_seed(4)
    block = REGISTRY[name].block
    assert block is not None
    plain = block(8, 12, 3, 2, 0.0)
    state = typed.state_dict()
    assert list(state) == list(plain.state_dict())
    assert all(torch.equal(v, plain.state_dict()[k]) for k, v in state.items())
    assert not any(".convs." in k for k in state)
    with torch.no_grad():  # loading takes the homogeneous names and the per-relation ones
        for p in plain.parameters():
            p.normal_()
    typed.load_state_dict(plain.state_dict())
    other = typed_cls({ONE_TYPE: 8}, 12, 3, [ONE_RELATION], 2, 0.0)
    other.load_state_dict(dict(typed.named_parameters()))
    gen = torch.Generator().manual_seed(0)
    indptr = torch.arange(0, 61, 3).numpy()
    block = full_block(indptr, torch.randint(0, 20, (60,), generator=gen).numpy(), 20)
    x = torch.randn(20, 8, generator=gen)
    want = plain.eval()(x, [block, block])
    for model in (typed, other):
        got = model.eval()({ONE_TYPE: x}, ({ONE_RELATION: block},) * 2)[ONE_TYPE]
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)


def test_a_stack_of_several_relations_keeps_the_per_relation_names(graph: HeteroGraph) -> None:
    model = RelationalSAGE(WIDTHS, 9, 3, graph.edge_types, 2, 0.0)
    assert all(".convs.<" in k for k in model.state_dict())
