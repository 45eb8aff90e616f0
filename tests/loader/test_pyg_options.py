"""NeighborLoader's PyG options: subgraph types, disjoint, weighted, temporal, inputs, hooks."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.testing import MyFeatureStore, MyGraphStore
from torch_geometric.utils import is_undirected

from gnnsys.loader import NeighborLoader
from gnnsys.loader.graph_view import GraphView
from gnnsys.sampler import NeighborSampler, batch_seed
from gnnsys.types import Graph


@pytest.fixture(scope="module")
def data(tiny_graph: Graph) -> Data:
    out = tiny_graph.to_pyg()
    out.edge_attr = torch.arange(out.edge_index.shape[1])
    return out


def _edge_set(edge_index: torch.Tensor) -> set[tuple[int, int]]:
    return set(map(tuple, edge_index.t().tolist()))


def test_plain_batches_are_the_runtime_samplers(data: Data) -> None:
    """Default options run NeighborSampler with batch_seed(seed, epoch, i), unchanged."""
    loader = NeighborLoader(data, [4, 3], batch_size=50, seed=11)
    sampler = NeighborSampler(
        NeighborSampler.Config(fanouts=(4, 3)), source=GraphView.of(data).source
    )
    for i, batch in enumerate(loader):
        sub = sampler.sample(torch.arange(50 * i, min(50 * (i + 1), data.num_nodes)), seed=0)
        sub = sampler.sample(sub.n_id[: sub.batch_size], seed=batch_seed(11, 0, i))
        assert torch.equal(batch.n_id, sub.n_id) and torch.equal(batch.e_id, sub.blocks[0].e_id)
        assert batch.num_sampled_nodes == list(sub.num_sampled_nodes)


def test_weighted_sampling_matches_pyg_example() -> None:
    """PyG's weighted example: weight-0 in-edges are never drawn."""
    edge_index = torch.tensor([[1, 3, 0, 4], [2, 2, 1, 3]])
    graph = Data(num_nodes=5, edge_index=edge_index, edge_weight=torch.tensor([0.0, 1, 0, 1]))
    for seed in range(5):
        loader = NeighborLoader(
            graph, [1, 1], input_nodes=torch.tensor([2]), weight_attr="edge_weight", seed=seed
        )
        batch = next(iter(loader))
        assert batch.n_id.tolist() == [2, 3, 4]
        assert batch.edge_index.tolist() == [[1, 2], [0, 1]]
        assert batch.num_sampled_nodes == [1, 1, 1] and batch.num_sampled_edges == [1, 1]


def test_edge_level_temporal_sampling() -> None:
    edge_index = torch.tensor([[0, 1, 1, 2, 2, 3, 3, 4], [1, 0, 2, 1, 3, 2, 4, 3]])
    graph = Data(edge_index=edge_index, edge_time=torch.arange(8), num_nodes=5)
    loader = NeighborLoader(
        graph, [-1, -1], input_time=torch.full((5,), 4), time_attr="edge_time", batch_size=1
    )
    for batch in loader:
        assert batch.edge_time.numel() == batch.num_edges
        assert batch.num_edges == 0 or int(batch.edge_time.max()) <= 4
        assert torch.equal(batch.seed_time, torch.tensor([4]))


def test_node_level_temporal_sampling_is_disjoint(data: Data) -> None:
    graph = data.clone()
    graph.time = torch.randperm(graph.num_nodes, generator=torch.Generator().manual_seed(0))
    loader = NeighborLoader(graph, [-1, -1], time_attr="time", batch_size=16, seed=0)
    for batch in loader:
        seed_time = batch.time[: batch.batch_size]
        assert bool((batch.time <= seed_time[batch.batch]).all())
    with pytest.raises(ValueError, match="neither a node-level or edge-level"):
        NeighborLoader(graph, [2], time_attr="nope")
    with pytest.raises(ValueError, match="input_time needs time_attr"):
        NeighborLoader(graph, [2], input_time=torch.zeros(graph.num_nodes))


def test_temporal_neighbors_come_in_time_order_as_in_pyg() -> None:
    """PyG sorts each node's in-edges by time before temporal sampling (``sort_csc``), so with
    ``-1`` fanouts a seed's neighbors are numbered oldest first, whatever the edge order."""
    edge_index = torch.tensor([[5, 3, 4, 1], [0, 0, 0, 0]])
    time = torch.tensor([9, 3, 0, 3, 2, 1])
    edge_time = torch.tensor([7, 5, 6, 8])
    by_node = Data(edge_index=edge_index, time=time, num_nodes=6)
    batch = next(
        iter(NeighborLoader(by_node, [-1], input_nodes=torch.tensor([0]), time_attr="time"))
    )
    assert batch.n_id.tolist() == [0, 5, 4, 3, 1]  # times 1, 2, 3, 3 (the tie keeps edge order)
    by_edge = Data(edge_index=edge_index, edge_time=edge_time, num_nodes=6)
    loader = NeighborLoader(
        by_edge, [-1], input_nodes=torch.tensor([0]), input_time=torch.tensor([7]),
        time_attr="edge_time",
    )  # fmt: skip
    batch = next(iter(loader))
    assert batch.n_id.tolist() == [0, 3, 4, 5] and batch.edge_time.tolist() == [5, 6, 7]


def test_disjoint_batch_vector(data: Data) -> None:
    batch = next(iter(NeighborLoader(data, [3, 2], batch_size=8, disjoint=True, seed=1)))
    assert batch.batch.shape == (batch.num_nodes,)
    assert torch.equal(batch.batch[:8], torch.arange(8))
    src, dst = batch.edge_index
    assert torch.equal(batch.batch[src], batch.batch[dst])


def test_induced_subgraph_has_every_edge_among_sampled_nodes(data: Data) -> None:
    loader = NeighborLoader(data, [2, 2], batch_size=10, subgraph_type="induced", seed=2)
    batch = next(iter(loader))
    n_id = batch.n_id
    inside = torch.isin(data.edge_index[0], n_id) & torch.isin(data.edge_index[1], n_id)
    expected = _edge_set(data.edge_index[:, inside])
    assert _edge_set(n_id[batch.edge_index]) == expected
    assert batch.num_edges == int(inside.sum())
    assert torch.equal(data.edge_index[:, batch.e_id], n_id[batch.edge_index])
    assert batch.num_sampled_nodes is None if "num_sampled_nodes" in batch else True
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = next(iter(NeighborLoader(data, [2, 2], batch_size=10, directed=False, seed=2)))
    assert any("deprecated" in str(w.message) for w in caught)
    assert torch.equal(old.edge_index, batch.edge_index)
    with pytest.raises(ValueError, match="induced"):
        NeighborLoader(data, [2], subgraph_type="induced", disjoint=True)


def test_bidirectional_edges_are_undirected(data: Data) -> None:
    batch = next(iter(NeighborLoader(data, [3, 3], batch_size=20, subgraph_type="bidirectional")))
    assert is_undirected(batch.edge_index, num_nodes=batch.num_nodes)
    assert "num_sampled_nodes" not in batch
    with pytest.raises(ValueError, match="subgraph_type"):
        NeighborLoader(data, [2], subgraph_type="sideways")


def test_memmap_features_are_sliced(tmp_path: Path, data: Data) -> None:
    path = tmp_path / "x.npy"
    x = np.memmap(path, dtype=np.float32, mode="w+", shape=(data.num_nodes, 4))
    x[:] = np.arange(data.num_nodes * 4, dtype=np.float32).reshape(-1, 4)
    x.flush()
    graph = Data(edge_index=data.edge_index, num_nodes=data.num_nodes)
    graph.x = np.memmap(path, dtype=np.float32, mode="r", shape=(data.num_nodes, 4))
    batch = next(iter(NeighborLoader(graph, [3], batch_size=10, num_workers=2)))
    assert isinstance(batch.x, torch.Tensor)
    assert torch.equal(batch.x, torch.from_numpy(np.asarray(x))[batch.n_id])


def test_feature_and_graph_store_input(data: Data) -> None:
    feature_store, graph_store = MyFeatureStore(), MyGraphStore()
    feature_store.put_tensor(data.x, group_name=None, attr_name="x", index=None)
    size = (data.num_nodes, data.num_nodes)
    coo = (data.edge_index[0], data.edge_index[1])
    graph_store.put_edge_index(coo, edge_type=None, layout="coo", size=size)
    batch = next(iter(NeighborLoader((feature_store, graph_store), [3, 2], batch_size=10)))
    assert torch.equal(batch.x, data.x[batch.n_id])
    assert _edge_set(batch.n_id[batch.edge_index]) <= _edge_set(data.edge_index)


def test_hooks_call_sampler_and_filter_per_worker(data: Data) -> None:
    seen: list[int] = []

    def transform(batch: Data) -> Data:
        seen.append(batch.batch_size)
        batch.tag = 1
        return batch

    loader = NeighborLoader(data, [2], batch_size=30, transform=transform, seed=0)
    assert str(loader) == "NeighborLoader()"
    batches = list(loader)
    assert all(b.tag == 1 for b in batches) and seen == [b.batch_size for b in batches]
    single = loader([0, 5])
    assert single.n_id[:2].tolist() == [0, 5] and single.input_id.tolist() == [0, 5]
    late = list(NeighborLoader(data, [2], batch_size=30, seed=0, filter_per_worker=False))
    assert all(torch.equal(a.n_id, b.n_id) for a, b in zip(batches, late, strict=True))
    order = [9, 3, 7]
    by_sampler = list(NeighborLoader(data, [2], batch_size=2, sampler=order))
    assert torch.cat([b.input_id for b in by_sampler]).tolist() == order

    def drop_edges(out: Any) -> Any:
        out.row, out.col, out.edge = out.row[:0], out.col[:0], out.edge[:0]
        return out

    hooked = next(
        iter(NeighborLoader(data, [2], batch_size=4, transform_sampler_output=drop_edges))
    )
    assert hooked.num_edges == 0 and hooked.edge_attr.numel() == 0
    pinned = next(iter(NeighborLoader(data, [2], batch_size=4, pin_memory=True)))
    assert pinned.batch_size == 4  # no CUDA here: pin_memory is a no-op, as in torch


def test_refused_and_unknown_options_are_named(data: Data) -> None:
    with pytest.raises(TypeError, match="collate_fn"):
        NeighborLoader(data, [2], collate_fn=lambda b: b)
    with pytest.raises(TypeError, match="neighbor_sampler"):
        NeighborLoader(data, [2], neighbor_sampler=object())
    with pytest.raises(TypeError, match="heterogeneous"):
        NeighborLoader(data, {("a", "to", "a"): [2]})
    with pytest.raises(TypeError, match="node type"):
        NeighborLoader(data, [2], input_nodes=("paper", torch.arange(3)))
    with pytest.raises(ValueError, match="mutually exclusive"):
        NeighborLoader(data, [2], sampler=[0, 1], shuffle=True)
