"""``NeighborLoader(HeteroData)`` with PyG's options: temporal, disjoint, weighted, stores."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.data import HeteroData
from torch_geometric.testing import MyFeatureStore, MyGraphStore

from gnnsys.datasets.mag import synthetic_mag
from gnnsys.loader import NeighborLoader
from gnnsys.types import EdgeType
from gnnsys.types.relations import HeteroGraph

CITES: EdgeType = ("paper", "cites", "paper")
WRITES: EdgeType = ("author", "writes", "paper")


@pytest.fixture(scope="module")
def graph() -> HeteroGraph:
    return synthetic_mag(0.004, seed=1, reverse=True)


def small(graph: HeteroGraph) -> HeteroData:
    """Papers (features, ``time`` = year) and authors, citing and writing, as HeteroData."""
    full = graph.to_pyg()
    data = HeteroData()
    data["paper"].x = full["paper"].x[:, :8].contiguous()
    data["paper"].time = full["paper"].year
    data["author"].x = torch.randn(full["author"].num_nodes, 8, generator=torch.Generator())
    for edge_type in (CITES, WRITES):
        data[edge_type].edge_index = full[edge_type].edge_index
    return data


def test_temporal_trees_hold_no_paper_later_than_their_seed(graph: HeteroGraph) -> None:
    year = torch.from_numpy(graph.nodes["paper"].attrs["year"])
    loader = NeighborLoader(graph, [4, 3], input_nodes="paper", time_attr="year", batch_size=64)
    checked = 0
    for batch in loader:
        paper = batch["paper"]
        seeds = paper.n_id[: paper.batch_size]
        assert torch.equal(paper.batch[: paper.batch_size], torch.arange(paper.batch_size))
        assert bool((year[paper.n_id] <= year[seeds][paper.batch]).all())
        assert torch.equal(paper.year, year[paper.n_id])
        for src, rel, dst in batch.edge_types:  # every edge stays inside one tree
            row, col = batch[src, rel, dst].edge_index
            assert torch.equal(batch[src].batch[row], batch[dst].batch[col])
        checked += int(paper.n_id.numel())
    assert checked > graph.num_nodes("paper")  # disjoint trees repeat nodes


def test_hetero_data_and_stores_give_the_same_temporal_batches(graph: HeteroGraph) -> None:
    """The synthetic twin of PyG's ``test_temporal_custom_neighbor_loader_on_cora``, with the
    store's edges in a shuffled order: the loader sorts neighborhoods by time itself. Times are
    distinct, as in PyG's test: equal times keep the input's edge order (PyG's stable sort)."""
    data = small(graph)
    data["paper"].time = torch.randperm(data["paper"].num_nodes, generator=torch.Generator())
    feature_store, graph_store = MyFeatureStore(), MyGraphStore()
    for node_type in data.node_types:
        for key in ("x", "time"):
            if key in data[node_type]:
                feature_store.put_tensor(data[node_type][key], group_name=node_type,
                                         attr_name=key, index=None)  # fmt: skip
    gen = torch.Generator().manual_seed(0)
    for edge_type in data.edge_types:
        edge_index = data[edge_type].edge_index
        shuffled = edge_index[:, torch.randperm(edge_index.shape[1], generator=gen)]
        size = (data[edge_type[0]].num_nodes, data[edge_type[2]].num_nodes)
        graph_store.put_edge_index(shuffled, edge_type=edge_type, layout="coo", size=size)
    kwargs = dict(num_neighbors=[-1, -1], input_nodes="paper", time_attr="time", batch_size=128)
    loader1 = NeighborLoader(data, **kwargs)
    loader2 = NeighborLoader((feature_store, graph_store), **kwargs)
    assert len(loader1) == len(loader2) > 1
    for batch1, batch2 in zip(loader1, loader2, strict=True):
        assert torch.equal(batch1["paper"].time, batch2["paper"].time)
        assert torch.equal(batch1["paper"].n_id, batch2["paper"].n_id)
        # Authors have no time, so their order follows each input's edge order (as in PyG);
        # each tree still holds the same authors.
        keys1, keys2 = (b["author"].batch * 10**6 + b["author"].n_id for b in (batch1, batch2))
        assert torch.equal(keys1.sort().values, keys2.sort().values)


def test_edge_time_needs_input_time_and_filters_timed_relations(graph: HeteroGraph) -> None:
    data = small(graph)
    del data["paper"].time
    num_cites = data[CITES].num_edges
    data[CITES].time = torch.arange(num_cites) % 5
    with pytest.raises(ValueError, match="its seeds have no time; pass input_time"):
        NeighborLoader(data, [-1], input_nodes="paper", time_attr="time")
    seeds = torch.arange(40)
    loader = NeighborLoader(
        data, [-1], input_nodes=("paper", seeds), input_time=torch.full((40,), 1),
        time_attr="time", batch_size=40,
    )  # fmt: skip
    batch = next(iter(loader))
    assert bool((batch[CITES].time <= 1).all()) and batch[CITES].num_edges > 0
    assert torch.equal(batch["paper"].seed_time, torch.full((40,), 1))
    writes_ptr = graph.relations[WRITES].indptr
    want = int((writes_ptr[seeds.numpy() + 1] - writes_ptr[seeds.numpy()]).sum())
    assert batch[WRITES].num_edges == want  # untimed: every author of every seed


def test_disjoint_and_weighted_batches(graph: HeteroGraph) -> None:
    data = small(graph)
    batch = next(iter(NeighborLoader(data, [3, 2], input_nodes="paper", disjoint=True)))
    assert torch.equal(batch["paper"].batch[:1], torch.zeros(1, dtype=torch.int64))
    assert set(batch["author"].batch.tolist()) <= {0}
    weight = torch.zeros(data[CITES].num_edges)
    weight[::3] = 1.0
    data[CITES].w = weight
    loader = NeighborLoader(data, [2], input_nodes="paper", weight_attr="w", batch_size=512)
    degree = np.bincount(data[CITES].edge_index[1].numpy(), minlength=data["paper"].num_nodes)
    checked = 0
    for batch in loader:
        assert "batch" not in batch["paper"]  # weighted alone is not disjoint
        dst = batch["paper"].n_id[batch[CITES].edge_index[1]].numpy()
        many = degree[dst] > 2
        assert bool((batch[CITES].w[torch.from_numpy(many)] == 1).all())
        checked += int(many.sum())
    assert checked > 0


def test_bad_time_and_weight_attributes_are_named(graph: HeteroGraph) -> None:
    data = small(graph)
    with pytest.raises(ValueError, match="neither a node-level or edge-level"):
        NeighborLoader(data, [2], input_nodes="paper", time_attr="nope")
    data[CITES].time = torch.zeros(data[CITES].num_edges, dtype=torch.int64)
    with pytest.raises(ValueError, match="both as node-level and edge-level"):
        NeighborLoader(data, [2], input_nodes="paper", time_attr="time")
    with pytest.raises(ValueError, match="input_time needs time_attr"):
        NeighborLoader(data, [2], input_nodes="paper", input_time=torch.zeros(2946))
    with pytest.raises(ValueError, match="not an edge attribute of any type"):
        NeighborLoader(data, [2], input_nodes="paper", weight_attr="nope")
    with pytest.raises(ValueError, match="temporal_strategy"):
        NeighborLoader(data, [2], input_nodes="paper", temporal_strategy="first")


def test_bidirectional_relations_are_each_others_flips() -> None:
    """PyG's ``test_hetero_neighbor_loader_basic`` under ``subgraph_type='bidirectional'``:
    a relation's sampled edges and its reverse relation's are each other's flips (sorted)."""
    from torch_geometric.utils import sort_edge_index

    gen = torch.Generator().manual_seed(0)
    data = HeteroData()
    data["paper"].x = torch.arange(100)
    data["author"].x = torch.arange(100, 300)
    writes = torch.stack([torch.randint(0, 100, (1000,), generator=gen),
                          torch.randint(0, 200, (1000,), generator=gen)])  # fmt: skip
    data["paper", "to", "author"].edge_index = writes
    data["author", "to", "paper"].edge_index = writes.flip(0)
    data["paper", "to", "paper"].edge_index = torch.randint(0, 100, (2, 500), generator=gen)
    loader = NeighborLoader(data, [10, 10], input_nodes="paper", batch_size=20,
                            subgraph_type="bidirectional", seed=0)  # fmt: skip
    checked = 0
    for batch in loader:
        forward = batch["paper", "to", "author"].edge_index
        reverse = batch["author", "to", "paper"].edge_index
        assert forward.numel()
        assert torch.equal(forward, sort_edge_index(reverse.flip(0)))
        pp = batch["paper", "to", "paper"].edge_index  # a relation to itself: undirected
        pairs = set(map(tuple, pp.t().tolist()))
        assert pairs == {(b, a) for a, b in pairs}
        # every sampled edge is an edge of the graph (in both relations' global ids)
        p, a = batch["paper"].x, batch["author"].x - 100
        graph_pairs = set(map(tuple, writes.t().tolist()))
        assert {(int(p[i]), int(a[j])) for i, j in forward.t().tolist()} <= graph_pairs
        checked += 1
    assert checked == len(loader) == 5
