"""LinkNeighborLoader: PyG's link batches (labels, binary/triplet negatives, time) on gnnsys."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Data

from gnnsys.loader import LinkNeighborLoader
from gnnsys.types import Graph


@pytest.fixture(scope="module")
def data(tiny_graph: Graph) -> Data:
    out = tiny_graph.to_pyg()
    out.edge_attr = torch.arange(out.edge_index.shape[1])
    return out


def test_seed_links_map_back_and_neighbors_are_sampled(data: Data) -> None:
    loader = LinkNeighborLoader(data, [3, 2], batch_size=64, seed=0)
    assert str(loader) == "LinkNeighborLoader()" and len(loader) == -(-data.num_edges // 64)
    batch = next(iter(loader))
    assert torch.equal(batch.input_id, torch.arange(64))
    assert torch.equal(batch.n_id[batch.edge_label_index], data.edge_index[:, :64])
    assert torch.equal(batch.n_id[batch.edge_index], data.edge_index[:, batch.e_id])
    assert torch.equal(batch.edge_attr, data.edge_attr[batch.e_id])
    assert torch.equal(batch.x, data.x[batch.n_id])
    assert "edge_label" not in batch  # no labels given, no negatives asked for


def test_binary_negatives_and_label_shift(data: Data) -> None:
    labels = torch.randint(0, 3, (data.num_edges,), generator=torch.Generator().manual_seed(0))
    loader = LinkNeighborLoader(
        data, [2], batch_size=50, edge_label=labels, neg_sampling="binary", seed=1
    )
    batch = next(iter(loader))
    assert batch.edge_label_index.shape == (2, 100)
    assert torch.equal(batch.edge_label[:50], labels[:50] + 1)  # 0 now means "negative"
    assert torch.equal(batch.edge_label[50:], torch.zeros(50, dtype=labels.dtype))
    ratio = LinkNeighborLoader(data, [2], batch_size=10, neg_sampling_ratio=2.0)
    assert next(iter(ratio)).edge_label_index.shape == (2, 30)


@pytest.mark.parametrize("disjoint", [False, True])
def test_triplet_negatives(data: Data, disjoint: bool) -> None:
    loader = LinkNeighborLoader(
        data,
        [2, 2],
        batch_size=20,
        neg_sampling={"mode": "triplet", "amount": 3},
        disjoint=disjoint,
        seed=2,
    )
    batch = next(iter(loader))
    assert torch.equal(batch.n_id[batch.src_index], data.edge_index[0, batch.input_id])
    assert torch.equal(batch.n_id[batch.dst_pos_index], data.edge_index[1, batch.input_id])
    assert batch.dst_neg_index.shape == (20, 3)
    assert "edge_label_index" not in batch
    if disjoint:
        assert batch.src_index.tolist() == list(range(20))
        assert int(batch.batch.max()) == 19
    with pytest.raises(ValueError, match="triplet"):
        LinkNeighborLoader(data, [2], edge_label=torch.ones(data.num_edges), neg_sampling="triplet")


def test_temporal_links_respect_edge_label_time(data: Data) -> None:
    graph = data.clone()
    graph.time = torch.arange(graph.num_nodes)
    label_time = torch.maximum(graph.time[graph.edge_index[0]], graph.time[graph.edge_index[1]])
    loader = LinkNeighborLoader(
        graph, [-1], batch_size=32, time_attr="time", edge_label_time=label_time, seed=3
    )
    for i, batch in enumerate(loader):
        assert bool((batch.time <= batch.edge_label_time[batch.batch]).all())
        if i == 3:
            break
    with pytest.raises(ValueError, match="'edge_label_time' is not set"):
        LinkNeighborLoader(graph, [2], time_attr="time")


def test_no_hops_and_explicit_label_index(data: Data) -> None:
    pairs = torch.tensor([[0, 5, 7], [9, 5, 1]])
    loader = LinkNeighborLoader(Data(num_nodes=20), [], batch_size=3, edge_label_index=pairs)
    batch = next(iter(loader))
    assert batch.num_nodes == pairs.unique().numel() and batch.num_edges == 0
    with pytest.raises(ValueError, match="outside"):
        LinkNeighborLoader(data, [2], edge_label_index=torch.tensor([[0], [10**6]]))
    with pytest.raises(TypeError, match="edge type"):
        LinkNeighborLoader(data, [2], edge_label_index=("a", "to", "b"))


def test_link_batches_are_reproducible_and_worker_independent(data: Data) -> None:
    def neighbors(num_workers: int) -> list[torch.Tensor]:
        loader = LinkNeighborLoader(
            data, [3, 2], batch_size=40, shuffle=True, seed=5, num_workers=num_workers
        )
        return [b.n_id for b in loader]

    plain = neighbors(0)
    assert all(torch.equal(a, b) for a, b in zip(plain, neighbors(2), strict=True))
