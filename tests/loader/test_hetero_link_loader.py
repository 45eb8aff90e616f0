"""``LinkNeighborLoader`` on heterogeneous graphs: PyG's fields, negatives, time, ``to_hetero``."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.data import HeteroData
from torch_geometric.nn import SAGEConv, to_hetero

from gnnsys.datasets.mag import synthetic_mag
from gnnsys.loader import LinkNeighborLoader
from gnnsys.loader.hetero_link_loader import TypedLinkSeeds
from gnnsys.types import EdgeType
from gnnsys.types.relations import HeteroGraph

WRITES: EdgeType = ("author", "writes", "paper")
CITES: EdgeType = ("paper", "cites", "paper")


def test_induced_link_batches_hold_every_edge_among_their_nodes(graph: HeteroGraph) -> None:
    data = graph.to_pyg()
    loader = LinkNeighborLoader(data, [2, 2], edge_label_index=CITES, batch_size=40,
                                subgraph_type="induced", seed=1)  # fmt: skip
    batch = next(iter(loader))
    for edge_type in data.edge_types:
        src, dst = batch[edge_type[0]].n_id, batch[edge_type[2]].n_id
        full = data[edge_type].edge_index
        inside = torch.isin(full[0], src) & torch.isin(full[1], dst)
        assert batch[edge_type].edge_index.shape[1] == int(inside.sum())
        assert torch.equal(
            full[:, batch[edge_type].e_id],
            torch.stack([src[batch[edge_type].edge_index[0]], dst[batch[edge_type].edge_index[1]]]),
        )


@pytest.fixture(scope="module")
def graph() -> HeteroGraph:
    return synthetic_mag(0.004, seed=2, reverse=True)


def pairs(edge_index: torch.Tensor) -> set[tuple[int, int]]:
    return set(map(tuple, edge_index.t().tolist()))


def test_binary_batches_carry_pyg_fields_and_true_links(graph: HeteroGraph) -> None:
    data = graph.to_pyg()
    loader = LinkNeighborLoader(
        data, [3, 2], edge_label_index=("author", "paper"), batch_size=64, shuffle=True,
        neg_sampling_ratio=1.0, seed=0,
    )  # fmt: skip
    assert type(loader) is LinkNeighborLoader and str(loader) == "LinkNeighborLoader()"
    assert isinstance(loader.seeds, TypedLinkSeeds)
    everything = data[WRITES].edge_index
    assert len(loader) == -(-everything.shape[1] // 64)
    batch = next(iter(loader))
    store = batch[WRITES]
    assert store.edge_label_index.shape == (2, 128) and torch.equal(
        store.edge_label, torch.cat([torch.ones(64), torch.zeros(64)])
    )
    src = batch["author"].n_id[store.edge_label_index[0]]
    dst = batch["paper"].n_id[store.edge_label_index[1]]
    positives = torch.stack([src[:64], dst[:64]])
    assert torch.equal(positives, everything[:, store.input_id])
    assert pairs(positives) <= pairs(everything)
    for et in batch.edge_types:  # every sampled edge exists and e_id names it
        s, _, d = et
        got = torch.stack(
            [batch[s].n_id[batch[et].edge_index[0]], batch[d].n_id[batch[et].edge_index[1]]]
        )
        assert torch.equal(got, data[et].edge_index[:, batch[et].e_id]), et


def test_triplet_disjoint_places_seeds_first(graph: HeteroGraph) -> None:
    data = graph.to_pyg()
    links = data[CITES].edge_index[:, :200]
    loader = LinkNeighborLoader(
        data, [2, 2], edge_label_index=(CITES, links), batch_size=20, disjoint=True,
        neg_sampling=dict(mode="triplet", amount=2),
    )  # fmt: skip
    for batch in loader:
        paper = batch["paper"]
        assert torch.equal(paper.src_index, torch.arange(20))
        assert torch.equal(paper.dst_pos_index, torch.arange(20, 40))
        assert paper.dst_neg_index.shape == (20, 2) and int(paper.dst_neg_index.min()) == 40
        input_id = batch[CITES].input_id
        assert torch.equal(paper.n_id[paper.src_index], links[0, input_id])
        assert torch.equal(paper.n_id[paper.dst_pos_index], links[1, input_id])
        assert torch.equal(paper.batch[:80], torch.arange(20).repeat(4))
        assert int(batch["author"].batch.max()) < 20


def test_temporal_links_see_nothing_later_than_the_link(graph: HeteroGraph) -> None:
    """Triplet negatives, as PyG's temporal link tests check: tree ``p`` (any endpoint) is
    link ``p % B``'s, and its nodes are no later than that link's time."""
    data = graph.to_pyg()
    data["paper"].time = data["paper"].year
    links = data[CITES].edge_index
    when = torch.maximum(data["paper"].time[links[0]], data["paper"].time[links[1]])
    loader = LinkNeighborLoader(
        data, [4, 3], edge_label_index=(CITES, links), edge_label_time=when, time_attr="time",
        batch_size=32, neg_sampling=dict(mode="triplet", amount=1), drop_last=True,
    )  # fmt: skip
    checked = 0
    for i, batch in enumerate(loader):
        paper = batch["paper"]
        assert torch.equal(paper.seed_time, when[batch[CITES].input_id])
        assert bool((paper.time <= paper.seed_time[paper.batch]).all())
        checked += int(paper.n_id.numel())
        if i == 3:
            break
    assert checked > 4 * 3 * 32  # seeds and their neighbors
    with pytest.raises(ValueError, match="'edge_label_time' is not set"):
        LinkNeighborLoader(data, [2], edge_label_index=CITES, time_attr="time")


def test_hetero_graph_input_and_errors(graph: HeteroGraph) -> None:
    loader = LinkNeighborLoader(graph, [2], edge_label_index=WRITES, batch_size=100)
    rel = graph.relations[WRITES]
    batch = next(iter(loader))
    src = batch["author"].n_id[batch[WRITES].edge_label_index[0]]
    assert torch.equal(src, torch.from_numpy(rel.indices[:100]).long())  # edge-id order
    with pytest.raises(ValueError, match="names"):
        LinkNeighborLoader(graph, [2], edge_label_index=("venue", "paper"))
    with pytest.raises(ValueError, match="no edges to take as seed links"):
        LinkNeighborLoader(graph, [2], edge_label_index=("paper", "likes", "paper"))
    with pytest.raises(ValueError, match="outside"):
        LinkNeighborLoader(graph, [2], edge_label_index=(CITES, torch.tensor([[0], [10**6]])))
    with pytest.raises(ValueError, match="induced"):
        LinkNeighborLoader(
            graph, [2], edge_label_index=CITES, subgraph_type="induced", disjoint=True
        )
    with pytest.raises(TypeError, match="needs an edge type"):
        LinkNeighborLoader(graph, [2], edge_label_index="writes")


class SAGE(torch.nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.conv1 = SAGEConv((-1, -1), hidden)
        self.conv2 = SAGEConv((-1, -1), hidden)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


def test_to_hetero_link_model_learns_from_gnnsys_batches(graph: HeteroGraph) -> None:
    """PyG's heterogeneous link-prediction recipe, unchanged but for the loader's import."""
    torch.manual_seed(0)
    data: HeteroData = graph.to_pyg()
    data["paper"].x = data["paper"].x[:, :16].contiguous()
    for node_type in data.node_types:
        if "x" not in data[node_type]:
            data[node_type].x = torch.randn(data[node_type].num_nodes, 16)
    model = to_hetero(SAGE(16), data.metadata(), aggr="sum")
    with torch.no_grad():
        model(data.x_dict, data.edge_index_dict)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loader = LinkNeighborLoader(
        data, [5, 3], edge_label_index=CITES, batch_size=256, shuffle=True,
        neg_sampling_ratio=1.0, seed=0,
    )  # fmt: skip
    losses = []
    for _ in range(3):
        for batch in loader:
            optimizer.zero_grad()
            h = model(batch.x_dict, batch.edge_index_dict)["paper"]
            index = batch[CITES].edge_label_index
            logits = (h[index[0]] * h[index[1]]).sum(-1)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(
                logits, batch[CITES].edge_label
            )
            loss.backward()
            optimizer.step()
            losses.append(float(loss))
    first, last = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
    assert last < first - 0.05, (first, last)
