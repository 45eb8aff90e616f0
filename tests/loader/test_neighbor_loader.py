"""NeighborLoader and layerwise_inference: PyG's batch layout, epochs, prefetch, exact inference."""

from __future__ import annotations

import copy
import threading

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.nn import SAGEConv
from torch_geometric.nn.models import GraphSAGE

from gnnsys.loader import NeighborLoader, layerwise_inference
from gnnsys.types import Graph


@pytest.fixture(scope="module")
def pyg_data(tiny_graph: Graph) -> Data:
    data = tiny_graph.to_pyg()
    perm = torch.randperm(data.edge_index.shape[1], generator=torch.Generator().manual_seed(0))
    data.edge_index = data.edge_index[:, perm]  # not dst-sorted: e_id must map back anyway
    data.edge_weight = torch.arange(data.edge_index.shape[1], dtype=torch.float32)
    return data


def test_batch_fields_match_pyg_meaning(pyg_data: Data) -> None:
    loader = NeighborLoader(pyg_data, num_neighbors=[5, 3], batch_size=64, seed=0)
    batch = next(iter(loader))
    assert batch.batch_size == 64 and batch.num_nodes == batch.n_id.numel()
    assert torch.equal(batch.n_id[:64], torch.arange(64))
    assert torch.equal(batch.input_id, torch.arange(64))
    assert torch.equal(batch.x, pyg_data.x[batch.n_id]) and torch.equal(
        batch.y, pyg_data.y[batch.n_id]
    )
    # e_id indexes the original edge_index; local ids map back to the same global edge.
    assert torch.equal(batch.n_id[batch.edge_index], pyg_data.edge_index[:, batch.e_id])
    assert torch.equal(batch.edge_weight, pyg_data.edge_weight[batch.e_id])
    assert sum(batch.num_sampled_nodes) == batch.n_id.numel()
    assert sum(batch.num_sampled_edges) == batch.edge_index.shape[1]
    assert isinstance(batch.num_sampled_nodes, list) and len(batch.num_sampled_edges) == 2


@pytest.mark.parametrize("shuffle", [False, True])
def test_each_input_node_is_a_seed_once_per_epoch(pyg_data: Data, shuffle: bool) -> None:
    loader = NeighborLoader(
        pyg_data, num_neighbors=[2], batch_size=50, input_nodes=pyg_data.train_mask, shuffle=shuffle
    )
    train_gid = torch.nonzero(pyg_data.train_mask).squeeze(1)
    orders = []
    for _ in range(2):
        seeds = torch.cat([b.n_id[: b.batch_size] for b in loader])
        assert torch.equal(seeds.sort().values, train_gid)
        orders.append(seeds)
    assert len(loader) == -(-train_gid.numel() // 50)
    assert torch.equal(orders[0], orders[1]) != shuffle  # a new order every epoch when shuffling


def test_drop_last_and_index_input(pyg_data: Data) -> None:
    loader = NeighborLoader(
        pyg_data, [2], batch_size=30, input_nodes=torch.arange(100), drop_last=True
    )
    sizes = [b.batch_size for b in loader]
    assert sizes == [30, 30, 30] and len(loader) == 3


def test_same_seed_same_batches(pyg_data: Data) -> None:
    make = lambda: NeighborLoader(pyg_data, [4, 4], batch_size=100, shuffle=True, seed=3)  # noqa: E731
    for a, b in zip(make(), make(), strict=True):
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index)


def test_trim_to_layer_runs_and_matches(pyg_data: Data) -> None:
    torch.manual_seed(0)
    model = GraphSAGE(16, 8, num_layers=2, out_channels=4).eval()
    batch = next(iter(NeighborLoader(pyg_data, [4, 3], batch_size=32, seed=1)))
    full = model(batch.x, batch.edge_index)[: batch.batch_size]
    trimmed = model(
        batch.x,
        batch.edge_index,
        num_sampled_nodes_per_hop=batch.num_sampled_nodes,
        num_sampled_edges_per_hop=batch.num_sampled_edges,
    )[: batch.batch_size]
    torch.testing.assert_close(trimmed, full)


def test_prefetch_matches_and_shuts_down(pyg_data: Data) -> None:
    plain = list(NeighborLoader(pyg_data, [3, 3], batch_size=100, seed=4))
    loader = NeighborLoader(pyg_data, [3, 3], batch_size=100, seed=4, prefetch=2)
    fetched = list(loader)
    assert len(fetched) == len(plain)
    for a, b in zip(plain, fetched, strict=True):
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.e_id, b.e_id)
    loader.epoch = 0
    it = iter(loader)
    next(it)
    it.close()  # type: ignore[attr-defined]
    assert not any(
        t.name.startswith("gnnsys-prefetch") and t.is_alive() for t in threading.enumerate()
    )


@pytest.mark.parametrize("num_workers", [1, 2, 3])
def test_workers_give_the_same_batches_and_stop(pyg_data: Data, num_workers: int) -> None:
    plain = list(NeighborLoader(pyg_data, [3, 3], batch_size=50, seed=5, shuffle=True))
    loader = NeighborLoader(
        pyg_data, [3, 3], batch_size=50, seed=5, shuffle=True, num_workers=num_workers
    )
    got = list(loader)
    assert len(got) == len(plain)
    for a, b in zip(plain, got, strict=True):
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index)
        assert torch.equal(a.x, b.x) and torch.equal(a.input_id, b.input_id)
    assert not any(
        t.name.startswith("gnnsys-prefetch") and t.is_alive() for t in threading.enumerate()
    )


def test_accepts_gnnsys_graph(tiny_graph: Graph) -> None:
    loader = NeighborLoader(tiny_graph, [3], batch_size=10, input_nodes=tiny_graph.train_mask)
    batch = next(iter(loader))
    assert torch.equal(batch.x, torch.from_numpy(tiny_graph.x)[batch.n_id])
    assert torch.equal(batch.train_mask[: batch.batch_size], torch.ones(10, dtype=torch.bool))


def test_rejects_bad_arguments(pyg_data: Data) -> None:
    with pytest.raises(TypeError, match="unexpected"):
        NeighborLoader(pyg_data, [2], bogus=1)
    NeighborLoader(pyg_data, [2], num_workers=4, persistent_workers=True)  # threads; ignored
    with pytest.raises(ValueError, match="num_workers"):
        NeighborLoader(pyg_data, [2], num_workers=-1)
    with pytest.raises(ValueError, match="prefetch"):
        NeighborLoader(pyg_data, [2], num_workers=3, prefetch=2)
    with pytest.raises(ValueError, match="fanouts"):
        NeighborLoader(pyg_data, [0])
    with pytest.raises(ValueError, match="outside"):
        NeighborLoader(pyg_data, [2], input_nodes=torch.tensor([10_000]))
    with pytest.raises(TypeError, match="Graph"):
        NeighborLoader({"edge_index": pyg_data.edge_index}, [2])


def test_layerwise_inference_equals_full_graph(pyg_data: Data, tiny_graph: Graph) -> None:
    torch.manual_seed(0)
    convs = [SAGEConv(16, 8), SAGEConv(8, 4)]
    with torch.no_grad():
        want = convs[1](torch.relu(convs[0](pyg_data.x, pyg_data.edge_index)), pyg_data.edge_index)
    for graph in (pyg_data, tiny_graph):
        got = layerwise_inference(convs, graph, batch_size=128, activation=torch.relu)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_deleting_data_attrs_stops_slicing(pyg_data: Data) -> None:
    loader = NeighborLoader(copy.copy(pyg_data), [2], batch_size=10)
    del loader.data.x  # PyG's examples do this for the inference loader
    batch = next(iter(loader))
    assert "x" not in batch and "y" in batch
    assert pyg_data.x is not None  # the caller's Data is untouched
