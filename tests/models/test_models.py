"""Block models: forward over sampled blocks, layer-wise full-graph inference, registry, env run."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from gnnsys.models import GAT, GCN, REGISTRY, SAGE
from gnnsys.types import Block, Graph


def full_block(graph: Graph) -> Block:
    rowptr = torch.from_numpy(graph.indptr)
    col = torch.from_numpy(graph.indices).long()
    return Block(graph.num_nodes, graph.num_nodes, rowptr, col, torch.arange(col.shape[0]))


def sample_blocks(
    graph: Graph, seeds: torch.Tensor, num_layers: int
) -> tuple[torch.Tensor, list[Block]]:
    """Every in-neighbour, hop by hop (fanout -1): returns (n_id, blocks input layer first)."""
    indptr, indices = torch.from_numpy(graph.indptr), torch.from_numpy(graph.indices).long()
    dst_gid, blocks = seeds, []
    for _ in range(num_layers):
        deg = indptr[dst_gid + 1] - indptr[dst_gid]
        src_gid_E = torch.cat([indices[indptr[g] : indptr[g + 1]] for g in dst_gid.tolist()])
        new = src_gid_E[~torch.isin(src_gid_E, dst_gid)].unique()
        n_id = torch.cat([dst_gid, new])
        lid = torch.full((graph.num_nodes,), -1, dtype=torch.long)
        lid[n_id] = torch.arange(n_id.shape[0])
        rowptr = torch.cat([torch.zeros(1, dtype=torch.long), deg.cumsum(0)])
        col = lid[src_gid_E]
        blocks.append(
            Block(
                int(n_id.shape[0]), int(dst_gid.shape[0]), rowptr, col, torch.arange(col.shape[0])
            )
        )
        dst_gid = n_id
    return dst_gid, blocks[::-1]


@pytest.mark.parametrize("name", ["sage", "gcn", "gat"])
def test_forward_on_blocks_shapes_and_grads(tiny_graph: Graph, name: str) -> None:
    assert tiny_graph.x is not None
    torch.manual_seed(0)
    block = REGISTRY[name].block
    assert block is not None
    model = block(16, 32, 4, 2, 0.5)
    seeds = torch.arange(0, 1000, 50)
    n_id, blocks = sample_blocks(tiny_graph, seeds, 2)
    out = model(torch.from_numpy(tiny_graph.x)[n_id], blocks)
    assert out.shape == (seeds.shape[0], 4)
    out.sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


@pytest.mark.parametrize("model_cls", [SAGE, GAT])
def test_blocks_equal_layerwise_full_graph(tiny_graph: Graph, model_cls: type) -> None:
    """With every neighbour sampled, seed outputs equal layer-wise full-graph inference."""
    assert tiny_graph.x is not None
    x = torch.from_numpy(tiny_graph.x)
    torch.manual_seed(0)
    model = model_cls(16, 32, 4, 2, 0.5).eval()
    seeds = torch.tensor([3, 77, 500, 999])
    n_id, blocks = sample_blocks(tiny_graph, seeds, 2)
    with torch.no_grad():
        out = model(x[n_id], blocks)
        h = x
        for i in range(model.num_layers):
            h = model.forward_layer(i, h, full_block(tiny_graph))
    torch.testing.assert_close(out, h[seeds], atol=1e-5, rtol=1e-5)


def test_gcn_full_graph_forward(tiny_graph: Graph) -> None:
    assert tiny_graph.x is not None
    model = GCN(16, 8, 3, num_layers=3, dropout=0.0)
    block = full_block(tiny_graph)
    assert model(torch.from_numpy(tiny_graph.x), [block] * 3).shape == (1000, 3)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_layers": 0}, "num_layers=0"),
        ({"dropout": 1.0}, "dropout=1.0"),
        ({"hidden_dim": 0}, "hidden_dim=0"),
    ],
)
def test_bad_model_args_raise(kwargs: dict[str, float], match: str) -> None:
    args = {"in_dim": 4, "hidden_dim": 8, "out_dim": 2, "num_layers": 2, "dropout": 0.5, **kwargs}
    with pytest.raises(ValueError, match=match):
        SAGE(**args)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="multiple of heads"):
        GAT(4, 10, 2, 2, 0.5, heads=4)


def test_wrong_block_count_and_rows_raise(tiny_graph: Graph) -> None:
    model = SAGE(16, 8, 2, 2, 0.0)
    block = full_block(tiny_graph)
    with pytest.raises(ValueError, match="got 1 blocks"):
        model(torch.zeros(1000, 16), [block])
    with pytest.raises(ValueError, match="num_src=1000"):
        model(torch.zeros(10, 16), [block, block])


def test_tiny_training_run_with_triton_interpreter() -> None:
    """``GNNSYS_KERNEL=triton TRITON_INTERPRET=1``: a few SAGE steps on CPU through the kernel."""
    pytest.importorskip("triton")
    code = """
import torch
from gnnsys.datasets.synthetic import sbm
from gnnsys.kernels import backend_for
from gnnsys.models import SAGE
from gnnsys.types import Block
g = sbm(num_nodes=60, num_classes=3, avg_degree=4, num_features=8, seed=0)
rowptr, col = torch.from_numpy(g.indptr), torch.from_numpy(g.indices).long()
block = Block(g.num_nodes, g.num_nodes, rowptr, col, torch.arange(col.shape[0]))
x, y = torch.from_numpy(g.x), torch.from_numpy(g.y)
assert backend_for(x) == "triton"
torch.manual_seed(0)
model = SAGE(8, 16, 3, 2, 0.0)
opt = torch.optim.Adam(model.parameters(), lr=0.05)
losses = []
for _ in range(2):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x, [block, block]), y)
    loss.backward()
    opt.step()
    losses.append(loss.item())
assert losses[-1] < losses[0], losses
print("losses", losses)
"""
    env = {**os.environ, "GNNSYS_KERNEL": "triton", "TRITON_INTERPRET": "1"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=240)
