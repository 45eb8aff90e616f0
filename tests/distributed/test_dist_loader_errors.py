"""``DistNeighborLoader`` refuses bad input with an error that names the value and the fix.

One process: a gloo group of world size 1 (``HashStore``), built and destroyed per test.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import distributed as dist

from gnnsys.distributed import DistNeighborLoader
from gnnsys.errors import PartitionStoreError
from gnnsys.partitioners import partition
from gnnsys.store import write_partitions


@pytest.fixture(scope="module")
def stores(tiny_graph, tmp_path_factory) -> dict[int, Path]:
    out = {}
    for parts in (1, 2):
        root = tmp_path_factory.mktemp(f"errs{parts}") / "store"
        assignment = partition(tiny_graph, "random", parts, seed=0)
        write_partitions(tiny_graph, assignment, root, num_hops=2)
        out[parts] = root
    return out


@pytest.fixture
def group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_a_loader_before_the_process_group_says_how_to_start_one(stores) -> None:
    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match="DistNeighborLoader.*init_process_group"):
        DistNeighborLoader(stores[1], [2, 2])


def test_a_store_with_other_parts_than_ranks_names_both_fixes(group, stores) -> None:
    with pytest.raises(ValueError, match=r"2 parts but the process group has 1 ranks.*--parts 1"):
        DistNeighborLoader(stores[2], [2, 2])


def test_ids_outside_the_graph_are_refused(group, stores) -> None:
    with pytest.raises(ValueError, match=r"outside \[0, 1000\)"):
        DistNeighborLoader(stores[1], [2, 2], input_nodes=torch.tensor([3, 1000]))
    with pytest.raises(ValueError, match="mask has 10 entries; need 1000"):
        DistNeighborLoader(stores[1], [2, 2], input_nodes=torch.zeros(10, dtype=torch.bool))


def test_a_homogeneous_store_refuses_a_node_type(group, stores) -> None:
    with pytest.raises(TypeError, match="homogeneous store"):
        DistNeighborLoader(stores[1], [2, 2], input_nodes=("paper", None))
    with pytest.raises(TypeError, match="dict of edge types"):
        DistNeighborLoader(stores[1], {("a", "b", "c"): [2]})


def test_a_typed_store_refuses_data_style_arguments(group, tmp_path) -> None:
    from gnnsys.datasets.mag import synthetic_mag
    from gnnsys.partitioners import partition_hetero
    from gnnsys.store import write_partitions

    mag = synthetic_mag(0.002, reverse=True)
    store = tmp_path / "typed"
    write_partitions(mag, partition_hetero(mag, "random", 1, 0), store, num_hops=2)
    with pytest.raises(TypeError, match=r"typed store \(node types .*'paper'.*input_nodes='type'"):
        DistNeighborLoader(store, [2, 2], input_nodes=torch.arange(5))
    with pytest.raises(ValueError, match="node type 'papers'; the store's types"):
        DistNeighborLoader(store, [2, 2], input_nodes="papers")
    with pytest.raises(ValueError, match="every relation of the store, exactly; missing"):
        DistNeighborLoader(store, {("paper", "cites", "paper"): [2, 2]}, input_nodes="paper")


def test_bad_settings_name_the_value(group, stores) -> None:
    for kwargs, pattern in (
        ({"batch_size": 0}, "batch_size=0"),
        ({"num_workers": -1}, "num_workers=-1"),
        ({"schedule": "min"}, "schedule='min'"),
        ({"codec": "int3"}, "int3"),
        ({"drop_last": True, "batch_size": 10**6}, "fewer than batch_size=1000000"),
    ):
        with pytest.raises(ValueError, match=pattern):
            DistNeighborLoader(stores[1], [2, 2], **kwargs)
    with pytest.raises(ValueError, match="num_neighbors must be >= -1"):
        DistNeighborLoader(stores[1], [2, -3])
    with pytest.raises(FileNotFoundError, match="is not a directory"):
        DistNeighborLoader(stores[1].parent / "nowhere", [2, 2])


def test_a_store_whose_checksum_fails_is_named(group, stores, tmp_path) -> None:
    copy = tmp_path / "store"
    shutil.copytree(stores[1], copy)
    x = next(copy.rglob("x.npy"))
    data = bytearray(x.read_bytes())
    data[-1] ^= 0xFF
    x.write_bytes(bytes(data))
    with pytest.raises(PartitionStoreError, match="x.npy"):
        DistNeighborLoader(copy, [2, 2])
    assert np.load(stores[1] / x.relative_to(copy), allow_pickle=False).shape[0] == 1000


def test_link_loader_refuses_bad_links_with_the_fix(group, stores) -> None:
    from gnnsys.distributed import DistLinkNeighborLoader

    with pytest.raises(ValueError, match=r"row 1 has ids outside \[0, 1000\)"):
        DistLinkNeighborLoader(stores[1], [2], edge_label_index=torch.tensor([[0, 1], [2, 1000]]))
    with pytest.raises(ValueError, match=r"must be \[2, L\]"):
        DistLinkNeighborLoader(stores[1], [2], edge_label_index=torch.zeros(3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="undefined for 'triplet'"):
        DistLinkNeighborLoader(
            stores[1], [2], edge_label_index=torch.tensor([[0], [1]]),
            edge_label=torch.ones(1), neg_sampling="triplet",
        )  # fmt: skip
    with pytest.raises(ValueError, match="edge_label has 2 entries; need 1"):
        DistLinkNeighborLoader(
            stores[1], [2], edge_label_index=torch.tensor([[0], [1]]), edge_label=torch.ones(2)
        )
    with pytest.raises(TypeError, match="names an edge type, but .* homogeneous store"):
        DistLinkNeighborLoader(stores[1], [2], edge_label_index=("a", "to", "b"))


def test_link_loader_on_one_rank_yields_every_edge_once(group, stores, tiny_graph) -> None:
    from gnnsys.distributed import DistLinkNeighborLoader

    loader = DistLinkNeighborLoader(stores[1], [2, 2], batch_size=1000, shuffle=True)
    assert len(loader) == -(-int(tiny_graph.num_edges) // 1000)
    got = torch.cat([b.n_id[b.edge_label_index] for b in loader], dim=1)
    assert got.shape[1] == tiny_graph.num_edges
    assert "DistLinkNeighborLoader(" in repr(loader)


def test_finished_collectives_stay_with_python_not_the_gloo_thread(group) -> None:
    """The last reference of a finished work is Python's (``metrics._RETIRED``), so gloo's
    worker thread never frees its tensors while the exit joins it with the GIL held."""
    from gnnsys.distributed import metrics

    metrics._check_group()  # every entry point checks the group first
    work = dist.all_reduce(torch.ones(2), async_op=True)
    metrics._wait(work, "test all_reduce", 10.0)
    assert metrics._RETIRED[-1] is work
    assert metrics._RETIRED.maxlen == 16
    assert metrics._HELD == [dist.group.WORLD]  # not freed last by DDP's reducer


def test_bad_layer0_opt_ins_name_the_fix(group, stores, tiny_graph) -> None:
    from torch_geometric.nn.models import GCN

    from gnnsys.models.pyg_user import HopTrimmed

    with pytest.raises(
        ValueError, match=r"layer0='sums'; choose one of \('rows', 'owner', 'fused'"
    ):
        DistNeighborLoader(stores[1], [2, 2], layer0="sums")
    with pytest.raises(ValueError, match="pass codec='int8' or 'int4', not 'fp32'"):
        DistNeighborLoader(stores[1], [2, 2], layer0="fused")
    batch = next(iter(DistNeighborLoader(stores[1], [2, 2], batch_size=8, layer0="owner")))
    model = HopTrimmed(GCN(16, 8, num_layers=2))
    with pytest.raises(ValueError, match=r"SAGEConv\(aggr='mean'\) layer 0.*layer0='rows'"):
        model(batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges,
              agg0=batch.agg0)  # fmt: skip
