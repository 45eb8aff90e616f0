"""Heterogeneous partition store: round trip, checksums, semantics, readers refuse each other."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gnnsys.datasets import load_hetero
from gnnsys.errors import PartitionStoreError
from gnnsys.partitioners import partition_hetero
from gnnsys.store import (
    assemble_hetero,
    is_hetero_store,
    load_shard,
    read_shard,
    verify,
    write_partitions,
)
from gnnsys.store.integrity import clear_caches
from gnnsys.types.relations import HeteroGraph


@pytest.fixture(scope="module")
def mag() -> HeteroGraph:
    return load_hetero("synthetic:mag", scale=0.003, reverse=True, seed=2)


@pytest.fixture
def store(tmp_path: Path, mag: HeteroGraph) -> Path:
    clear_caches()
    root = tmp_path / "st"
    write_partitions(mag, partition_hetero(mag, "metis", 3), root, num_hops=2)
    return root


def assert_same_graph(a: HeteroGraph, b: HeteroGraph) -> None:
    assert a.node_types == b.node_types and a.edge_types == b.edge_types
    assert a.name == b.name and a.num_classes == b.num_classes
    for t in a.node_types:
        left, right = a.nodes[t].arrays(), b.nodes[t].arrays()
        assert list(left) == list(right), t
        for key, value in left.items():
            assert value.dtype == right[key].dtype and np.array_equal(value, right[key]), (t, key)
    for et, rel in a.relations.items():
        other = b.relations[et]
        assert rel.indices.dtype == other.indices.dtype, et
        assert np.array_equal(rel.indptr, other.indptr) and np.array_equal(
            rel.indices, other.indices
        ), et


@pytest.mark.parametrize("method", ["metis", "fennel", "hash"])
def test_round_trip_is_exact(tmp_path: Path, mag: HeteroGraph, method: str) -> None:
    root = tmp_path / method
    write_partitions(mag, partition_hetero(mag, method, 4), root, num_hops=1)
    assert verify(root).num_nodes == mag.num_nodes()
    assert_same_graph(mag, assemble_hetero(root))


def test_shard_contents(store: Path, mag: HeteroGraph) -> None:
    part_N = partition_hetero(mag, "metis", 3).part_N
    offsets = mag.node_offsets()
    for p in range(3):
        shard = read_shard(store, p)
        for t, nodes in shard.nodes.items():
            want = np.flatnonzero(part_N[offsets[t] : offsets[t] + mag.num_nodes(t)] == p)
            assert np.array_equal(nodes.owned_lid, want)
            assert np.all(part_N[nodes.halo_lid + offsets[t]] == nodes.halo_part)
            assert not np.any(nodes.halo_part == p)
        for (src, _, dst), edges in shard.relations.items():
            table = np.concatenate([shard.nodes[src].owned_lid, shard.nodes[src].halo_lid])
            assert np.array_equal(table[edges.indices_local], edges.indices_lid)
            rel = mag.relations[(src, _, dst)]
            assert np.array_equal(rel.indices[edges.e_id], edges.indices_lid)


def test_manifest_lists_types_relations_widths(store: Path, mag: HeteroGraph) -> None:
    obj = json.loads((store / "manifest.json").read_text())
    assert (obj["format"], obj["format_version"], obj["kind"]) == ("gnnsys", 3, "typed")
    assert [t["name"] for t in obj["node_types"]] == mag.node_types
    paper = obj["node_types"][0]
    assert paper["data"]["x"] == {"dtype": "<f4", "row_shape": [128]}
    assert "attr-year" in paper["data"]
    assert [tuple(r["edge_type"]) for r in obj["relations"]] == mag.edge_types
    assert all(f["xxh3"] and f["sha256"] for f in obj["files"].values())


def _flip_byte(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0xFF
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize(
    "rel", ["part-1/nodes/paper/x.npy", "part-0/rels/paper__cites__paper/indices_lid.npy"]
)
def test_corruption_is_detected_naming_the_file(store: Path, rel: str) -> None:
    read_shard(store, 0)  # warm the per-process checksum cache: it must not hide the flip
    read_shard(store, 1)
    _flip_byte(store / rel)
    part = int(rel.split("/")[0].removeprefix("part-"))
    with pytest.raises(PartitionStoreError, match="checksum mismatch") as err:
        read_shard(store, part)
    assert rel in str(err.value)
    with pytest.raises(PartitionStoreError, match="mismatch") as err:
        verify(store)
    assert rel in str(err.value)


def test_edited_manifest_is_refused(store: Path) -> None:
    obj = json.loads((store / "manifest.json").read_text())
    obj["num_hops"] = 5
    (store / "manifest.json").write_text(json.dumps(obj))
    with pytest.raises(PartitionStoreError, match="manifest checksum mismatch"):
        read_shard(store, 0)


def test_readers_refuse_the_other_kind(store: Path) -> None:
    with pytest.raises(PartitionStoreError, match="read_shard"):
        load_shard(store, 0)
    with pytest.raises(PartitionStoreError, match="out of range"):
        read_shard(store, 3)


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        ({"format": "gnnsys-hetero", "format_version": 1}, "an earlier store format"),
        ({"format_version": 2}, "an earlier store format"),
        ({"format_version": 4}, "an unknown store format"),
        ({"kind": "other"}, "kind 'other'"),
    ],
)
def test_other_formats_are_refused_naming_the_fix(
    store: Path, tmp_path: Path, edit: dict[str, object], named: str
) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(store, copy)
    obj = json.loads((copy / "manifest.json").read_text())
    (copy / "manifest.json").write_text(json.dumps(obj | edit))
    for read in (lambda: read_shard(copy, 0), lambda: load_shard(copy, 0)):
        with pytest.raises(PartitionStoreError, match=named) as err:
            read()
        assert "gnnsys partition" in str(err.value)


def test_a_homogeneous_store_reads_as_its_one_type(tmp_path: Path) -> None:
    """One format: the typed reader reads a homogeneous store as type ``node``, relation
    ``node__to__node``, the same arrays at no copy."""
    from gnnsys.datasets.synthetic import sbm
    from gnnsys.partitioners import partition
    from gnnsys.store import read_store_manifest, write_partitions

    graph = sbm(300, 4, num_features=8, seed=1)
    root = tmp_path / "one"
    write_partitions(graph, partition(graph, "random", 2, seed=0), root, num_hops=2)
    manifest = read_store_manifest(root)
    assert manifest.kind == "homogeneous" and not is_hetero_store(root)
    assert [t.name for t in manifest.node_types] == ["node"]
    assert [r.edge_type for r in manifest.relations] == [("node", "to", "node")]
    for part in range(2):
        one, typed = load_shard(root, part), read_shard(root, part)
        nodes, edges = typed.nodes["node"], typed.relations[("node", "to", "node")]
        assert np.array_equal(one.owned_gid, nodes.owned_lid)
        assert np.array_equal(one.halo_gid, nodes.halo_lid)
        assert np.array_equal(one.x, nodes.data["x"]) and np.array_equal(one.y, nodes.data["y"])
        for a, b in ((one.indptr, edges.indptr), (one.indices_gid, edges.indices_lid)):
            assert np.array_equal(a, b)
        assert np.array_equal(one.indices_local, edges.indices_local)
    assert verify(root).kind == "homogeneous"


def test_writer_errors(tmp_path: Path, mag: HeteroGraph, store: Path) -> None:
    a = partition_hetero(mag, "random", 2)
    with pytest.raises(ValueError, match="already exists"):
        write_partitions(mag, a, store)
    with pytest.raises(ValueError, match="num_hops"):
        write_partitions(mag, a, tmp_path / "x", num_hops=0)
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())
