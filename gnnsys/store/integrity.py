"""Load-time integrity of a partition directory: checksums before first use, then semantics.

Both layers run on every ``read_shard`` / ``load_book`` (``verify=True``, the default), for a
store of either kind (per node type and relation), so no array a worker or the driver maps is
used before it is checked:

1. **Bytes.** Each file's xxh3_128 is recomputed and compared with
   its manifest entry before the array is handed out. Cost: one sequential read of the file;
   xxh3 hashes at ~10+ GB/s from the page cache, so the disk is the bound, and the read warms
   the page cache the memory map then uses. A process hashes a file once: a later load of the
   same unchanged file (same device, inode, size, mtime and ctime) is free.
2. **Semantics.** Index ranges and orderings, dtypes, mask bytes, labels within
   ``num_classes``, finite features, agreement with ``node_to_part``: a store whose checksums
   are valid but which another tool wrote wrongly still cannot crash a worker or train on
   nonsense. Cost: a few vectorised passes over the index arrays, dominated by the gather
   that checks every ``indices_local`` against ``indices_lid`` (~0.2 s per 10 M edges, warm);
   also once per process and unchanged shard.

Every failure is a ``PartitionStoreError`` naming the file and the fix.

Shape legend: ``N`` nodes (of a type), ``M`` owned nodes, ``E`` a relation's owned in-edges,
``H`` halo nodes.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import xxhash

from gnnsys.errors import PartitionStoreError
from gnnsys.store.layout import FileEntry, rel_file, type_file
from gnnsys.store.manifest import REL_ARRAYS as _REL_ARRAYS
from gnnsys.store.manifest import Manifest, StoreManifest

if TYPE_CHECKING:
    from gnnsys.store.shard import RelationShard, Shard, TypeShard

__all__ = [
    "check_book",
    "check_edge_ids",
    "check_file",
    "check_lids",
    "check_shard",
    "check_sizes",
    "clear_caches",
    "file_digests",
    "mark_shard_checked",
    "shard_checked",
    "shard_key",
]

_FIX = "re-create the directory with `gnnsys partition`"
_BLOCK = 1 << 24  # bytes per read while hashing: 16 MiB, one reused buffer
_CHUNK = 1 << 22  # edges per chunk of the lid -> gid consistency check (bounds the temp arrays)

_verified: dict[str, tuple[tuple[int, ...], str]] = {}
"""Resolved path -> (stat key, digest) of files this process already hashed successfully."""
_verified_lock = threading.Lock()
_checked_shards: set[tuple[tuple[int, ...], ...]] = set()
"""Stat keys of every file of shards this process already checked semantically."""


def file_digests(path: Path, *, sha256: bool = True, xxh3: bool = True) -> tuple[str, str]:
    """Hex sha256 and xxh3_128 of a file in one sequential read (``""`` for one not asked for)."""
    sha = hashlib.sha256() if sha256 else None
    fast = xxhash.xxh3_128() if xxh3 else None
    buf = bytearray(_BLOCK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            if sha is not None:
                sha.update(view[:n])
            if fast is not None:
                fast.update(view[:n])
    return (sha.hexdigest() if sha else "", fast.hexdigest() if fast else "")


def _stat_key(path: Path) -> tuple[int, ...]:
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def check_file(path: Path, entry: FileEntry) -> None:
    """Raise unless ``path`` hashes to its manifest entry (xxh3_128; sha256 for an entry without).

    Raises:
        PartitionStoreError: The digest differs (the file changed after it was written).
    """
    key = str(path.resolve())
    expected, algo = (entry.xxh3, "xxh3") if entry.xxh3 is not None else (entry.sha256, "sha256")
    stat = _stat_key(path)
    with _verified_lock:
        if _verified.get(key) == (stat, expected):
            return
    sha, fast = file_digests(path, sha256=algo == "sha256", xxh3=algo == "xxh3")
    if (fast if algo == "xxh3" else sha) != expected:
        raise PartitionStoreError(
            f"{path}: {algo} checksum mismatch; the file changed after it was written "
            f"(corrupted, truncated or replaced). {_FIX}",
            str(path),
        )
    with _verified_lock:
        _verified[key] = (stat, expected)


def shard_key(paths: list[Path]) -> tuple[tuple[int, ...], ...]:
    """Identity of a set of files as they are now (device, inode, size, mtime, ctime each)."""
    return tuple(_stat_key(p) for p in paths)


def shard_checked(key: tuple[tuple[int, ...], ...]) -> bool:
    """Whether this process already checked the shard whose files have ``key``."""
    with _verified_lock:
        return key in _checked_shards


def mark_shard_checked(key: tuple[tuple[int, ...], ...]) -> None:
    """Record a shard as checked (its semantic checks passed)."""
    with _verified_lock:
        _checked_shards.add(key)


def clear_caches() -> None:
    """Forget every file and shard this process checked (benchmarks and tests)."""
    with _verified_lock:
        _verified.clear()
        _checked_shards.clear()


def _fail(path: Path, what: str) -> PartitionStoreError:
    return PartitionStoreError(
        f"{path}: {what}; the store is inconsistent (corrupted, or written by another tool). "
        f"{_FIX}",
        str(path),
    )


def _check_range(arr: np.ndarray, lo: int, hi: int, path: Path, what: str) -> None:
    """Raise unless every value of ``arr`` lies in ``[lo, hi)``."""
    if arr.size and (int(arr.min()) < lo or int(arr.max()) >= hi):
        raise _fail(
            path,
            f"{what} out of range [{int(arr.min())}, {int(arr.max())}], expected [{lo}, {hi - 1}]",
        )


def _check_ascending(arr: np.ndarray, path: Path, *, strict: bool) -> None:
    ok = np.all(arr[1:] > arr[:-1]) if strict else np.all(arr[1:] >= arr[:-1])
    if not ok:
        raise _fail(path, "values are not " + ("strictly ascending" if strict else "ascending"))


_BOOK_BLOCK = _CHUNK
"""Nodes per block when the book is checked: a memory-mapped book is read a block at a time, so
checking it costs no O(N) memory."""


def check_book(root: Path, manifest: StoreManifest, part_N: np.ndarray) -> None:
    """Part ids in range and per-part node counts (all types) equal to the manifest summary.

    Raises:
        PartitionStoreError: Naming ``node_to_part.npy``.
    """
    path = root / "node_to_part.npy"
    if part_N.shape != (manifest.num_nodes,) or part_N.dtype != np.int32:
        raise _fail(
            path, f"expected [{manifest.num_nodes}] int32, got {part_N.dtype} {part_N.shape}"
        )
    counts = np.zeros(manifest.num_parts, dtype=np.int64)
    for start in range(0, part_N.shape[0], _BOOK_BLOCK):
        block = np.asarray(part_N[start : start + _BOOK_BLOCK])
        _check_range(block, 0, manifest.num_parts, path, "part id")
        counts += np.bincount(block, minlength=manifest.num_parts)
    if counts.tolist() != [sum(p.num_owned.values()) for p in manifest.parts]:
        raise _fail(path, "nodes per part disagree with the manifest's parts[].num_owned")


def check_lids(
    root: Path, manifest: Manifest | StoreManifest, part_N: np.ndarray, lid_N: np.ndarray
) -> None:
    """``lid_N`` is ``[N]`` int64 and equals the lids ``part_N`` implies.

    A node's lid is its rank among its part's nodes in gid order
    (``PartitionBook.from_assignment``); checked a block of nodes at a time with running
    per-part counts, so the check costs O(block) memory, not the O(N) of deriving the book.

    Raises:
        PartitionStoreError: Naming ``node_lid.npy`` and the first node whose lid is wrong.
    """
    path = root / "node_lid.npy"
    if lid_N.shape != (manifest.num_nodes,) or lid_N.dtype != np.int64:
        raise _fail(path, f"expected [{manifest.num_nodes}] int64, got {lid_N.dtype} {lid_N.shape}")
    seen_P = np.zeros(manifest.num_parts, dtype=np.int64)  # nodes of each part before the block
    for start in range(0, lid_N.shape[0], _BOOK_BLOCK):
        part = np.asarray(part_N[start : start + _BOOK_BLOCK], dtype=np.int64)
        counts = np.bincount(part, minlength=manifest.num_parts)
        order = np.argsort(part, kind="stable")
        want = np.empty(part.shape[0], dtype=np.int64)
        want[order] = np.arange(part.shape[0]) - np.repeat(np.cumsum(counts) - counts, counts)
        want += seen_P[part]
        seen_P += counts
        bad = np.flatnonzero(want != np.asarray(lid_N[start : start + _BOOK_BLOCK]))
        if bad.size:
            i = int(bad[0])
            raise _fail(
                path,
                f"lid {int(lid_N[start + i])} of node {start + i} (part {int(part[i])}) "
                f"should be {int(want[i])}",
            )


def check_sizes(root: Path, manifest: StoreManifest, shard: Shard) -> None:
    """Cheap structural checks: every array 1-D, sizes agree with each other and the manifest.

    Run on every load, checked or not (no pass over the data).

    Raises:
        PartitionStoreError: Naming the first type or relation folder that disagrees.
    """
    summary = manifest.parts[shard.part]
    for name, nodes in shard.nodes.items():
        arrays = (nodes.owned_lid, nodes.halo_lid, nodes.halo_part)
        if (
            any(a.ndim != 1 for a in arrays)
            or nodes.halo_part.shape != nodes.halo_lid.shape
            or (nodes.num_owned, nodes.halo_lid.shape[0])
            != (summary.num_owned.get(name), summary.num_halo.get(name))
        ):
            path = (root / type_file(shard.part, name, "owned_lid")).parent
            raise _fail(path, "type arrays disagree in size with each other or the manifest")
    for edge_type, edges in shard.relations.items():
        indptr, num_edges = edges.indptr, edges.indices_lid.shape[0]
        if (
            any(getattr(edges, k).ndim != 1 for k in _REL_ARRAYS)
            or indptr.shape[0] != shard.nodes[edge_type[2]].num_owned + 1
            or int(indptr[0]) != 0
            or int(indptr[-1]) != num_edges
            or edges.e_id.shape[0] != num_edges
            or edges.indices_local.shape[0] != num_edges
            or summary.num_edges.get("__".join(edge_type)) != num_edges
        ):
            path = (root / rel_file(shard.part, edge_type, "indptr")).parent
            raise _fail(path, "relation arrays disagree in size with each other or the manifest")


def check_shard(root: Path, manifest: StoreManifest, shard: Shard, part_N: np.ndarray) -> None:
    """Semantic checks of one shard, per node type and relation, against ``node_to_part``.

    Raises:
        PartitionStoreError: Naming the first offending file.
    """
    for nodes in shard.nodes.values():
        _check_type(root, manifest, shard.part, nodes, part_N)
    for rentry in manifest.relations:
        src, _, dst = rentry.edge_type
        edges = shard.relations[rentry.edge_type]
        _check_relation(root, shard.part, edges, shard.nodes[src], rentry.num_edges)


def _check_type(
    root: Path, manifest: StoreManifest, part: int, nodes: TypeShard, part_N: np.ndarray
) -> None:
    def path(name: str) -> Path:
        return root / type_file(part, nodes.node_type, name)

    n, off = nodes.num_nodes, nodes.offset
    for name in ("owned_lid", "halo_lid"):
        arr = getattr(nodes, name)
        if arr.dtype != np.int64:
            raise _fail(path(name), f"expected a 1-D int64 array, got {arr.dtype}")
        _check_ascending(arr, path(name), strict=True)
        _check_range(arr, 0, n, path(name), "id")
    owned, halo, halo_part = nodes.owned_lid, nodes.halo_lid, nodes.halo_part
    if owned.size and not np.all(part_N[owned + off] == part):
        raise _fail(path("owned_lid"), f"a node is not owned by part {part} in node_to_part.npy")
    if halo_part.dtype != np.int32:
        raise _fail(path("halo_part"), f"expected int32, got {halo_part.dtype}")
    _check_range(halo_part, 0, manifest.num_parts, path("halo_part"), "part id")
    if halo.size and (
        not np.array_equal(part_N[halo + off], halo_part) or np.any(halo_part == part)
    ):
        raise _fail(path("halo_part"), "owners disagree with node_to_part.npy")
    for name, arr in nodes.data.items():
        if arr.shape[:1] != (nodes.num_owned,):
            rows = arr.shape[0] if arr.ndim else 0
            raise _fail(path(name), f"{rows} rows, expected {nodes.num_owned}")
        if name == "x":
            _check_features(arr, path(name))
        elif name == "y":
            _check_labels(arr, manifest.num_classes, path(name))
        elif name.endswith("_mask"):
            if arr.dtype != np.bool_ or arr.ndim != 1:
                raise _fail(
                    path(name), f"a mask must be a 1-D bool array, got {arr.dtype} {arr.shape}"
                )
            if arr.size and int(arr.view(np.uint8).max()) > 1:
                raise _fail(path(name), "a mask byte is neither 0 nor 1")


def _check_relation(
    root: Path, part: int, edges: RelationShard, src: TypeShard, num_edges: int
) -> None:
    def path(name: str) -> Path:
        return root / rel_file(part, edges.edge_type, name)

    for name in _REL_ARRAYS:
        if getattr(edges, name).dtype != np.int64:
            raise _fail(path(name), f"expected a 1-D int64 array, got {getattr(edges, name).dtype}")
    _check_ascending(edges.indptr, path("indptr"), strict=False)
    _check_range(edges.indices_lid, 0, src.num_nodes, path("indices_lid"), "source id")
    _check_range(edges.e_id, 0, num_edges, path("e_id"), "edge id")
    lid, ids = edges.indices_local, edges.indices_lid
    table = (src.owned_lid, src.halo_lid)
    _check_range(
        lid, 0, table[0].shape[0] + table[1].shape[0], path("indices_local"), "local index"
    )
    # The one random-access pass (E gathers): an int32 table when ids fit halves its cache
    # footprint (~30% faster on a 50 M-edge shard).
    id_of_local = np.concatenate(table).astype(np.int32 if src.num_nodes < 2**31 else np.int64)
    for lo in range(0, lid.shape[0], _CHUNK):
        if not np.array_equal(np.take(id_of_local, lid[lo : lo + _CHUNK]), ids[lo : lo + _CHUNK]):
            raise _fail(path("indices_local"), "a local index names another node than indices_lid")


def _check_features(x: np.ndarray, path: Path) -> None:
    if x.ndim != 2 or x.dtype not in (np.float32, np.float16):
        raise _fail(path, f"features must be a 2-D float32/float16 array, got {x.dtype} {x.shape}")
    rows = max(1, _CHUNK // max(x.shape[1], 1))
    for lo in range(0, x.shape[0], rows):
        if not np.isfinite(x[lo : lo + rows]).all():
            raise _fail(path, "a feature is NaN or infinite")


def _check_labels(y: np.ndarray, num_classes: int | None, path: Path) -> None:
    if y.ndim == 2:
        if y.dtype != np.bool_ or int(y.view(np.uint8).max(initial=0)) > 1:
            raise _fail(path, "multi-label y must be a bool [M, C] array of 0/1 bytes")
        if num_classes is not None and y.shape[1] != num_classes:
            raise _fail(path, f"{y.shape[1]} label columns but num_classes={num_classes}")
        return
    if y.ndim != 1 or y.dtype != np.int64:
        raise _fail(path, f"labels must be a 1-D int64 array, got {y.dtype} {y.shape}")
    hi = num_classes if num_classes is not None else 2**62
    _check_range(y, -1, max(hi, 0), path, "label (-1 = unlabeled)")


def check_edge_ids(root: Path, manifest: StoreManifest, shards: list[Shard]) -> None:
    """Per relation, every shard's ``e_id`` is exactly its owned nodes' positions in the CSR.

    The relation's ``indptr`` follows from every shard's degrees, so node ``v``'s in-edges must
    carry ``indptr[v] .. indptr[v + 1] - 1`` in order; this proves the shards' edge ids form one
    permutation of ``[0, E)`` (no duplicates, none missing), which whole-graph assembly relies
    on. Cost: a few sequential passes over each shard's edges, no random access per edge.

    Raises:
        PartitionStoreError: Naming the first offending ``e_id.npy``.
    """
    for rentry in manifest.relations:
        dst = rentry.edge_type[2]
        num_dst = manifest.node_type(dst).num_nodes
        deg = np.zeros(num_dst, dtype=np.int64)
        for shard in shards:
            deg[shard.nodes[dst].owned_lid] = np.diff(shard.relations[rentry.edge_type].indptr)
        start = np.zeros(num_dst + 1, dtype=np.int64)
        np.cumsum(deg, out=start[1:])
        for shard in shards:
            edges = shard.relations[rentry.edge_type]
            _check_positions(
                root / rel_file(shard.part, rentry.edge_type, "e_id"),
                edges,
                start[shard.nodes[dst].owned_lid],
            )


def _check_positions(path: Path, edges: RelationShard, start_M: np.ndarray) -> None:
    """``edges.e_id`` equals ``start_M[v] + k`` for the ``k``-th in-edge of owned node ``v``."""
    indptr = np.asarray(edges.indptr)
    offset_M = start_M - indptr[:-1]  # global - local start of each node
    deg_M = np.diff(indptr)
    # node-aligned chunks of about _CHUNK edges: a few searchsorted calls, then only repeats
    cuts = np.unique(np.searchsorted(indptr, np.arange(0, int(indptr[-1]), _CHUNK)))
    bounds = [*cuts.tolist(), indptr.shape[0] - 1]
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        lo, hi = int(indptr[a]), int(indptr[b])
        want = np.repeat(offset_M[a:b], deg_M[a:b]) + np.arange(lo, hi)
        if not np.array_equal(edges.e_id[lo:hi], want):
            raise _fail(path, "edge ids are not the owned nodes' positions in the relation's CSR")
