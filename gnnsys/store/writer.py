"""``write_partitions``: save a (Graph, Assignment) as a partition directory, atomically.

Everything is written into a hidden temporary sibling of the target, checksummed, and only
then renamed into place, so a crash never leaves a half-written directory under the target
name. Each file gets a sha256 (for ``verify``) and an xxh3_128 (checked by every load), both
from one read of the file.

**Memory.** The writer never holds the graph's edges: a shard's edge files (``indices_gid``,
``indices_local``, ``e_id``) are gathered and appended a block of whole owned rows at a time
(at most ``_EDGES_PER_BLOCK`` edges), and feature rows ``_ROWS_PER_CHUNK`` at a time, both
with plain ``write`` calls after the ``.npy`` header. What it builds whole is O(N): the book,
each part's ``owned_gid``, ``indptr`` and halo (``halo_of_part`` reads edges in blocks too).
So its peak extra memory is O(N) plus one block, and a graph whose ``indices`` and ``x`` are
read-only memory maps of files larger than memory can be written. The bytes are exactly those
of saving ``build_shard``'s arrays whole (the tests compare checksums).

**Disk errors.** The free space is checked against a lower bound of the store's size before
anything is written, and any ``OSError`` on the way (full disk, read-only file system, no
permission, a vanished directory) removes the temporary directory and is raised as a
``DiskError`` naming the target and the fix (``gnnsys.store.diskio``). Rows are never written
through a writable memory map: on a full disk a store into mapped pages is a SIGBUS that kills
the process before any cleanup runs, where ``write`` returns ``ENOSPC``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import numpy as np

from gnnsys.errors import GnnsysError
from gnnsys.partitioners.base import csr_positions, row_blocks
from gnnsys.partitioners.halo import halo_of_part
from gnnsys.store.diskio import check_free, disk_error
from gnnsys.store.integrity import file_digests
from gnnsys.store.layout import (
    FORMAT_VERSION,
    MANIFEST,
    NODE_LID,
    NODE_TO_PART,
    SHARD_ARRAYS,
    SHARD_DATA,
    FileEntry,
    shard_file,
)
from gnnsys.store.manifest import Manifest, PartEntry
from gnnsys.store.shard import local_index
from gnnsys.types import Assignment, Graph, PartitionBook

if TYPE_CHECKING:
    from gnnsys.datasets.link_split import LinkSplit

logger = logging.getLogger(__name__)

_ROWS_PER_CHUNK = 1 << 16  # feature rows gathered per write; bounds the writer's extra memory
_EDGES_PER_BLOCK = 1 << 20  # owned in-edges per block of the edge files: ~80 B each of scratch
_EDGE_FILES = ("indices_gid", "indices_local", "e_id")  # the [E_p] int64 arrays of a shard
_HASH_BLOCK = 1 << 24  # bytes read per sha256 update

ProgressFn = Callable[[int], None]
"""Called with the part id after each part is written (e.g. to advance a progress bar)."""

PartsWriter = Callable[
    [Path, PartitionBook, int, ProgressFn | None], list[tuple[dict[str, FileEntry], PartEntry]]
]
"""``(staging dir, book, num_hops, progress) -> [(files, summary) of part p for p in 0..P-1]``.

Writes every part folder into the staging directory, where ``node_to_part.npy`` and
``node_lid.npy`` (the book, for other processes to map) already are, by
calling :func:`write_part` for each part, possibly in other processes (``gnnsys.out_of_core`` runs
them as Ray Data tasks that map the graph themselves). Given to ``write_partitions``.
"""


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 16 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def graph_fingerprint(graph: Graph) -> str:
    """First 16 hex digits of sha256 over ``N``, ``indptr`` and ``indices`` (dtype included)."""
    digest = hashlib.sha256(f"{graph.num_nodes}:{graph.indices.dtype.str}".encode())
    for arr in (graph.indptr, graph.indices):
        for lo in range(0, arr.shape[0], _HASH_BLOCK):
            # A view of a contiguous array (a memory map's pages are read, not copied); a strided
            # array copies one block.
            digest.update(np.ascontiguousarray(arr[lo : lo + _HASH_BLOCK]).data)
    return digest.hexdigest()[:16]


def _entry(path: Path, arr_shape: tuple[int, ...], dtype: np.dtype) -> FileEntry:
    sha, fast = file_digests(path)
    return FileEntry(tuple(int(d) for d in arr_shape), np.dtype(dtype).str, sha, fast)


def _save(root: Path, rel: str, arr: np.ndarray) -> FileEntry:
    path = root / rel
    np.save(path, np.ascontiguousarray(arr), allow_pickle=False)
    return _entry(path, arr.shape, arr.dtype)


def _save_rows(root: Path, rel: str, src: np.ndarray, rows: np.ndarray) -> FileEntry:
    """Write ``src[rows]`` as a ``.npy``, gathered and written ``_ROWS_PER_CHUNK`` rows at a time.

    The bytes are those ``np.lib.format.open_memmap`` wrote before (same header, same rows), but
    through ``write``: a full disk is then an ``OSError``, not a SIGBUS on a mapped page.
    """
    path = root / rel
    shape = (rows.shape[0], *src.shape[1:])
    if rows.shape[0] == 0:
        return _save(root, rel, np.zeros(shape, dtype=src.dtype))
    with open(path, "wb") as fh:
        write_npy_header(fh, shape, src.dtype)
        for lo in range(0, rows.shape[0], _ROWS_PER_CHUNK):
            chunk = np.ascontiguousarray(src[rows[lo : lo + _ROWS_PER_CHUNK]])  # one chunk copy
            fh.write(chunk.reshape(-1).view(np.uint8).data)
    return _entry(path, shape, src.dtype)


def write_npy_header(fh: BinaryIO, shape: tuple[int, ...], dtype: np.dtype) -> None:
    """The ``.npy`` header ``np.save`` writes for a C-order array of ``shape`` and ``dtype``."""
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
    try:
        np.lib.format.write_array_header_1_0(fh, header)
    except ValueError:  # a header over 64 KiB needs format 2.0 (as np.save would pick)
        fh.seek(0)
        np.lib.format.write_array_header_2_0(fh, header)


def _save_edges(
    tmp: Path,
    graph: Graph,
    book: PartitionBook,
    part: int,
    owned_gid: np.ndarray,
    halo_gid: np.ndarray,
) -> dict[str, FileEntry]:
    """Write ``part``'s ``indices_gid``, ``indices_local`` and ``e_id``, a block of rows at a time.

    A block is whole owned rows (``row_blocks``) holding at most ``_EDGES_PER_BLOCK`` edges (or
    one larger row), so its edges are the next slice of each file, in global CSR order, and
    ``local_index`` is elementwise: the files are byte for byte ``build_shard``'s arrays saved
    whole. Scratch: about ten ``int64`` arrays of one block (``local_index`` makes most).
    """
    count_M = graph.indptr[owned_gid + 1] - graph.indptr[owned_gid]
    shape, int64 = (int(count_M.sum()),), np.dtype(np.int64)
    paths = [tmp / shard_file(part, key) for key in _EDGE_FILES]
    with contextlib.ExitStack() as stack:
        handles = [stack.enter_context(open(path, "wb")) for path in paths]
        for fh in handles:
            write_npy_header(fh, shape, int64)
        for lo, hi in row_blocks(count_M, _EDGES_PER_BLOCK):
            pos_E, _ = csr_positions(graph.indptr, owned_gid[lo:hi])
            gid_E = np.asarray(graph.indices[pos_E], dtype=np.int64)  # one block read
            lid_E = local_index(gid_E, book, part, halo_gid, owned_gid.shape[0])
            for fh, arr in zip(handles, (gid_E, lid_E, pos_E), strict=True):
                fh.write(arr.data)
    return {
        shard_file(part, key): _entry(path, shape, int64)
        for key, path in zip(_EDGE_FILES, paths, strict=True)
    }


def _store_bytes(graph: Graph, assignment: Assignment) -> int:
    """A lower bound of the bytes a store of ``assignment`` takes (halo rows not counted).

    The book (``node_to_part``, ``node_lid``), every node's data rows once, its ``owned_gid`` and
    ``indptr`` entries, three int64 arrays over the edges (``indices_gid``, ``indices_local``,
    ``e_id``), and a header per file.
    """
    data = sum(
        int(getattr(graph, key).nbytes) for key in SHARD_DATA if getattr(graph, key) is not None
    )
    num_files = 1 + assignment.num_parts * (len(SHARD_ARRAYS) + len(SHARD_DATA))
    index = 16 * (graph.num_nodes + assignment.num_parts) + 24 * graph.num_edges
    book = int(assignment.part_N.nbytes) + 8 * graph.num_nodes  # node_to_part, node_lid
    return book + data + index + 128 * (num_files + 1)


def _write_part(
    tmp: Path,
    graph: Graph,
    book: PartitionBook,
    part: int,
    num_hops: int,
    links: LinkSplit | None = None,
) -> tuple[dict[str, FileEntry], PartEntry]:
    """Write the files of ``part`` into ``tmp``: index arrays (edge files streamed), data, links.

    Returns the manifest entries of the files written and the part's summary.

    ``owned_gid``, ``indptr`` and the halo are O(N) and built whole, as ``build_shard`` builds
    them; the edge files go through ``_save_edges``, so no ``[E_p]`` array is ever held.
    """
    owned_gid = np.flatnonzero(book.part_N == part).astype(np.int64)
    indptr = np.zeros(owned_gid.shape[0] + 1, dtype=np.int64)
    np.cumsum(graph.indptr[owned_gid + 1] - graph.indptr[owned_gid], out=indptr[1:])
    halo_gid = halo_of_part(graph, book.part_N, part, num_hops, seeds=owned_gid)
    for folder in ("x", "indptr"):  # the one type's and the one relation's folders
        (tmp / shard_file(part, folder)).parent.mkdir(parents=True)
    whole = {
        "owned_gid": owned_gid,
        "indptr": indptr,
        "halo_gid": halo_gid,
        "halo_part": book.part_N[halo_gid].astype(np.int32),
    }
    files = {shard_file(part, k): _save(tmp, shard_file(part, k), a) for k, a in whole.items()}
    files |= _save_edges(tmp, graph, book, part, owned_gid, halo_gid)  # the manifest sorts paths
    for key in SHARD_DATA:
        value = getattr(graph, key)
        if value is not None:
            rel = shard_file(part, key)
            files[rel] = _save_rows(tmp, rel, value, owned_gid)
    if links is not None:
        from gnnsys.store.links import links_of_part

        for key, arr in links_of_part(links, book.part_N, part).items():
            files[shard_file(part, key)] = _save(tmp, shard_file(part, key), arr)
    summary = PartEntry(int(owned_gid.shape[0]), int(indptr[-1]), int(halo_gid.shape[0]))
    return files, summary


def write_part(
    tmp: Path, graph: Graph, book: PartitionBook, part: int, num_hops: int
) -> tuple[dict[str, FileEntry], PartEntry]:
    """Write part ``part`` into the staging directory ``tmp`` (for a :data:`PartsWriter`)."""
    return _write_part(tmp, graph, book, part, num_hops)


def write_partitions(
    graph: Graph,
    assignment: Assignment,
    root: str | os.PathLike[str],
    *,
    num_hops: int = 2,
    overwrite: bool = False,
    progress: ProgressFn | None = None,
    links: LinkSplit | None = None,
    parts_writer: PartsWriter | None = None,
) -> PartitionBook:
    """Write the partition directory of ``assignment`` at ``root`` (layout in ``layout.py``).

    Args:
        graph: The partitioned graph.
        assignment: Its assignment (``gnnsys.partitioners.partition``).
        root: Target directory; must not exist unless ``overwrite``.
        num_hops: ``k`` of each shard's k-hop halo (the number of GNN layers).
        overwrite: Replace an existing directory (still atomically: rename, then delete).
        progress: Called with each part id once that part is written.
        links: A link-prediction split of ``graph`` (``graph`` is its training graph): each
            part also stores the links whose source it owns (``gnnsys.store.links``).
        parts_writer: Writes the part folders instead of this process, one after the other
            (see :data:`PartsWriter`); the files are the same. Not with ``links``.

    Returns:
        The ``PartitionBook`` (gid -> part, lid) of the written directory.

    Raises:
        ValueError: The assignment does not match the graph, ``num_hops < 1``, or ``root``
            exists and ``overwrite`` is false.
        DiskError: Less free space than the store needs, or a write failed (full disk,
            read-only file system, no permission); nothing is left behind.
    """
    root = Path(root)
    _check_args(graph, assignment, root, num_hops, overwrite)
    _check_links(graph, links)
    if links is not None and parts_writer is not None:
        raise ValueError("write_partitions: give links= or parts_writer=, not both")
    needed = _store_bytes(graph, assignment)
    check_free(root, needed)
    book = PartitionBook.from_assignment(assignment.part_N, assignment.num_parts)
    with staged(root, needed=needed) as tmp:
        files = {
            NODE_TO_PART: _save(tmp, NODE_TO_PART, assignment.part_N),
            NODE_LID: _save(tmp, NODE_LID, book.lid_N),
        }
        if parts_writer is not None:
            written = parts_writer(tmp, book, num_hops, progress)
        else:
            written = []
            for part in range(assignment.num_parts):
                written.append(_write_part(tmp, graph, book, part, num_hops, links))
                if progress is not None:
                    progress(part)
        parts = []
        for part_files, summary in written:
            files |= part_files
            parts.append(summary)
        manifest = _manifest(graph, assignment, num_hops, files, tuple(parts))
        (tmp / MANIFEST).write_text(json.dumps(manifest.to_json(), indent=1) + "\n")
    logger.info("wrote %d parts of %s to %s", assignment.num_parts, graph.name, root)
    return book


def _check_args(
    graph: Graph, assignment: Assignment, root: Path, num_hops: int, overwrite: bool
) -> None:
    if assignment.part_N.shape[0] != graph.num_nodes:
        raise ValueError(
            f"assignment covers {assignment.part_N.shape[0]} nodes but graph {graph.name!r} has "
            f"{graph.num_nodes}; partition this graph"
        )
    if num_hops < 1:
        raise ValueError(f"num_hops={num_hops}; choose num_hops >= 1 (the number of GNN layers)")
    if root.exists() and not overwrite:
        raise ValueError(f"{root} already exists; choose another directory or overwrite it")


def _check_links(graph: Graph, links: LinkSplit | None) -> None:
    if links is not None and links.graph is not graph:
        raise ValueError(
            "links were given but graph is not links.graph; write the split's training graph "
            "(write_partitions(split.graph, assignment, root, links=split))"
        )


@contextlib.contextmanager
def staged(root: Path, *, needed: int | None = None) -> Iterator[Path]:
    """A fresh directory beside ``root`` to write a store into.

    When the block ends it replaces ``root`` (:func:`_replace`); if the block raises, it is
    removed and ``root`` is left as it was, so a failed write leaves nothing half-written.

    Args:
        root: The store directory to create or replace.
        needed: Bytes the store needs, when known (named in a disk error).

    Raises:
        DiskError: An ``OSError`` of the block, or of creating or renaming the directory
            (raised after the directory is removed, so the free space it names is current).
    """
    tmp = root.parent / f".{root.name}.tmp-{uuid.uuid4().hex[:12]}"
    try:
        tmp.mkdir(parents=True)
    except OSError as err:
        raise disk_error(err, root, needed=needed) from err
    try:
        yield tmp
        _replace(tmp, root)
    except BaseException as err:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(err, OSError) and not isinstance(err, GnnsysError):
            raise disk_error(err, root, needed=needed) from err
        raise


def package_version() -> str:
    """The installed gnnsys version written into manifests."""
    try:
        return version("gnnsys")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0.0.0+unknown"


def _replace(tmp: Path, root: Path) -> None:
    """Rename ``tmp`` to ``root``; an existing ``root`` is renamed aside first, then deleted."""
    if not root.exists():
        os.rename(tmp, root)
        return
    trash = root.parent / f".{root.name}.old-{uuid.uuid4().hex[:12]}"
    os.rename(root, trash)
    try:
        os.rename(tmp, root)
    except OSError:
        os.rename(trash, root)  # put the old store back: a failed replace changes nothing
        raise
    shutil.rmtree(trash, ignore_errors=True)


def _manifest(
    graph: Graph,
    assignment: Assignment,
    num_hops: int,
    files: dict[str, FileEntry],
    parts: tuple[PartEntry, ...],
) -> Manifest:
    return Manifest(
        format_version=FORMAT_VERSION,
        dataset=graph.name,
        fingerprint=graph_fingerprint(graph),
        num_nodes=graph.num_nodes,
        num_edges=graph.num_edges,
        num_parts=assignment.num_parts,
        num_hops=num_hops,
        strategy=assignment.method,
        params=dict(assignment.params),
        seed=assignment.seed,
        gnnsys_version=package_version(),
        files=files,
        parts=parts,
        num_classes=graph.num_classes,
    )
