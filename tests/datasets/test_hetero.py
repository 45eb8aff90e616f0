"""``HeteroGraph``: validation, PyG round trips, reverse relations, the global id space."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.data import HeteroData

from gnnsys.types.relations import HeteroGraph, NodeSet, relation_from_coo


def small_hetero(sorted_by_dst: bool = True) -> HeteroData:
    gen = torch.Generator().manual_seed(0)
    data = HeteroData()
    data["paper"].x = torch.randn(6, 4, generator=gen)
    data["paper"].y = torch.tensor([0, 1, 2, 0, 1, -1])
    data["paper"].year = torch.arange(2010, 2016)
    data["paper"].train_mask = torch.tensor([True, True, False, False, True, False])
    data["author"].num_nodes = 5
    for edge_type, (num_src, num_dst, num) in {
        ("author", "writes", "paper"): (5, 6, 12),
        ("paper", "cites", "paper"): (6, 6, 9),
    }.items():
        edge_index = torch.stack(
            [
                torch.randint(num_src, (num,), generator=gen),
                torch.randint(num_dst, (num,), generator=gen),
            ]
        )
        if sorted_by_dst:
            edge_index = edge_index[:, torch.argsort(edge_index[1], stable=True)]
        data[edge_type].edge_index = edge_index
    return data


def assert_same(a: HeteroData, b: HeteroData) -> None:
    assert a.node_types == b.node_types and a.edge_types == b.edge_types
    for node_type in a.node_types:
        assert a[node_type].num_nodes == b[node_type].num_nodes
        keys = {k for k in a[node_type].keys() if k != "num_nodes"}
        assert keys == {k for k in b[node_type].keys() if k != "num_nodes"}
        for key in keys:
            assert torch.equal(a[node_type][key], b[node_type][key]), (node_type, key)
    for edge_type in a.edge_types:
        assert torch.equal(a[edge_type].edge_index, b[edge_type].edge_index), edge_type


def test_round_trip_is_exact_for_dst_sorted_edges() -> None:
    data = small_hetero()
    graph = HeteroGraph.from_pyg(data)
    assert graph.node_types == ["paper", "author"]
    assert graph.nodes["paper"].attrs["year"].tolist() == list(range(2010, 2016))
    assert graph.relations[("author", "writes", "paper")].num_edges == 12
    assert_same(graph.to_pyg(), data)
    again = HeteroGraph.from_pyg(graph.to_pyg())  # record -> PyG -> record: identical arrays
    for edge_type, rel in graph.relations.items():
        assert np.array_equal(again.relations[edge_type].indptr, rel.indptr)
        assert np.array_equal(again.relations[edge_type].indices, rel.indices)


def test_round_trip_of_unsorted_edges_keeps_the_multiset_in_stable_order() -> None:
    data = small_hetero(sorted_by_dst=False)
    back = HeteroGraph.from_pyg(data).to_pyg()
    for edge_type in data.edge_types:
        edge_index = data[edge_type].edge_index
        expected = edge_index[:, torch.argsort(edge_index[1], stable=True)]
        assert torch.equal(back[edge_type].edge_index, expected)


def test_with_reverse_matches_pyg_to_undirected() -> None:
    from torch_geometric.transforms import ToUndirected

    data = small_hetero()
    ours = HeteroGraph.from_pyg(data).with_reverse().to_pyg()
    theirs = ToUndirected()(data.clone())
    assert set(ours.edge_types) == set(theirs.edge_types)
    for edge_type in theirs.edge_types:

        def key(ei: torch.Tensor) -> list[tuple[int, int]]:
            return sorted(zip(ei[0].tolist(), ei[1].tolist(), strict=True))

        assert key(ours[edge_type].edge_index) == key(theirs[edge_type].edge_index), edge_type


def test_global_id_space_matches_pyg_to_homogeneous() -> None:
    data = small_hetero()
    graph = HeteroGraph.from_pyg(data)
    assert graph.node_offsets() == {"paper": 0, "author": 6}
    homo, node_type_G = graph.to_homogeneous()
    pyg = data.to_homogeneous()
    assert homo.num_nodes == pyg.num_nodes == 11
    assert node_type_G.tolist() == pyg.node_type.tolist()
    expected = {tuple(e) for e in pyg.edge_index.t().tolist()}
    ours = set(zip(homo.indices.tolist(), homo.dst_of_edges().tolist(), strict=True))
    assert ours == expected


def test_validation_names_the_problem() -> None:
    with pytest.raises(ValueError, match="attrs\\['year'\\] has shape"):
        NodeSet(num_nodes=3, attrs={"year": np.zeros(2)})
    with pytest.raises(ValueError, match="source ids must lie"):
        relation_from_coo(np.array([3]), np.array([0]), 3, 2, dedup=False)
    rel = relation_from_coo(np.array([0, 1]), np.array([0, 1]), 2, 2, dedup=False)
    with pytest.raises(ValueError, match="unknown node type 'b'"):
        HeteroGraph(nodes={"a": NodeSet(num_nodes=2)}, relations={("a", "r", "b"): rel})
    with pytest.raises(ValueError, match="is 2 x 2 but the types have 3 and 2"):
        HeteroGraph(
            nodes={"a": NodeSet(num_nodes=3), "b": NodeSet(num_nodes=2)},
            relations={("a", "r", "b"): rel},
        )


def test_dedup_drops_repeats_and_sorts_rows() -> None:
    rel = relation_from_coo(np.array([2, 0, 2, 1]), np.array([1, 1, 1, 0]), 3, 2, dedup=True)
    assert rel.indptr.tolist() == [0, 1, 3] and rel.indices.tolist() == [1, 0, 2]
    assert rel.transposed().indptr.tolist() == [0, 1, 2, 3]
    assert rel.transposed().indices.tolist() == [1, 0, 1]
