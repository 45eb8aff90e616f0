"""GCN with whole-graph degrees in training: routed degree tables, PyG ``GCNConv`` equality.

The partitioned rank's ``RoutedDegreeSource`` must hold exactly the whole graph's in-degrees of
its owned and halo nodes (halo ones fetched once from their owners, counted in the ledger), and
a 2-layer full-neighbourhood GCN over sampled blocks must equal a PyG ``GCNConv`` stack with the
same weights on the whole graph, replicated or partitioned.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch_geometric.nn import GCNConv

from gnnsys.models import GCN
from gnnsys.partitioners import partition
from gnnsys.sampler import CSRNeighborSource, DegreeSource, DegreeTable, NeighborSampler
from gnnsys.store import load_book, read_shard, write_partitions
from gnnsys.train.remote.degrees import RoutedDegreeSource
from gnnsys.train.remote.ledger import Ledger
from gnnsys.train.remote.routed import RoutedNeighborSource
from gnnsys.types import ONE_RELATION, ONE_TYPE, Graph
from tests.train.conftest import LocalOwnerClient, rank_sources


def _routed(store: Path, part: int, ledger: Ledger) -> tuple[RoutedDegreeSource, Any]:
    """Part ``part``'s degree table as the runtime builds it (a homogeneous store's relation)."""
    book, shard = load_book(store), read_shard(store, part)
    client = LocalOwnerClient(store, book.num_parts)
    routed = RoutedDegreeSource.of_relation(shard, ONE_RELATION, book.part_N, client, ledger)
    return routed, client


@pytest.mark.parametrize("part", [0, 3])
def test_degree_table_equals_whole_graph(tiny_graph: Graph, store4: Path, part: int) -> None:
    ledger = Ledger()
    degrees, client = _routed(store4, part, ledger)
    nodes = read_shard(store4, part).nodes[ONE_TYPE]  # type-local ids: the gids
    known = np.concatenate([nodes.owned_lid, nodes.halo_lid]).astype(np.int64)
    got = degrees.in_degree(torch.from_numpy(known)).numpy()
    np.testing.assert_array_equal(got, tiny_graph.in_degree[known])
    assert degrees.table.num_entries == known.shape[0]
    # one call per owner of a halo node, 8 bytes per halo gid each way
    owners = set(np.unique(nodes.halo_part).tolist())
    snap = ledger.snapshot()
    assert snap.messages["structure_request"] == len(owners)
    assert snap.bytes["structure_request"] == 8 * nodes.halo_lid.shape[0]
    assert snap.bytes["structure_response"] == 8 * nodes.halo_lid.shape[0]
    assert sorted(p for kind, p in client.calls if kind == "degree") == sorted(owners)


def test_gids_beyond_the_halo_are_asked_of_their_owners(
    tiny_graph: Graph, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A 1-hop store under a 3-layer sampler: far nodes cost a call and stay exact."""
    root = tmp_path / "store1"
    write_partitions(tiny_graph, partition(tiny_graph, "random", 4, seed=1), root, num_hops=1)
    ledger = Ledger()
    degrees, client = _routed(root, 2, ledger)
    before = ledger.snapshot()
    book, shard = load_book(root), read_shard(root, 2)
    local = CSRNeighborSource.from_relation(shard, ONE_RELATION, book.lid_N)
    source = RoutedNeighborSource(2, book.part_N, local, client, Ledger(), edge_type=ONE_RELATION)
    sampler = NeighborSampler(
        NeighborSampler.Config(fanouts=(4, 3, 3)), source=source, degrees=degrees
    )
    owned = np.asarray(shard.nodes[ONE_TYPE].owned_lid, dtype=np.int64)
    sub = sampler.sample(torch.from_numpy(owned[:20]), seed=2)
    assert sub.blocks[0].src_in_degree is not None
    want = tiny_graph.in_degree[sub.n_id.numpy()]
    np.testing.assert_array_equal(sub.blocks[0].src_in_degree.numpy(), want)
    assert (ledger.snapshot() - before).bytes["structure_response"] > 0
    assert "beyond the store's halo" in caplog.text


def _pyg_stack(model: GCN, graph: Graph, x: torch.Tensor) -> torch.Tensor:
    """The same weights in two ``GCNConv`` layers on the whole graph (ReLU between)."""
    indeg = torch.from_numpy(graph.in_degree)
    dst = torch.repeat_interleave(torch.arange(graph.num_nodes), indeg)
    edge_index = torch.stack([torch.from_numpy(graph.indices.astype(np.int64)), dst])
    h = x
    for i, layer in enumerate(model.layers):
        conv = GCNConv(int(h.shape[1]), int(layer.lin.weight.shape[0]))
        conv.load_state_dict(layer.state_dict())
        h = conv(h, edge_index)
        if i < len(model.layers) - 1:
            h = torch.relu(h)
    return h


def _degree_sources(graph: Graph, store: Path) -> dict[str, tuple[DegreeSource, Any]]:
    book, shard = load_book(store), read_shard(store, 1)
    client = LocalOwnerClient(store, book.num_parts)
    local = CSRNeighborSource.from_relation(shard, ONE_RELATION, book.lid_N)
    return {
        "replicated": (DegreeTable.from_indptr(graph.indptr), CSRNeighborSource.from_graph(graph)),
        "partitioned": (
            RoutedDegreeSource.of_relation(shard, ONE_RELATION, book.part_N, client, Ledger()),
            RoutedNeighborSource(1, book.part_N, local, client, Ledger(), edge_type=ONE_RELATION),
        ),
    }


@torch.no_grad()
@pytest.mark.parametrize("topology", ["replicated", "partitioned"])
def test_full_neighbourhood_gcn_equals_pyg(tiny_graph: Graph, store4: Path, topology: str) -> None:
    torch.manual_seed(0)
    model = GCN(16, 12, 4, num_layers=2, dropout=0.0).eval()
    torch.nn.init.normal_(model.layers[0].bias)  # nonzero biases: they are compared too
    torch.nn.init.normal_(model.layers[1].bias)
    x = torch.from_numpy(tiny_graph.x).float()
    want = _pyg_stack(model, tiny_graph, x)
    degrees, source = _degree_sources(tiny_graph, store4)[topology]
    sampler = NeighborSampler(
        NeighborSampler.Config(fanouts=(-1, -1)), source=source, degrees=degrees
    )
    owned = read_shard(store4, 1).nodes[ONE_TYPE].owned_lid
    seeds = torch.from_numpy(np.asarray(owned[:50], dtype=np.int64))
    sub = sampler.sample(seeds, seed=0)
    got = model(x[sub.n_id], sub.blocks)
    err = float((got - want[seeds]).abs().max())
    assert err <= 1e-5, f"{topology}: max abs diff to PyG GCNConv {err:.3g}"
    local = NeighborSampler(NeighborSampler.Config(fanouts=(-1, -1)), source=source)
    stale = model(x[sub.n_id], local.sample(seeds, seed=0).blocks)  # block-local degrees
    assert float((stale - want[seeds]).abs().max()) > 1e-3  # what the degrees fix


def _worker_sampler(store: Path, rank: int, model: str, topology: str) -> tuple[Any, Any, Any]:
    """Rank ``rank``'s sampler as the runtime builds it, its ledger and its shard."""
    sources, ledger, shard = rank_sources(store, rank, model=model, topology=topology)
    return sources.sampler, ledger.of(ONE_TYPE), shard


@pytest.mark.parametrize(("model", "topology"), [("gcn", "partitioned"), ("gcn", "replicated")])
def test_worker_sampler_stamps_whole_graph_degrees(
    tiny_graph: Graph, store4: Path, model: str, topology: str
) -> None:
    sampler, ledger, shard = _worker_sampler(store4, 2, model, topology)
    fetched = ledger.snapshot().bytes["structure_response"]  # before any batch: the warm-up
    halo = len(shard.nodes[ONE_TYPE].halo_lid)  # one int64 degree per halo node, fetched once
    assert fetched == (8 * halo if topology == "partitioned" else 0)
    seeds = np.asarray(shard.nodes[ONE_TYPE].owned_lid, dtype=np.int64)[:30]
    sub = sampler.sample(torch.from_numpy(seeds), seed=1)
    for layer in sub.blocks:
        block = layer[ONE_RELATION]
        assert block.src_in_degree is not None
        want = tiny_graph.in_degree[sub.n_id[ONE_TYPE][: block.num_src].numpy()]
        np.testing.assert_array_equal(block.src_in_degree.numpy(), want)


def test_sage_workers_fetch_no_degrees(store4: Path) -> None:
    sampler, ledger, _ = _worker_sampler(store4, 0, "sage", "partitioned")
    assert ledger.snapshot().bytes["structure_request"] == 0
    sub = sampler.sample(torch.arange(5), seed=0)
    assert all(layer[ONE_RELATION].src_in_degree is None for layer in sub.blocks)
