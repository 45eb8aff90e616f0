"""Read a partition directory of either kind: manifest, books, shards, a full check, assembly.

One reader serves both kinds: ``read_shard`` gives a ``Shard`` (per node type and
relation), and a homogeneous store is its one type ``node`` and relation ``node__to__node``;
``load_shard`` is that shard's ``PartitionShard`` view (zero copy). Reads are memory-mapped
(``np.load(mmap_mode="r", allow_pickle=False)``): loading a shard costs page-table entries,
not RAM, until rows are touched. Every load checks each array's shape and dtype against the
manifest, its checksum (xxh3_128, once per process and file) and the shard's semantics
(``gnnsys.store.integrity``, once per process and unchanged shard); ``verify=False`` skips the
checksum and semantic checks for a trusted store. ``verify`` also recomputes every sha256 and
checks that the shards' edge ids tile every relation's CSR. Any problem raises
``PartitionStoreError`` naming the file and the fix.

Shape legend: ``G`` nodes of all types, ``M_t`` owned nodes, ``H_t`` halo nodes, ``E`` edges.
"""

from __future__ import annotations

import json
import os
import tokenize
from pathlib import Path

import numpy as np

from gnnsys.errors import PartitionStoreError
from gnnsys.store.integrity import (
    check_book,
    check_edge_ids,
    check_file,
    check_lids,
    check_shard,
    check_sizes,
    file_digests,
    mark_shard_checked,
    shard_checked,
    shard_key,
)
from gnnsys.store.layout import MANIFEST, NODE_LID, NODE_TO_PART, rel_file, type_file
from gnnsys.store.manifest import REL_ARRAYS, TYPE_ARRAYS, Manifest, StoreManifest
from gnnsys.store.pages import advise_random, release_pages
from gnnsys.store.shard import RelationShard, Shard, TypeShard
from gnnsys.types import PartitionBook, PartitionShard
from gnnsys.types.relations import HeteroGraph, NodeSet, Relation

__all__ = [
    "assemble_hetero",
    "is_hetero_store",
    "load_array",
    "load_book",
    "load_books",
    "load_partition",
    "load_shard",
    "read_store_manifest",
    "read_json",
    "read_manifest",
    "read_shard",
    "verify",
]

_FIX = "re-create the directory with `gnnsys partition`"
_NPY_ERRORS = (
    ValueError,  # bad magic, header or size (also UnicodeDecodeError)
    OSError,
    EOFError,
    TypeError,
    SyntaxError,  # the header dict is parsed with ast.literal_eval
    tokenize.TokenError,
    OverflowError,
)
"""What ``np.load`` raises on a corrupt ``.npy`` (its header is parsed as a Python literal)."""


def read_manifest(root: str | os.PathLike[str]) -> Manifest:
    """Parse and validate ``root/manifest.json`` of a homogeneous store.

    Raises:
        PartitionStoreError: Missing directory or manifest, invalid JSON, another format or
            version, a typed store, unknown keys or a wrong checksum.
    """
    return Manifest.from_json(read_json(root), str(Path(root) / MANIFEST))


def read_json(root: str | os.PathLike[str]) -> object:
    """``root/manifest.json`` parsed (not validated).

    Raises:
        PartitionStoreError: ``root`` is missing or a file, or the manifest is unreadable or
            not JSON; the message names the fix.
    """
    path = Path(root) / MANIFEST
    if Path(root).exists() and not Path(root).is_dir():
        raise PartitionStoreError(
            f"{root}: is a file, not a partition directory; pass the directory that "
            "`gnnsys partition --out DIR` wrote",
            str(root),
        )
    if not Path(root).is_dir():
        raise PartitionStoreError(
            f"{root}: not a partition directory (it does not exist); create it with "
            "`gnnsys partition DATASET --parts P --out DIR`",
            str(root),
        )
    try:
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise PartitionStoreError(
            f"{path}: cannot read the manifest ({err}); {_FIX}", str(path)
        ) from err
    try:
        obj: object = json.loads(text)
    except json.JSONDecodeError as err:
        raise PartitionStoreError(
            f"{path}: manifest is not valid JSON ({err}); {_FIX}", str(path)
        ) from err
    return obj


def load_array(
    root: Path,
    manifest: Manifest | StoreManifest,
    rel: str,
    *,
    mmap: bool = True,
    verify: bool = True,
) -> np.ndarray:
    """Load ``root/rel`` and check it against its manifest entry.

    Args:
        root: The partition directory.
        manifest: Its manifest.
        rel: Relative path of the file, e.g. ``part-0/nodes/node/x.npy``.
        mmap: Memory-map the file (read-only) instead of reading it into RAM.
        verify: Also check the file's checksum before the array is returned (one read of
            the file per process; see ``gnnsys.store.integrity``).

    Raises:
        PartitionStoreError: No manifest entry, missing file, a checksum mismatch, not a
            valid ``.npy`` (e.g. truncated), or a shape/dtype that differs from the manifest.
    """
    path = root / rel
    entry = manifest.files.get(rel)
    if entry is None:
        raise PartitionStoreError(f"{root / MANIFEST}: no entry for {rel}; {_FIX}", str(path))
    if not path.is_file():
        raise PartitionStoreError(f"{path}: file missing; {_FIX}", str(path))
    if verify:
        check_file(path, entry)
    try:  # always map first: a corrupt header cannot make a copy allocate a huge array
        arr: np.ndarray = np.load(path, mmap_mode="r", allow_pickle=False)
    except _NPY_ERRORS as err:
        raise PartitionStoreError(
            f"{path}: not a readable .npy array, probably truncated or corrupted "
            f"({_short(err)}); {_FIX}",
            str(path),
        ) from err
    if tuple(arr.shape) != entry.shape or arr.dtype.str != entry.dtype:
        raise PartitionStoreError(
            f"{path}: array is {arr.dtype.str} {tuple(arr.shape)} but the manifest says "
            f"{entry.dtype} {entry.shape}; the file was replaced or corrupted. {_FIX}",
            str(path),
        )
    return arr if mmap else np.array(arr)


def is_hetero_store(root: str | os.PathLike[str]) -> bool:
    """Whether ``root/manifest.json`` declares a typed store (``"kind": "typed"``; unchecked)."""
    try:
        obj = json.loads((Path(root) / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(obj, dict) and obj.get("kind") == "typed"


def read_store_manifest(root: str | os.PathLike[str]) -> StoreManifest:
    """Parse and validate ``root/manifest.json`` of a store of either kind (the one schema).

    A homogeneous store's is one type ``node`` and one relation ``node__to__node``.

    Raises:
        PartitionStoreError: Missing directory or manifest, invalid JSON, another format or
            version, unknown keys, or a wrong manifest checksum.
    """
    return StoreManifest.from_json(read_json(root), str(Path(root) / MANIFEST))


def load_books(root: str | os.PathLike[str]) -> dict[str | None, PartitionBook]:
    """The partition book of every node type of a store of either kind, keyed by node type.

    A homogeneous store has one node type, keyed ``None``: its ``load_book``. A typed store's
    ``node_to_part.npy`` assigns global ids (``offset[t] + lid``); each type's book is that
    slice (``part_N``: the owner of every type-local id) with each owner's ids of the type
    numbered ascending (``lid_N``: the position in the owner's ``owned_lid``), so the routing
    code runs per type with type-local ids in place of gids.

    Raises:
        PartitionStoreError: As ``load_book`` / :func:`read_store_manifest`.
    """
    if not is_hetero_store(root):
        return {None: load_book(root)}
    root = Path(root)
    manifest = read_store_manifest(root)
    part_N = load_array(root, manifest, NODE_TO_PART, mmap=True)
    check_book(root, manifest, part_N)
    return {
        t.name: PartitionBook.from_assignment(
            np.asarray(part_N[t.offset : t.offset + t.num_nodes]), manifest.num_parts
        )
        for t in manifest.node_types
    }


def load_book(root: str | os.PathLike[str], *, verify: bool = True) -> PartitionBook:
    """The ``PartitionBook`` of a partition directory, memory-mapped.

    ``part_N`` maps ``node_to_part.npy`` and ``lid_N`` maps ``node_lid.npy``, read-only: the
    processes of one machine share one copy in the page cache. A store written before
    ``node_lid.npy`` existed gets ``lid_N`` derived in RAM (``PartitionBook.from_assignment``).

    Args:
        root: The partition directory.
        verify: Check the files' checksums first (see ``load_array``) and their semantics
            (part ids in range, per-part counts as in the manifest, every lid the one the
            part ids imply), a block of nodes at a time.

    Raises:
        PartitionStoreError: On any corruption, including part ids or lids out of range.
    """
    root = Path(root)
    manifest = read_manifest(root)
    part_N = load_array(root, manifest, NODE_TO_PART, mmap=True, verify=verify)
    if verify:
        check_book(root, manifest.store_manifest(), part_N)
    else:
        _check_part_ids(part_N, manifest.num_parts, root / NODE_TO_PART)
    if NODE_LID not in manifest.files:
        return PartitionBook.from_assignment(np.array(part_N), manifest.num_parts)
    lid_N = load_array(root, manifest, NODE_LID, mmap=True, verify=verify)
    if verify:
        check_lids(root, manifest, part_N, lid_N)
    advise_random(part_N, lid_N)  # looked up one gid at a time
    return PartitionBook(part_N=part_N, lid_N=lid_N, num_parts=manifest.num_parts)


def read_shard(
    root: str | os.PathLike[str], part: int, *, mmap: bool = True, verify: bool = True
) -> Shard:
    """Load part ``part`` of a store of either kind (memory-mapped unless ``mmap=False``).

    A homogeneous store's shard has one type ``node`` and one relation ``node__to__node``
    (``load_shard`` gives its ``PartitionShard`` view).

    Args:
        root: The partition directory.
        part: Part id in ``[0, P)``.
        mmap: Memory-map the arrays (read-only) instead of reading them into RAM.
        verify: Check every file's checksum before use, and the shard's semantics (index
            ranges and orders, owners, masks, labels, finite features); ``False`` only for a
            trusted store.

    Raises:
        PartitionStoreError: ``part`` out of range, or any missing or corrupt file (named).
    """
    root = Path(root)
    return _read_shard(root, read_store_manifest(root), part, mmap=mmap, verify=verify)


def load_shard(
    root: str | os.PathLike[str], part: int, *, mmap: bool = True, verify: bool = True
) -> PartitionShard:
    """The ``PartitionShard`` of ``part`` of a homogeneous store: ``read_shard``'s one-type view.

    Raises:
        PartitionStoreError: A typed store, or as ``read_shard``.
    """
    root = Path(root)
    one = read_manifest(root).store_manifest()
    return _read_shard(root, one, part, mmap=mmap, verify=verify).one_type()


def _read_shard(
    root: Path, manifest: StoreManifest, part: int, *, mmap: bool, verify: bool
) -> Shard:
    if isinstance(part, bool) or not isinstance(part, int | np.integer):
        raise TypeError(f"part={part!r}; pass an int part id")
    if not 0 <= part < manifest.num_parts:
        raise PartitionStoreError(
            f"{root}: part id {part} out of range; this directory has parts "
            f"0..{manifest.num_parts - 1} (pass one of those)",
            str(root),
        )
    part = int(part)
    rels = []

    def load(rel: str) -> np.ndarray:
        rels.append(rel)
        return load_array(root, manifest, rel, mmap=mmap, verify=verify)

    nodes = {}
    for entry in manifest.node_types:
        arrays = {k: load(type_file(part, entry.name, k)) for k in (*TYPE_ARRAYS, *entry.data)}
        nodes[entry.name] = TypeShard(
            node_type=entry.name,
            num_nodes=entry.num_nodes,
            offset=entry.offset,
            owned_lid=arrays.pop("owned_lid"),
            halo_lid=arrays.pop("halo_lid"),
            halo_part=arrays.pop("halo_part"),
            data=arrays,
        )
    relations = {}
    for rentry in manifest.relations:
        arrays = {k: load(rel_file(part, rentry.edge_type, k)) for k in REL_ARRAYS}
        relations[rentry.edge_type] = RelationShard(edge_type=rentry.edge_type, **arrays)
    shard = Shard(part=part, num_parts=manifest.num_parts, nodes=nodes, relations=relations)
    check_sizes(root, manifest, shard)
    if not verify:
        for nodes_t in nodes.values():
            path = root / type_file(part, nodes_t.node_type, "halo_part")
            _check_part_ids(nodes_t.halo_part, manifest.num_parts, path)
        return shard
    key = shard_key([root / rel for rel in (MANIFEST, NODE_TO_PART, *rels)])
    if not shard_checked(key):  # once per process and unchanged shard
        part_N = load_array(root, manifest, NODE_TO_PART, verify=True)
        check_book(root, manifest, part_N)
        check_shard(root, manifest, shard, part_N)
        release_pages(*_arrays(shard))  # the checks read every page once
        mark_shard_checked(key)
    return shard


def _arrays(shard: Shard) -> list[np.ndarray]:
    """Every array of ``shard``."""
    out = []
    for t in shard.nodes.values():
        out += [t.owned_lid, t.halo_lid, t.halo_part, *t.data.values()]
    for edges in shard.relations.values():
        out += [getattr(edges, k) for k in REL_ARRAYS]
    return out


def _short(err: BaseException, limit: int = 120) -> str:
    """``err`` as text of at most ``limit`` characters (numpy quotes whole corrupt headers)."""
    text = f"{type(err).__name__}: {err}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def load_partition(
    root: str | os.PathLike[str], *, verify: bool = True
) -> tuple[PartitionBook, list[PartitionShard]]:
    """The book and every shard of a homogeneous store, plus the cross-shard edge-id check.

    The extra check proves the shards' edge ids are exactly the global CSR positions, which
    assembling the whole graph relies on (what a driver loads).

    Raises:
        PartitionStoreError: On any corruption or inconsistency, naming the file.
    """
    root = Path(root)
    book = load_book(root, verify=verify)
    one = read_manifest(root).store_manifest()
    shards = [_read_shard(root, one, p, mmap=True, verify=verify) for p in range(one.num_parts)]
    if verify:
        check_edge_ids(root, one, shards)
    return book, [s.one_type() for s in shards]


def _check_part_ids(arr: np.ndarray, num_parts: int, path: Path) -> None:
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= num_parts):
        raise PartitionStoreError(
            f"{path}: part id out of range [{int(arr.min())}, {int(arr.max())}], expected "
            f"[0, {num_parts - 1}]; the file is corrupted. {_FIX}",
            str(path),
        )


def _read_all(
    root: str | os.PathLike[str], *, verify: bool = True
) -> tuple[StoreManifest, list[Shard]]:
    """The manifest and every shard, plus the cross-shard edge-id check per relation."""
    root = Path(root)
    manifest = read_store_manifest(root)
    shards = [
        _read_shard(root, manifest, p, mmap=True, verify=verify) for p in range(manifest.num_parts)
    ]
    if verify:
        check_edge_ids(root, manifest, shards)
    return manifest, shards


def assemble_hetero(
    root: str | os.PathLike[str], *, verify: bool = True, with_data: bool = True
) -> HeteroGraph:
    """The whole ``HeteroGraph`` back from every shard (arrays, dtypes and edge order exact).

    Without ``with_data`` only the structure (every relation's CSR; no feature, label or mask
    array is read): what a replicated worker samples from.

    Raises:
        PartitionStoreError: On any corruption or inconsistency, naming the file.
    """
    manifest, shards = _read_all(root, verify=verify)
    nodes = {}
    for entry in manifest.node_types:
        data = {}
        for name, (dtype, row_shape) in entry.data.items() if with_data else ():
            out = np.empty((entry.num_nodes, *row_shape), dtype=np.dtype(dtype))
            for shard in shards:
                out[shard.nodes[entry.name].owned_lid] = shard.nodes[entry.name].data[name]
            data[name] = out
        attrs = {k.removeprefix("attr-"): v for k, v in data.items() if k.startswith("attr-")}
        fields = {k: v for k, v in data.items() if not k.startswith("attr-")}
        nodes[entry.name] = NodeSet(num_nodes=entry.num_nodes, attrs=attrs, **fields)
    relations = {}
    for rentry in manifest.relations:
        src, _, dst = rentry.edge_type
        indptr = np.zeros(manifest.node_type(dst).num_nodes + 1, dtype=np.int64)
        indices = np.empty(rentry.num_edges, dtype=np.dtype(rentry.indices_dtype))
        for shard in shards:
            edges = shard.relations[rentry.edge_type]
            indptr[shard.nodes[dst].owned_lid + 1] = np.diff(edges.indptr)
            indices[edges.e_id] = edges.indices_lid
        np.cumsum(indptr, out=indptr)
        num_src = manifest.node_type(src).num_nodes
        relations[rentry.edge_type] = Relation(indptr=indptr, indices=indices, num_src=num_src)
    hint = manifest.num_classes or None
    return HeteroGraph(nodes, relations, name=manifest.dataset, num_classes_hint=hint)


def verify(root: str | os.PathLike[str]) -> StoreManifest:
    """Check everything in a store of either kind: every file, the book, every shard and edge id.

    The manifest; every file's shape, dtype, sha256 and xxh3; the book (and a homogeneous
    store's ``node_lid.npy``); every shard's semantics; every relation's edge ids.

    Reads every byte once (both digests in one pass), so it takes about as long as copying
    the directory; unlike a load it never trusts a file this process hashed or checked before.

    Returns:
        The manifest (the one schema's record), when the directory is intact.

    Raises:
        PartitionStoreError: The first problem found, naming the file and the fix.
    """
    root = Path(root)
    manifest = read_store_manifest(root)
    for rel, entry in sorted(manifest.files.items()):
        load_array(root, manifest, rel, verify=False)
        sha, fast = file_digests(root / rel, xxh3=entry.xxh3 is not None)
        if sha != entry.sha256 or (entry.xxh3 is not None and fast != entry.xxh3):
            raise PartitionStoreError(
                f"{root / rel}: sha256 mismatch; the file changed after it was written. {_FIX}",
                str(root / rel),
            )
    part_N = load_array(root, manifest, NODE_TO_PART, verify=False)
    check_book(root, manifest, part_N)
    if NODE_LID in manifest.files:
        check_lids(root, manifest, part_N, load_array(root, manifest, NODE_LID, verify=False))
    shards = []
    for part in range(manifest.num_parts):  # semantics afresh: never the per-process cache
        shard = _read_shard(root, manifest, part, mmap=True, verify=False)
        check_shard(root, manifest, shard, part_N)
        shards.append(shard)
    check_edge_ids(root, manifest, shards)
    return manifest
