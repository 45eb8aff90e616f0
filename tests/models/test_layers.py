"""Layers equal PyG's SAGEConv / GCNConv; aggregate/combine split; the PyG Aggregation classes."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.nn import GCNConv, SAGEConv

from gnnsys.kernels import (
    FusedMaxAggregation,
    FusedMeanAggregation,
    FusedSumAggregation,
    aggregate,
)
from gnnsys.kernels.csr import dst_of_edges
from gnnsys.models import GCNLayer, SAGELayer
from gnnsys.types import Block, Graph


def full_block(graph: Graph) -> Block:
    """The whole graph as one block: num_src = num_dst = N, rowptr = indptr, col = indices."""
    rowptr = torch.from_numpy(graph.indptr)
    col = torch.from_numpy(graph.indices).long()
    e_id = torch.arange(col.shape[0])
    return Block(graph.num_nodes, graph.num_nodes, rowptr, col, e_id)


@pytest.fixture(scope="module")
def graph_x(tiny_graph: Graph) -> tuple[Graph, torch.Tensor, torch.Tensor]:
    assert tiny_graph.x is not None
    return tiny_graph, torch.from_numpy(tiny_graph.x), tiny_graph.to_pyg().edge_index


def test_sage_layer_equals_pyg(graph_x: tuple[Graph, torch.Tensor, torch.Tensor]) -> None:
    graph, x, edge_index = graph_x
    pyg = SAGEConv(x.shape[1], 24)
    ours = SAGELayer(x.shape[1], 24)
    ours.load_state_dict(pyg.state_dict())
    torch.testing.assert_close(ours(x, full_block(graph)), pyg(x, edge_index), atol=1e-5, rtol=1e-5)


def test_gcn_layer_equals_pyg(graph_x: tuple[Graph, torch.Tensor, torch.Tensor]) -> None:
    graph, x, edge_index = graph_x
    pyg = GCNConv(x.shape[1], 24)
    torch.nn.init.normal_(pyg.bias)
    ours = GCNLayer(x.shape[1], 24)
    ours.load_state_dict(pyg.state_dict())
    torch.testing.assert_close(ours(x, full_block(graph)), pyg(x, edge_index), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("layer_cls", [SAGELayer, GCNLayer])
def test_forward_is_combine_of_aggregate(
    graph_x: tuple[Graph, torch.Tensor, torch.Tensor], layer_cls: type[torch.nn.Module]
) -> None:
    graph, x, _ = graph_x
    layer = layer_cls(x.shape[1], 8)
    block = full_block(graph)
    split = layer.combine(layer.aggregate(x, block), x[: block.num_dst], block)
    torch.testing.assert_close(layer(x, block), split)


def test_partial_sums_rebuild_aggregate(graph_x: tuple[Graph, torch.Tensor, torch.Tensor]) -> None:
    """Issue 8's contract: owners sum (scaled) rows over the edges they hold; partials add up."""
    graph, x, _ = graph_x
    block = full_block(graph)
    owner_of_src = torch.arange(graph.num_nodes) % 3
    dst_E = dst_of_edges(block.rowptr)
    deg = (block.rowptr[1:] - block.rowptr[:-1]).clamp(min=1)
    s = GCNLayer.src_scale(block)
    sage_total = torch.zeros(graph.num_nodes, x.shape[1])
    gcn_total = torch.zeros_like(sage_total)
    for part in range(3):
        keep = owner_of_src[block.col] == part  # the edges whose source this owner holds
        counts = torch.bincount(dst_E[keep], minlength=graph.num_nodes)
        rowptr = torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)])
        col = block.col[keep]
        sage_total += aggregate(x, rowptr, col, "sum")
        gcn_total += aggregate(x * s[:, None], rowptr, col, "sum")
    sage = SAGELayer(x.shape[1], 4)
    gcn = GCNLayer(x.shape[1], 4)
    torch.testing.assert_close(sage_total / deg[:, None], sage.aggregate(x, block))
    torch.testing.assert_close(gcn_total, gcn.aggregate(x, block))


@pytest.mark.parametrize(
    ("aggr_cls", "name"),
    [(FusedMeanAggregation, "mean"), (FusedSumAggregation, "sum"), (FusedMaxAggregation, "max")],
)
def test_pyg_sageconv_accepts_fused_aggregation(
    graph_x: tuple[Graph, torch.Tensor, torch.Tensor], aggr_cls: type, name: str
) -> None:
    _, x, edge_index = graph_x
    plain = SAGEConv(x.shape[1], 12, aggr=name)
    fused = SAGEConv(x.shape[1], 12, aggr=aggr_cls())
    fused.load_state_dict(plain.state_dict())
    perm = torch.randperm(edge_index.shape[1])  # unsorted destinations
    xg = x.clone().requires_grad_(True)
    out = fused(xg, edge_index[:, perm])
    torch.testing.assert_close(out, plain(x, edge_index[:, perm]), atol=1e-5, rtol=1e-5)
    out.sum().backward()
    assert xg.grad is not None and torch.isfinite(xg.grad).all()
