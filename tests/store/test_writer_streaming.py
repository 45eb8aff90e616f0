"""The streaming writer: byte-identical to the whole-shard path, memory bounded by O(N + block).

``write_partitions`` appends each shard's edge files a block of whole owned rows at a time
(``writer._EDGES_PER_BLOCK``) and the partitioners' edge passes read blocks of
``base.EDGES_PER_BLOCK`` edges. These tests shrink both so blocks really split a part's rows,
and compare every file with a store written the old way, from ``whole_shard``'s arrays
(``shard_reference.py``).
"""

from __future__ import annotations

import hashlib
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import numpy as np
import pytest
from shard_reference import whole_shard

import gnnsys.partitioners.base as base_mod
import gnnsys.store.integrity as integrity_mod
from gnnsys.datasets.link_split import LinkSplit, LinkSplitConfig, edge_split
from gnnsys.datasets.synthetic import sbm
from gnnsys.partitioners import partition
from gnnsys.partitioners.base import row_blocks
from gnnsys.partitioners.halo import khop_reach
from gnnsys.partitioners.metrics import edge_cut
from gnnsys.store import write_partitions
from gnnsys.store import writer as writer_mod
from gnnsys.store.layout import SHARD_ARRAYS, SHARD_DATA, FileEntry, shard_file
from gnnsys.store.links import links_of_part
from gnnsys.store.manifest import PartEntry
from gnnsys.types import Assignment, Graph, PartitionBook

T = TypeVar("T")


def _digests(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root``, by relative path."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _whole_part(
    tmp: Path,
    graph: Graph,
    book: PartitionBook,
    part: int,
    num_hops: int,
    links: LinkSplit | None = None,
) -> tuple[dict[str, FileEntry], PartEntry]:
    """The writer's part before streaming: ``whole_shard``'s arrays and gathered rows, np.save'd."""
    shard = whole_shard(graph, book, part, num_hops, with_data=False)
    for folder in ("x", "indptr"):
        (tmp / shard_file(part, folder)).parent.mkdir(parents=True)
    files = {
        shard_file(part, k): writer_mod.save_array(tmp, shard_file(part, k), getattr(shard, k))
        for k in SHARD_ARRAYS
    }
    for key in SHARD_DATA:
        value = getattr(graph, key)
        if value is not None:
            rel = shard_file(part, key)
            files[rel] = writer_mod.save_array(tmp, rel, np.asarray(value[shard.owned_gid]))
    if links is not None:
        for key, arr in links_of_part(links, book.part_N, part).items():
            files[shard_file(part, key)] = writer_mod.save_array(tmp, shard_file(part, key), arr)
    summary = PartEntry(shard.num_owned, int(shard.indptr[-1]), int(shard.halo_gid.shape[0]))
    return files, summary


def _hub_graph() -> Graph:
    """200 nodes: node 0 is a hub (in-degree 149), nodes 150.. have no in-edge; float16 x,
    multi-label y, int64 indices."""
    rng = np.random.default_rng(3)
    src = np.concatenate([np.arange(1, 150), rng.integers(0, 200, 600)])
    dst = np.concatenate([np.zeros(149, dtype=np.int64), rng.integers(1, 150, 600)])
    g = Graph.from_edge_index(np.stack([src, dst]), 200)
    return Graph(
        indptr=g.indptr,
        indices=g.indices.astype(np.int64),
        num_nodes=200,
        x=rng.standard_normal((200, 3)).astype(np.float16),
        y=rng.random((200, 5)) < 0.3,
        train_mask=rng.random(200) < 0.5,
        name="hub",
    )


def _graphs() -> dict[str, tuple[Graph, str, LinkSplit | None]]:
    """Name -> (graph, partition method, link split)."""
    full = sbm(num_nodes=300, num_classes=3, avg_degree=6, num_features=5, seed=1)
    bare = Graph(indptr=full.indptr, indices=full.indices, num_nodes=300, name="bare")
    split = edge_split(full, LinkSplitConfig(val=0.1, test=0.1, num_neg=4, seed=0))
    return {
        "sbm": (full, "ldg", None),
        "bare": (bare, "hash", None),
        "hub": (_hub_graph(), "range", None),  # range: the last part owns the edgeless nodes
        "links": (split.graph, "hash", split),
    }


GRAPHS = _graphs()


@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("num_parts", [1, 2, 4])
@pytest.mark.parametrize("num_hops", [1, 2])
def test_streamed_store_equals_whole_shard_store(
    name: str, num_parts: int, num_hops: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph, method, links = GRAPHS[name]
    assignment = partition(graph, method, num_parts)
    with monkeypatch.context() as m:  # the reference: default blocks, whole shards
        m.setattr(writer_mod, "_write_part", _whole_part)
        write_partitions(graph, assignment, tmp_path / "whole", num_hops=num_hops, links=links)
    blocks: list[tuple[int, int, int]] = []  # (rows, edges, limit) of every streamed block

    def spy(count_R: np.ndarray, max_edges: int | None = None) -> Iterator[tuple[int, int]]:
        for lo, hi in row_blocks(count_R, max_edges):
            blocks.append((hi - lo, int(count_R[lo:hi].sum()), int(max_edges or 0)))
            yield lo, hi

    monkeypatch.setattr(writer_mod, "_EDGES_PER_BLOCK", 16)
    monkeypatch.setattr(base_mod, "EDGES_PER_BLOCK", 40)  # the halo's blocks too
    monkeypatch.setattr(writer_mod, "row_blocks", spy)
    write_partitions(graph, assignment, tmp_path / "streamed", num_hops=num_hops, links=links)
    whole, streamed = _digests(tmp_path / "whole"), _digests(tmp_path / "streamed")
    assert streamed == whole
    assert len(blocks) > num_parts  # the parts' rows were really split
    assert all(edges <= limit or rows == 1 for rows, edges, limit in blocks)
    if name == "hub":  # a 149-edge row is a block of its own; edgeless rows join others
        assert any(rows == 1 and edges == 149 for rows, edges, _ in blocks)
        assert any(rows > edges for rows, edges, _ in blocks)


def test_empty_part_edge_files_equal_np_save(tmp_path: Path) -> None:
    """A part whose owned nodes have no in-edge: header-only files, as np.save writes them."""
    graph = GRAPHS["hub"][0]
    part_N = (np.arange(200) >= 150).astype(np.int32)  # part 1 owns exactly the edgeless nodes
    assignment = Assignment(part_N=part_N, num_parts=2, method="manual", seed=0, params={})
    write_partitions(graph, assignment, tmp_path / "s", num_hops=1)
    np.save(tmp_path / "empty.npy", np.zeros(0, dtype=np.int64))
    for key in ("indices_gid", "indices_local", "e_id"):
        written = (tmp_path / "s" / shard_file(1, key)).read_bytes()
        assert written == (tmp_path / "empty.npy").read_bytes(), key


def test_graph_fingerprint_unchanged_without_copies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hashing block views gives the digest of the former ``tobytes`` copies (int32, int64,
    memory-mapped and strided ``indices``)."""
    monkeypatch.setattr(writer_mod, "_HASH_BLOCK", 7)  # many blocks

    def by_copies(graph: Graph) -> str:
        digest = hashlib.sha256(f"{graph.num_nodes}:{graph.indices.dtype.str}".encode())
        for arr in (graph.indptr, graph.indices):
            digest.update(np.ascontiguousarray(arr).tobytes())
        return digest.hexdigest()[:16]

    hub = GRAPHS["hub"][0]
    np.save(tmp_path / "indices.npy", hub.indices)
    wide = np.repeat(np.asarray(hub.indices), 2)[::2]  # a strided view of the same ids
    variants = [
        hub,
        GRAPHS["sbm"][0],
        Graph(hub.indptr, np.load(tmp_path / "indices.npy", mmap_mode="r"), hub.num_nodes),
        Graph(hub.indptr, wide, hub.num_nodes),
    ]
    assert not variants[-1].indices.flags.c_contiguous
    for graph in variants:
        assert writer_mod.graph_fingerprint(graph) == by_copies(graph)


@pytest.mark.parametrize("limit", [1, 4, 150, 10**9])
def test_row_blocks_are_whole_rows_within_the_limit(limit: int) -> None:
    count_R = np.array([0, 3, 0, 0, 200, 1, 1, 0, 2, 0], dtype=np.int64)
    blocks = list(row_blocks(count_R, limit))
    assert blocks[0][0] == 0 and blocks[-1][1] == count_R.shape[0]
    assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:], strict=False))  # consecutive
    for lo, hi in blocks:
        assert hi > lo and (count_R[lo:hi].sum() <= limit or hi - lo == 1)
    assert list(row_blocks(np.zeros(0, dtype=np.int64), limit)) == []
    with pytest.raises(ValueError, match="max_edges=0"):
        list(row_blocks(count_R, 0))


@pytest.mark.parametrize(
    ("method", "cfg"),
    [
        ("ldg", {"order": "degree", "chunk": 40}),
        ("ldg", {"passes": 2}),
        ("fennel", {"order": "random", "chunk": 64}),
    ],
)
def test_partitioner_edge_blocks_change_nothing(
    method: str, cfg: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Streaming scores, halos and the edge cut read in tiny blocks equal the one-block run."""
    graph = GRAPHS["hub"][0]
    whole = partition(graph, method, 3, seed=1, **cfg)
    reach = khop_reach(graph, np.arange(0, 200, 7), 2)
    cut = edge_cut(graph, whole.part_N)
    monkeypatch.setattr(base_mod, "EDGES_PER_BLOCK", 2)
    blocked = partition(graph, method, 3, seed=1, **cfg)
    np.testing.assert_array_equal(blocked.part_N, whole.part_N)
    np.testing.assert_array_equal(khop_reach(graph, np.arange(0, 200, 7), 2), reach)
    assert edge_cut(graph, whole.part_N) == cut
    src = np.asarray(graph.indices)
    assert cut == int(
        np.count_nonzero(whole.part_N[src] != np.repeat(whole.part_N, graph.in_degree))
    )


# ---- memory: a graph whose edges and features are memory-mapped files --------------------------

_N, _DEGREE, _FEATURES, _PARTS = 200_000, 20, 8, 4
_BLOCK = 1 << 16
"""Edges per block in this test: the default (1 << 20) would hold a whole ~1 M-edge part."""
_CHUNK = 1 << 16
"""LDG's node chunk: the size its default picks at ~17 M nodes and 4 parts."""


def _bound(fixed: int) -> int:
    """Peak extra heap allowed: O(N) arrays + O(block) scratch + ``fixed``, never O(E).

    48 B per node covers the O(N) arrays alive at once (book ``lid_N``, ``owned_gid``, the halo's
    ``reached`` and frontier, the stream order and part arrays: measured ~32 B/N); 96 B per
    block edge covers a block's scratch (measured ~60-80 B: positions, gids, lids and
    ``local_index``'s temporaries). ``fixed`` is a component's own bounded buffer: the writer's
    checksum pass reads through one 16 MiB buffer, LDG holds a few ``[chunk, P]`` float64.
    Here that is ~31 MiB for either. Measured before streaming, at ~1 M owned in-edges per part:
    the writer's peak was ~75 MiB (whole ``[E_p]`` arrays plus ``local_index`` over all of
    them) and LDG's ~46 MiB (a 65536-node chunk's ~1.3 M edges gathered at once); after:
    ~22 MiB and ~16 MiB.
    """
    return 48 * _N + 96 * _BLOCK + fixed


def _peak(fn: Callable[[], T]) -> tuple[T, int]:
    """``fn()`` and the peak bytes it held on the traced heap (numpy reports to tracemalloc)."""
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.fixture(scope="module")
def mapped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Graph, Graph]:
    """The same graph twice: in memory, and with ``indices`` and ``x`` memory-mapped files."""
    graph = sbm(num_nodes=_N, avg_degree=_DEGREE, num_features=_FEATURES, seed=0)
    root = tmp_path_factory.mktemp("mapped")
    np.save(root / "indices.npy", graph.indices)
    np.save(root / "x.npy", graph.x)
    on_disk = Graph(
        indptr=graph.indptr,
        indices=np.load(root / "indices.npy", mmap_mode="r"),
        num_nodes=graph.num_nodes,
        x=np.load(root / "x.npy", mmap_mode="r"),
        y=graph.y,
        train_mask=graph.train_mask,
        val_mask=graph.val_mask,
        test_mask=graph.test_mask,
        name=graph.name,
        num_classes_hint=graph.num_classes_hint,
    )
    assert isinstance(on_disk.indices, np.memmap) and isinstance(on_disk.x, np.memmap)
    return graph, on_disk


@pytest.mark.parametrize(("method", "cfg"), [("hash", {}), ("ldg", {"chunk": _CHUNK})])
def test_memmap_graph_partitions_and_writes_in_bounded_memory(
    method: str,
    cfg: dict[str, object],
    mapped: tuple[Graph, Graph],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    in_memory, on_disk = mapped
    assert on_disk.num_edges > 15 * on_disk.num_nodes  # E >> N, or the bound proves nothing
    monkeypatch.setattr(writer_mod, "_EDGES_PER_BLOCK", _BLOCK)
    monkeypatch.setattr(base_mod, "EDGES_PER_BLOCK", _BLOCK)
    assignment, partition_peak = _peak(lambda: partition(on_disk, method, _PARTS, **cfg))
    score_scratch = 64 * _CHUNK * _PARTS if method == "ldg" else 0  # 8 [chunk, P] float64
    assert partition_peak < _bound(score_scratch), f"partition peak {partition_peak:,} B"

    _, write_peak = _peak(lambda: write_partitions(on_disk, assignment, tmp_path / "mapped"))
    assert write_peak < _bound(integrity_mod._BLOCK), f"write peak {write_peak:,} B"

    np.testing.assert_array_equal(
        partition(in_memory, method, _PARTS, **cfg).part_N, assignment.part_N
    )
    write_partitions(in_memory, assignment, tmp_path / "memory")
    assert _digests(tmp_path / "mapped") == _digests(tmp_path / "memory")

    if method == "hash":  # the bound is tight enough to catch the whole-part path
        book = PartitionBook.from_assignment(assignment.part_N, _PARTS)
        _, whole_peak = _peak(lambda: whole_shard(on_disk, book, 0, 2, with_data=False))
        assert whole_peak > _bound(integrity_mod._BLOCK), (
            f"whole-part peak {whole_peak:,} B is within the bound"
        )
