"""Heterogeneous SAGE and R-GCN over typed blocks equal PyG's HeteroConv(SAGEConv) and RGCNConv."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.data import HeteroData
from torch_geometric.nn import HeteroConv, RGCNConv, SAGEConv

from gnnsys.datasets.hetero import HeteroGraph
from gnnsys.datasets.mag import synthetic_mag
from gnnsys.models.hetero import HeteroSAGE, HeteroSAGELayer, RGCNLayer, TypedBlocks
from gnnsys.sampler.hetero import HeteroNeighborSampler, csr_sources
from gnnsys.types import Block

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
    ours = HeteroSAGELayer(WIDTHS, 9, graph.edge_types)
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
    model = HeteroSAGE(WIDTHS, 10, 4, graph.edge_types, num_layers=2, dropout=0.0).eval()
    x = features(graph, WIDTHS)
    full = full_blocks(graph)
    want = model(x, (full, full))["paper"]
    config = HeteroNeighborSampler.Config(fanouts={et: (-1, -1) for et in graph.edge_types})
    sampler = HeteroNeighborSampler(config, sources=csr_sources(graph), node_types=graph.node_types)
    seeds = torch.tensor([0, 5, 9, 30])
    sub = sampler.sample(seeds, input_type="paper", seed=0)
    x_batch = {t: x[t][sub.n_id[t]] for t in graph.node_types}
    got = model(x_batch, sub.blocks)["paper"][: sub.batch_size]
    diff = (got - want[seeds]).abs().max().item()
    assert diff < 1e-5, f"max diff {diff:.2e}"


@pytest.mark.parametrize(("heads", "concat"), [(1, True), (3, True), (2, False)])
def test_hetero_gat_layer_equals_pyg_to_hetero_gat(
    graph: HeteroGraph, heads: int, concat: bool
) -> None:
    from torch_geometric.nn import GATConv

    from gnnsys.models.hetero import HeteroGATLayer

    torch.manual_seed(0)
    pyg = HeteroConv(
        {
            et: GATConv(
                (WIDTHS[et[0]], WIDTHS[et[2]]), 4, heads=heads, concat=concat, add_self_loops=False
            )
            for et in graph.edge_types
        },
        aggr="sum",
    )
    for p in pyg.parameters():  # PyG starts biases at zero; make them count
        torch.nn.init.normal_(p, std=0.3)
    ours = HeteroGATLayer(WIDTHS, 4, graph.edge_types, heads, concat)
    ours.load_state_dict(pyg.state_dict())  # strict: PyG's parameter names
    x = features(graph, WIDTHS)
    want = pyg(x, edge_index_dict(graph))
    got = ours(x, full_blocks(graph))
    assert set(got) == set(want)
    for node_type in want:
        diff = (got[node_type] - want[node_type]).abs().max().item()
        assert diff < 1e-5, f"{node_type}: max diff {diff:.2e}"
