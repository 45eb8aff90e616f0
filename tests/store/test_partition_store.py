from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from shard_reference import whole_shard
from store_mutations import edit_manifest, rewrite_array

from gnnsys.errors import PartitionStoreError
from gnnsys.partitioners import partition
from gnnsys.partitioners.halo import halo_of_part
from gnnsys.store import (
    integrity,
    load_book,
    load_partition,
    load_shard,
    read_manifest,
    verify,
    write_partitions,
)
from gnnsys.store import writer as writer_mod
from gnnsys.store.layout import shard_file
from gnnsys.types import Graph, PartitionBook

P = 3


@pytest.fixture(scope="module")
def store(tiny_graph: Graph, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("store") / "parts"
    write_partitions(tiny_graph, partition(tiny_graph, "metis", P, seed=0), root, num_hops=2)
    return root


@pytest.fixture()
def copy(store: Path, tmp_path: Path) -> Path:
    import shutil

    dst = tmp_path / "copy"
    shutil.copytree(store, dst)
    return dst


def test_round_trip_exact(tiny_graph: Graph, store: Path) -> None:
    a = partition(tiny_graph, "metis", P, seed=0)
    book = load_book(store)
    np.testing.assert_array_equal(book.part_N, a.part_N)
    ref = PartitionBook.from_assignment(a.part_N, P)
    np.testing.assert_array_equal(book.lid_N, ref.lid_N)
    for p in range(P):
        shard = load_shard(store, p)
        mem = whole_shard(tiny_graph, ref, p, 2)
        for key in ("owned_gid", "indptr", "indices_gid", "indices_local", "e_id", "halo_gid"):
            np.testing.assert_array_equal(getattr(shard, key), getattr(mem, key), err_msg=key)
        for key in ("x", "y", "train_mask", "val_mask", "test_mask"):
            np.testing.assert_array_equal(
                getattr(shard, key), getattr(tiny_graph, key)[shard.owned_gid], err_msg=key
            )
        assert isinstance(shard.x, np.memmap)
        assert shard.num_parts == P and shard.num_nodes == tiny_graph.num_nodes


@pytest.mark.parametrize("part", range(P))
def test_shard_keeps_global_csr_order(tiny_graph: Graph, store: Path, part: int) -> None:
    shard = load_shard(store, part, mmap=False)
    assert np.all(np.diff(shard.owned_gid) > 0)
    for lid, v in enumerate(shard.owned_gid):
        lo, hi = tiny_graph.indptr[v], tiny_graph.indptr[v + 1]
        seg = slice(shard.indptr[lid], shard.indptr[lid + 1])
        np.testing.assert_array_equal(shard.indices_gid[seg], tiny_graph.indices[lo:hi])
        np.testing.assert_array_equal(shard.e_id[seg], np.arange(lo, hi))
    local_to_gid = np.concatenate([shard.owned_gid, shard.halo_gid])
    np.testing.assert_array_equal(local_to_gid[shard.indices_local], shard.indices_gid)
    book = load_book(store)
    np.testing.assert_array_equal(shard.halo_part, book.part_N[shard.halo_gid])
    assert np.all(shard.halo_part != part)
    np.testing.assert_array_equal(shard.halo_gid, halo_of_part(tiny_graph, book.part_N, part, 2))


def test_manifest_contents(tiny_graph: Graph, store: Path) -> None:
    m = verify(store)
    assert (m.num_nodes, m.num_edges, m.num_parts, m.num_hops) == (1000, tiny_graph.num_edges, P, 2)
    assert m.strategy == "metis" and m.seed == 0 and m.dataset == tiny_graph.name
    assert m.params["balance"] == ["nodes"]
    assert sum(p.num_owned["node"] for p in m.parts) == 1000
    assert sum(p.num_edges["node__to__node"] for p in m.parts) == tiny_graph.num_edges
    assert shard_file(0, "x") in m.files and m.files[shard_file(0, "x")].dtype == "<f4"
    assert m.kind == "homogeneous" and read_manifest(store).store_manifest() == m


def test_existing_target_and_overwrite(tiny_graph: Graph, copy: Path) -> None:
    a = partition(tiny_graph, "range", 2)
    with pytest.raises(ValueError, match="already exists"):
        write_partitions(tiny_graph, a, copy)
    write_partitions(tiny_graph, a, copy, overwrite=True)
    assert read_manifest(copy).num_parts == 2
    assert not (copy / "part-2").exists()
    assert [p.name for p in copy.parent.iterdir()] == ["copy"]


def test_failed_write_leaves_nothing(
    tiny_graph: Graph, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(*args: object) -> None:
        raise RuntimeError("disk full")

    monkeypatch.setattr(writer_mod, "_write_part", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        write_partitions(tiny_graph, partition(tiny_graph, "range", 2), tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_bad_write_arguments(tiny_graph: Graph, tmp_path: Path) -> None:
    a = partition(tiny_graph, "range", 2)
    with pytest.raises(ValueError, match="num_hops=0"):
        write_partitions(tiny_graph, a, tmp_path / "x", num_hops=0)
    small = Graph(indptr=np.zeros(4, dtype=np.int64), indices=np.zeros(0, np.int32), num_nodes=3)
    with pytest.raises(ValueError, match="covers 1000 nodes"):
        write_partitions(small, a, tmp_path / "x")


def test_graph_without_data(tmp_path: Path) -> None:
    g = Graph.from_edge_index(np.array([[0, 1, 2], [1, 2, 3]]), 4, symmetric=True)
    write_partitions(g, partition(g, "range", 2), tmp_path / "s", num_hops=1)
    shard = load_shard(tmp_path / "s", 1)
    assert shard.x is None and shard.y is None
    assert shard.owned_gid.tolist() == [2, 3] and shard.halo_gid.tolist() == [1]
    assert shard.indices_local.tolist() == [2, 1, 0]  # 2's sources 1 (halo), 3; 3's source 2
    verify(tmp_path / "s")


# ---- corruption: every case raises PartitionStoreError naming the file and the fix --------


def _rewrite_manifest(root: Path, edit: object) -> None:
    path = root / "manifest.json"
    obj = json.loads(path.read_text())
    edit(obj)  # type: ignore[operator]
    path.write_text(json.dumps(obj))


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


CORRUPTIONS = {
    "missing_file": (shard_file(1, "indptr"), lambda r: (r / shard_file(1, "indptr")).unlink()),
    "missing_manifest": ("manifest.json", lambda r: (r / "manifest.json").unlink()),
    "truncated": (
        shard_file(1, "indices_gid"),
        lambda r: _truncate(r / shard_file(1, "indices_gid")),
    ),
    "wrong_dtype": (
        shard_file(1, "owned_gid"),
        lambda r: np.save(
            r / shard_file(1, "owned_gid"), np.load(r / shard_file(1, "owned_gid")).astype(np.int32)
        ),
    ),
    "wrong_shape": (
        shard_file(1, "halo_gid"),
        lambda r: np.save(
            r / shard_file(1, "halo_gid"), np.load(r / shard_file(1, "halo_gid"))[:-1]
        ),
    ),
    "not_json": ("manifest.json", lambda r: (r / "manifest.json").write_text("{oops")),
    "unknown_version": (
        "manifest.json",
        lambda r: _rewrite_manifest(r, lambda o: o.update(format_version=99)),
    ),
    "unknown_key": ("manifest.json", lambda r: _rewrite_manifest(r, lambda o: o.update(extra=1))),
    "missing_key": ("manifest.json", lambda r: _rewrite_manifest(r, lambda o: o.pop("seed"))),
    "checksum": (shard_file(1, "x"), lambda r: _flip_last_byte(r / shard_file(1, "x"))),
    "halo_part_out_of_range": (
        shard_file(1, "halo_part"),
        lambda r: np.save(
            r / shard_file(1, "halo_part"), np.full_like(np.load(r / shard_file(1, "halo_part")), 7)
        ),
    ),
}


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_corruption_raises_named_error(copy: Path, case: str) -> None:
    rel, corrupt = CORRUPTIONS[case]
    corrupt(copy)
    with pytest.raises(PartitionStoreError) as info:
        verify(copy)
    msg = str(info.value)
    assert rel in msg and "gnnsys partition" in msg, msg
    assert info.value.path.endswith(rel)


def test_cheap_checks_on_load(copy: Path) -> None:
    np.save(copy / shard_file(1, "owned_gid"), np.zeros(3, dtype=np.int64))
    with pytest.raises(PartitionStoreError, match=shard_file(1, "owned_gid")):
        load_shard(copy, 1)
    load_shard(copy, 0)  # other parts still load


def test_node_to_part_out_of_range(copy: Path) -> None:
    part_N = np.load(copy / "node_to_part.npy")
    part_N[5] = P
    rewrite_array(copy, "node_to_part.npy", part_N)  # checksums updated: only semantics catch it
    with pytest.raises(PartitionStoreError, match="node_to_part.npy: part id out of range"):
        load_book(copy)


@pytest.mark.parametrize("block", [5, 1 << 22])
def test_book_is_mapped_from_the_store(
    tiny_graph: Graph, store: Path, block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``node_lid.npy`` holds the book's lids; both arrays are read-only maps (shared pages).

    The check reads blocks of nodes with running per-part counts (5: many blocks)."""
    monkeypatch.setattr(integrity, "_BOOK_BLOCK", block)
    book = load_book(store)
    ref = PartitionBook.from_assignment(np.load(store / "node_to_part.npy"), P)
    np.testing.assert_array_equal(np.load(store / "node_lid.npy"), ref.lid_N)
    assert isinstance(book.part_N, np.memmap) and isinstance(book.lid_N, np.memmap)
    assert not book.part_N.flags.writeable and not book.lid_N.flags.writeable
    assert book.lid_N.dtype == np.int64 and book.num_parts == P


def test_store_without_node_lid_derives_it(store: Path, copy: Path) -> None:
    """A store written before ``node_lid.npy`` existed still loads, with the same lids."""
    (copy / "node_lid.npy").unlink()
    edit_manifest(copy, lambda obj: obj["files"].pop("node_lid.npy"), resign=True)
    book = load_book(copy)
    np.testing.assert_array_equal(book.lid_N, load_book(store).lid_N)
    assert not isinstance(book.lid_N, np.memmap)
    verify(copy)


@pytest.mark.parametrize("edit", ["out_of_range", "swap"])
def test_node_lid_must_be_the_books(copy: Path, edit: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Checksums updated, content wrong: the semantic check names the first wrong node."""
    monkeypatch.setattr(integrity, "_BOOK_BLOCK", 5)
    lid_N = np.load(copy / "node_lid.npy")
    part_N = np.load(copy / "node_to_part.npy")
    if edit == "out_of_range":
        lid_N[7] = 10**6
        first = 7
    else:  # two nodes of one part trade lids: every lid stays in range
        a, b = np.flatnonzero(part_N == part_N[3])[:2]
        lid_N[[a, b]] = lid_N[[b, a]]
        first = int(a)
    rewrite_array(copy, "node_lid.npy", lid_N)
    with pytest.raises(PartitionStoreError, match=f"node_lid.npy: lid \\d+ of node {first} "):
        load_book(copy)


def test_edited_array_fails_its_checksum_on_load(copy: Path) -> None:
    part_N = np.load(copy / "node_to_part.npy")
    part_N[5] = (part_N[5] + 1) % P
    np.save(copy / "node_to_part.npy", part_N)
    with pytest.raises(PartitionStoreError, match="node_to_part.npy: xxh3 checksum mismatch"):
        load_book(copy)
    load_book(copy, verify=False)  # the opt-out for a trusted store skips the hash


@pytest.mark.parametrize("part", [-1, P, 99])
def test_part_argument_out_of_range(store: Path, part: int) -> None:
    with pytest.raises(PartitionStoreError, match=rf"part id {part} out of range.*0\.\.{P - 1}"):
        load_shard(store, part)


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(PartitionStoreError, match="gnnsys partition"):
        read_manifest(tmp_path / "nope")


def test_error_pickles() -> None:
    import pickle

    err = PartitionStoreError("x: bad", "x")
    back = pickle.loads(pickle.dumps(err))
    assert str(back) == "x: bad" and back.path == "x"


def test_halo_part_out_of_range_on_load(copy: Path) -> None:
    halo_part = np.load(copy / shard_file(2, "halo_part"))
    rewrite_array(copy, shard_file(2, "halo_part"), np.full_like(halo_part, -1))
    with pytest.raises(
        PartitionStoreError, match=f"{shard_file(2, 'halo_part')}: part id out of range"
    ):
        load_shard(copy, 2)


def test_a_file_changed_after_a_load_is_checked_again(copy: Path) -> None:
    load_shard(copy, 1)  # hashed and checked: both per-process caches hold it now
    load_shard(copy, 1)
    x = np.load(copy / shard_file(1, "x"))
    x[0, 0] = np.nan
    rewrite_array(copy, shard_file(1, "x"), x)  # checksums valid, content not
    with pytest.raises(PartitionStoreError, match=f"{shard_file(1, 'x')}: a feature is NaN"):
        load_shard(copy, 1)
    _flip_last_byte(copy / shard_file(1, "x"))  # now the bytes differ from the manifest too
    with pytest.raises(PartitionStoreError, match=f"{shard_file(1, 'x')}: xxh3 checksum mismatch"):
        load_shard(copy, 1)


def test_load_partition_checks_edge_ids_across_shards(copy: Path) -> None:
    load_partition(copy)
    e_id = np.load(copy / shard_file(0, "e_id"))
    other = np.load(copy / shard_file(1, "e_id"))
    e_id[0] = other[0]  # in range, but part 1's edge: a duplicate across shards
    rewrite_array(copy, shard_file(0, "e_id"), e_id)
    load_shard(copy, 0)  # each shard alone is consistent
    with pytest.raises(PartitionStoreError, match=f"{shard_file(0, 'e_id')}: edge ids are not"):
        load_partition(copy)
    with pytest.raises(PartitionStoreError, match=shard_file(0, "e_id")):
        verify(copy)
