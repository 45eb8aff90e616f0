"""The store writer: save a graph and its ``Assignment`` as a partition directory, atomically.

``write_partitions`` is the one entry point. A ``Graph`` (one type) is streamed in bounded
memory (below); a ``HeteroGraph``, whose nodes are numbered per type (the one real difference:
owned and halo ids are type-local, one folder per type and relation), has its rows gathered in
chunks and its shards built whole per part (``store.shard.build_shard``). Both go through
the same staging, per-part loop (``_write_parts``) and files (``gnnsys.store.npy_files``) into
the one format (``gnnsys.store.layout``) and manifest record (``gnnsys.store.manifest``).

Everything is written into a hidden temporary sibling of the target, checksummed, and only
then renamed into place, so a crash never leaves a half-written directory under the target
name. Each file gets a sha256 (for ``verify``) and an xxh3_128 (checked by every load), both
from one read of the file.

**Memory.** The writer never holds the graph's edges: a shard's edge files (``indices_gid``,
``indices_local``, ``e_id``) are gathered and appended a block of whole owned rows at a time
(at most ``_EDGES_PER_BLOCK`` edges), and feature rows a chunk at a time (``npy_files``), both
with plain ``write`` calls after the ``.npy`` header. What it builds whole is O(N): the book,
each part's ``owned_gid``, ``indptr`` and halo (``halo_of_part`` reads edges in blocks too).
So its peak extra memory is O(N) plus one block, and a graph whose ``indices`` and ``x`` are
read-only memory maps of files larger than memory can be written. The bytes are exactly those
of saving a shard's arrays built whole (the tests compare checksums with
``tests/store/shard_reference.py``).

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
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from gnnsys.partitioners.base import csr_positions, row_blocks
from gnnsys.partitioners.halo import halo_of_part
from gnnsys.store.diskio import check_free
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
from gnnsys.store.links import links_of_part
from gnnsys.store.manifest import (
    REL_ARRAYS,
    TYPE_ARRAYS,
    Manifest,
    PartCounts,
    PartEntry,
    RelationEntry,
    StoreManifest,
    TypeEntry,
    check_name,
    rel_file,
    type_file,
)
from gnnsys.store.npy_files import (
    file_entry,
    package_version,
    save_array,
    save_rows,
    staged,
    write_npy_header,
)
from gnnsys.store.shard import Shard, build_shard, data_arrays, local_index
from gnnsys.types import Assignment, Graph, PartitionBook

if TYPE_CHECKING:
    from gnnsys.datasets.link_split import LinkSplit, RelationLinkSplit
    from gnnsys.types.relations import HeteroGraph

logger = logging.getLogger(__name__)

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


def graph_fingerprint(graph: Graph) -> str:
    """First 16 hex digits of sha256 over ``N``, ``indptr`` and ``indices`` (dtype included)."""
    digest = hashlib.sha256(f"{graph.num_nodes}:{graph.indices.dtype.str}".encode())
    for arr in (graph.indptr, graph.indices):
        for lo in range(0, arr.shape[0], _HASH_BLOCK):
            # A view of a contiguous array (a memory map's pages are read, not copied); a strided
            # array copies one block.
            digest.update(np.ascontiguousarray(arr[lo : lo + _HASH_BLOCK]).data)
    return digest.hexdigest()[:16]


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
    ``local_index`` is elementwise: the files are byte for byte the whole shard's arrays saved
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
        shard_file(part, key): file_entry(path, shape, int64)
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

    ``owned_gid``, ``indptr`` and the halo are O(N) and built whole, as the whole shard builds
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
    files = {shard_file(part, k): save_array(tmp, shard_file(part, k), a) for k, a in whole.items()}
    files |= _save_edges(tmp, graph, book, part, owned_gid, halo_gid)  # the manifest sorts paths
    for key in SHARD_DATA:
        value = getattr(graph, key)
        if value is not None:
            rel = shard_file(part, key)
            files[rel] = save_rows(tmp, rel, value, owned_gid)
    if links is not None:
        from gnnsys.store.links import links_of_part

        for key, arr in links_of_part(links, book.part_N, part).items():
            files[shard_file(part, key)] = save_array(tmp, shard_file(part, key), arr)
    summary = PartEntry(int(owned_gid.shape[0]), int(indptr[-1]), int(halo_gid.shape[0]))
    return files, summary


def write_part(
    tmp: Path, graph: Graph, book: PartitionBook, part: int, num_hops: int
) -> tuple[dict[str, FileEntry], PartEntry]:
    """Write part ``part`` into the staging directory ``tmp`` (for a :data:`PartsWriter`)."""
    return _write_part(tmp, graph, book, part, num_hops)


Written = list[tuple[dict[str, FileEntry], Any]]
"""Per part, in part order: the manifest entries of its files and its summary."""


def _write_parts(
    num_parts: int, write_one: Callable[[int], tuple[dict[str, FileEntry], Any]],
    progress: ProgressFn | None,
) -> Written:  # fmt: skip
    """Every part's files, one after the other (``progress`` after each): both kinds' loop."""
    written = []
    for part in range(num_parts):
        written.append(write_one(part))
        if progress is not None:
            progress(part)
    return written


@overload
def write_partitions(
    graph: Graph, assignment: Assignment, root: str | os.PathLike[str], *, num_hops: int = 2,
    overwrite: bool = False, progress: ProgressFn | None = None, links: LinkSplit | None = None,
    parts_writer: PartsWriter | None = None,
) -> PartitionBook: ...  # fmt: skip


@overload
def write_partitions(
    graph: HeteroGraph, assignment: Assignment, root: str | os.PathLike[str], *,
    num_hops: int = 2, overwrite: bool = False, progress: ProgressFn | None = None,
    links: RelationLinkSplit | None = None, parts_writer: None = None,
) -> StoreManifest: ...  # fmt: skip


def write_partitions(
    graph: Graph | HeteroGraph,
    assignment: Assignment,
    root: str | os.PathLike[str],
    *,
    num_hops: int = 2,
    overwrite: bool = False,
    progress: ProgressFn | None = None,
    links: Any = None,
    parts_writer: PartsWriter | None = None,
) -> PartitionBook | StoreManifest:
    """Write the partition directory of ``assignment`` at ``root`` (layout in ``layout.py``).

    Args:
        graph: The partitioned graph: a ``Graph`` (one node type) or a ``HeteroGraph``
            (nodes numbered per type; ``assignment`` over its global ids).
        assignment: Its assignment (``gnnsys.partitioners.partition`` / ``partition_hetero``).
        root: Target directory; must not exist unless ``overwrite``.
        num_hops: ``k`` of each shard's k-hop halo (the number of GNN layers).
        overwrite: Replace an existing directory (still atomically: rename, then delete).
        progress: Called with each part id once that part is written.
        links: A link-prediction split of ``graph`` (``graph`` is its training graph): each
            part also stores the links whose source it owns (``gnnsys.store.links``); on a
            ``HeteroGraph`` a ``RelationLinkSplit`` of one relation, named in the manifest.
        parts_writer: Writes the part folders instead of this process, one after the other
            (see :data:`PartsWriter`); the files are the same. Not with ``links``; one type.

    Returns:
        The ``PartitionBook`` (gid -> part, lid) of a one-type store; the manifest written of
        a ``HeteroGraph``'s.

    Raises:
        ValueError: The assignment does not match the graph, ``num_hops < 1``, a type or
            relation name that cannot name a folder, or ``root`` exists and ``overwrite`` is
            false.
        DiskError: Less free space than the store needs, or a write failed (full disk,
            read-only file system, no permission); nothing is left behind.
    """
    from gnnsys.types.relations import HeteroGraph

    if isinstance(graph, HeteroGraph):  # numbered per type: one folder per type and relation
        if parts_writer is not None:
            raise ValueError("write_partitions: parts_writer= writes one-type graphs only")
        return _write_types(graph, assignment, Path(root), num_hops, overwrite, progress, links)
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
            NODE_TO_PART: save_array(tmp, NODE_TO_PART, assignment.part_N),
            NODE_LID: save_array(tmp, NODE_LID, book.lid_N),
        }
        if parts_writer is not None:
            written = parts_writer(tmp, book, num_hops, progress)
        else:
            written = _write_parts(
                assignment.num_parts,
                lambda part: _write_part(tmp, graph, book, part, num_hops, links),
                progress,
            )
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


def types_fingerprint(graph: HeteroGraph) -> str:
    """First 16 hex digits of sha256 over the type counts and every relation's CSR."""
    counts = ",".join(f"{t}={graph.num_nodes(t)}" for t in graph.node_types)
    digest = hashlib.sha256(counts.encode())
    for edge_type, rel in graph.relations.items():
        digest.update(f"|{'__'.join(edge_type)}:{rel.indices.dtype.str}".encode())
        for arr in (rel.indptr, rel.indices):
            flat = np.ascontiguousarray(arr)
            for lo in range(0, flat.shape[0], _HASH_BLOCK):
                digest.update(flat[lo : lo + _HASH_BLOCK].tobytes())  # copies one block
    return digest.hexdigest()[:16]


def _write_part_of_types(
    tmp: Path, graph: HeteroGraph, shard: Shard
) -> tuple[dict[str, FileEntry], PartCounts]:
    part, files = shard.part, {}
    for node_type, nodes in shard.nodes.items():
        (tmp / type_file(part, node_type, "x")).parent.mkdir(parents=True)
        for name in TYPE_ARRAYS:
            rel = type_file(part, node_type, name)
            files[rel] = save_array(tmp, rel, getattr(nodes, name))
        for name, value in data_arrays(graph, node_type).items():
            rel = type_file(part, node_type, name)
            files[rel] = save_rows(tmp, rel, value, nodes.owned_lid)
    for edge_type, edges in shard.relations.items():
        (tmp / rel_file(part, edge_type, "e_id")).parent.mkdir(parents=True)
        for name in REL_ARRAYS:
            rel = rel_file(part, edge_type, name)
            files[rel] = save_array(tmp, rel, getattr(edges, name))
    summary = PartCounts(
        num_owned={t: s.num_owned for t, s in shard.nodes.items()},
        num_halo={t: int(s.halo_lid.shape[0]) for t, s in shard.nodes.items()},
        num_edges={"__".join(et): int(r.indptr[-1]) for et, r in shard.relations.items()},
    )
    return files, summary


def _write_types(
    graph: HeteroGraph,
    assignment: Assignment,
    root: Path,
    num_hops: int,
    overwrite: bool,
    progress: ProgressFn | None,
    links: RelationLinkSplit | None,
) -> StoreManifest:
    """``write_partitions`` of a ``HeteroGraph``: each part's shard built whole, then saved."""
    _check_graph_of_types(graph, assignment, root, num_hops, overwrite)
    directed = graph.to_homogeneous()[0]

    def write_one(part: int) -> tuple[dict[str, FileEntry], PartCounts]:
        shard = build_shard(
            graph, assignment.part_N, assignment.num_parts, part, num_hops, directed,
            with_data=False,
        )  # fmt: skip
        part_files, summary = _write_part_of_types(tmp, graph, shard)
        if links is not None:
            part_files |= _write_links_of_types(tmp, graph, assignment, links, part)
        return part_files, summary

    with staged(root) as tmp:
        files = {NODE_TO_PART: save_array(tmp, NODE_TO_PART, assignment.part_N)}
        parts = []
        for part_files, summary in _write_parts(assignment.num_parts, write_one, progress):
            files |= part_files
            parts.append(summary)
        manifest = _manifest_of_types(graph, assignment, num_hops, files, tuple(parts))
        if links is not None:
            manifest = replace(manifest, link_edge_type=links.edge_type)
        (tmp / MANIFEST).write_text(json.dumps(manifest.to_json(), indent=1) + "\n")
    logger.info("wrote %d parts of %s to %s", assignment.num_parts, graph.name, root)
    return manifest


def _write_links_of_types(
    tmp: Path, graph: HeteroGraph, assignment: Assignment, links: RelationLinkSplit, part: int
) -> dict[str, FileEntry]:
    """Part ``part``'s link arrays: the links whose source node (of the source type) it owns."""
    src = links.edge_type[0]
    offset = graph.node_offsets()[src]
    part_N = assignment.part_N[offset : offset + graph.num_nodes(src)]
    return {
        shard_file(part, key): save_array(tmp, shard_file(part, key), arr)
        for key, arr in links_of_part(links, part_N, part).items()
    }


def _check_graph_of_types(
    graph: HeteroGraph, assignment: Assignment, root: Path, num_hops: int, overwrite: bool
) -> None:
    if assignment.part_N.shape[0] != graph.num_nodes():
        raise ValueError(
            f"assignment covers {assignment.part_N.shape[0]} nodes but {graph.name!r} has "
            f"{graph.num_nodes()} (all types); partition it with partition_hetero"
        )
    if num_hops < 1:
        raise ValueError(f"num_hops={num_hops}; choose num_hops >= 1 (the number of GNN layers)")
    for node_type in graph.node_types:
        check_name(node_type, "node type")
    for edge_type in graph.edge_types:
        check_name(edge_type[1], "relation")
    if root.exists() and not overwrite:
        raise ValueError(f"{root} already exists; choose another directory or overwrite it")


def _manifest_of_types(
    graph: HeteroGraph,
    assignment: Assignment,
    num_hops: int,
    files: dict[str, FileEntry],
    parts: tuple[PartCounts, ...],
) -> StoreManifest:
    offsets = graph.node_offsets()
    types = tuple(
        TypeEntry(
            name=t,
            num_nodes=graph.num_nodes(t),
            offset=offsets[t],
            data={k: (v.dtype.str, tuple(v.shape[1:])) for k, v in data_arrays(graph, t).items()},
        )
        for t in graph.node_types
    )
    relations = tuple(
        RelationEntry(edge_type=et, num_edges=r.num_edges, indices_dtype=r.indices.dtype.str)
        for et, r in graph.relations.items()
    )
    return StoreManifest(
        dataset=graph.name,
        fingerprint=types_fingerprint(graph),
        num_parts=assignment.num_parts,
        num_hops=num_hops,
        strategy=assignment.method,
        params=dict(assignment.params),
        seed=assignment.seed,
        gnnsys_version=package_version(),
        num_classes=graph.num_classes,
        node_types=types,
        relations=relations,
        parts=parts,
        files=files,
    )
