"""Read a heterogeneous partition directory: manifest, shards, full verify, whole-graph assembly.

As the homogeneous reader (``gnnsys.store.reader``): arrays are memory-mapped with
``np.load(mmap_mode="r", allow_pickle=False)``; ``verify=True`` (the default) checks every
file's xxh3_128 before its array is handed out (once per process and unchanged file) and then
the shard's semantics (index ranges and orders, owners against ``node_to_part.npy``, every
``indices_local`` against ``indices_lid``, masks, labels, finite features). ``verify_hetero``
recomputes every sha256 and xxh3 and also checks that the shards' edge ids tile every
relation's CSR exactly. Every problem is a ``PartitionStoreError`` naming the file and the fix.

Shape legend: ``G`` nodes of all types, ``M_t`` owned nodes, ``H_t`` halo nodes, ``E`` edges.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from gnnsys.datasets.hetero import HeteroGraph, NodeSet, Relation
from gnnsys.errors import PartitionStoreError
from gnnsys.store.hetero_layout import (
    REL_ARRAYS,
    TYPE_ARRAYS,
    HeteroManifest,
    rel_file,
    type_file,
)
from gnnsys.store.hetero_shard import HeteroShard, RelationShard, TypeShard
from gnnsys.store.integrity import (
    _check_ascending,
    _check_features,
    _check_labels,
    _check_range,
    _fail,
    file_digests,
)
from gnnsys.store.layout import MANIFEST, NODE_TO_PART, Manifest
from gnnsys.store.reader import load_array, load_book, read_json, read_manifest
from gnnsys.types import PartitionBook

__all__ = [
    "assemble_hetero",
    "is_hetero_store",
    "load_books",
    "read_hetero_manifest",
    "read_store_manifest",
    "read_hetero_shard",
    "verify_hetero",
]

_FIX = "re-create the directory with `gnnsys partition`"


def is_hetero_store(root: str | os.PathLike[str]) -> bool:
    """Whether ``root/manifest.json`` declares a typed store (``"kind": "typed"``; unchecked)."""
    try:
        obj = json.loads((Path(root) / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(obj, dict) and obj.get("kind") == "typed"


def read_store_manifest(root: str | os.PathLike[str]) -> Manifest | HeteroManifest:
    """The manifest of a store of either kind (its kind is read from the file).

    Raises:
        PartitionStoreError: As ``read_manifest`` / :func:`read_hetero_manifest`.
    """
    return read_hetero_manifest(root) if is_hetero_store(root) else read_manifest(root)


def read_hetero_manifest(root: str | os.PathLike[str]) -> HeteroManifest:
    """Parse and validate ``root/manifest.json`` of a store of either kind (the one schema).

    A homogeneous store's is one type ``node`` and one relation ``node__to__node``.

    Raises:
        PartitionStoreError: Missing directory or manifest, invalid JSON, another format or
            version, unknown keys, or a wrong manifest checksum.
    """
    return HeteroManifest.from_json(read_json(root), str(Path(root) / MANIFEST))


def load_books(root: str | os.PathLike[str]) -> dict[str | None, PartitionBook]:
    """The partition book of every node type of a store of either kind, keyed by node type.

    A homogeneous store has one node type, keyed ``None``: its ``load_book``. A typed store's
    ``node_to_part.npy`` assigns global ids (``offset[t] + lid``); each type's book is that
    slice (``part_N``: the owner of every type-local id) with each owner's ids of the type
    numbered ascending (``lid_N``: the position in the owner's ``owned_lid``), so the routing
    code runs per type with type-local ids in place of gids.

    Raises:
        PartitionStoreError: As ``load_book`` / :func:`read_hetero_manifest`.
    """
    if not is_hetero_store(root):
        return {None: load_book(root)}
    root = Path(root)
    manifest = read_hetero_manifest(root)
    part_N = load_array(root, manifest, NODE_TO_PART, mmap=True)
    _check_book(root, manifest, part_N)
    return {
        t.name: PartitionBook.from_assignment(
            np.asarray(part_N[t.offset : t.offset + t.num_nodes]), manifest.num_parts
        )
        for t in manifest.node_types
    }


def read_hetero_shard(
    root: str | os.PathLike[str], part: int, *, mmap: bool = True, verify: bool = True
) -> HeteroShard:
    """Load part ``part`` of a heterogeneous store (memory-mapped unless ``mmap=False``).

    Args:
        root: The partition directory.
        part: Part id in ``[0, P)``.
        mmap: Memory-map the arrays (read-only) instead of reading them into RAM.
        verify: Check every file's checksum before use, then the shard's semantics.

    Raises:
        PartitionStoreError: ``part`` out of range, or any missing or corrupt file (named).
    """
    root = Path(root)
    manifest = read_hetero_manifest(root)
    if isinstance(part, bool) or not isinstance(part, int | np.integer):
        raise TypeError(f"part={part!r}; pass an int part id")
    if not 0 <= part < manifest.num_parts:
        raise PartitionStoreError(
            f"{root}: part id {part} out of range; this directory has parts "
            f"0..{manifest.num_parts - 1} (pass one of those)",
            str(root),
        )
    part = int(part)
    nodes = {}
    for entry in manifest.node_types:
        arrays = {
            k: load_array(root, manifest, type_file(part, entry.name, k), mmap=mmap, verify=verify)
            for k in (*TYPE_ARRAYS, *entry.data)
        }
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
        arrays = {
            k: load_array(
                root, manifest, rel_file(part, rentry.edge_type, k), mmap=mmap, verify=verify
            )
            for k in REL_ARRAYS
        }
        relations[rentry.edge_type] = RelationShard(edge_type=rentry.edge_type, **arrays)
    shard = HeteroShard(part=part, num_parts=manifest.num_parts, nodes=nodes, relations=relations)
    if verify:
        part_N = load_array(root, manifest, NODE_TO_PART, mmap=True, verify=True)
        check_hetero_shard(root, manifest, shard, part_N)
    return shard


def check_hetero_shard(
    root: Path, manifest: HeteroManifest, shard: HeteroShard, part_N: np.ndarray
) -> None:
    """Semantic checks of one shard against the manifest and ``node_to_part.npy``.

    Raises:
        PartitionStoreError: Naming the first offending file.
    """
    _check_book(root, manifest, part_N)
    summary = manifest.parts[shard.part]
    for entry in manifest.node_types:
        _check_type(root, manifest, shard, shard.nodes[entry.name], part_N)
        nodes = shard.nodes[entry.name]
        if (nodes.num_owned, nodes.halo_lid.shape[0]) != (
            summary.num_owned.get(entry.name),
            summary.num_halo.get(entry.name),
        ):
            raise _fail(
                root / type_file(shard.part, entry.name, "owned_lid"),
                "owned/halo counts disagree with the manifest's parts[] entry",
            )
    for rentry in manifest.relations:
        edges = shard.relations[rentry.edge_type]
        _check_relation(root, shard, edges, rentry.num_edges)
        if int(edges.indptr[-1]) != summary.num_edges.get("__".join(rentry.edge_type)):
            raise _fail(
                root / rel_file(shard.part, rentry.edge_type, "indptr"),
                "edge count disagrees with the manifest's parts[] entry",
            )


def _check_book(root: Path, manifest: HeteroManifest, part_N: np.ndarray) -> None:
    path = root / NODE_TO_PART
    if part_N.shape != (manifest.num_nodes,) or part_N.dtype != np.int32:
        raise _fail(
            path, f"expected [{manifest.num_nodes}] int32, got {part_N.dtype} {part_N.shape}"
        )
    _check_range(part_N, 0, manifest.num_parts, path, "part id")


def _check_type(
    root: Path, manifest: HeteroManifest, shard: HeteroShard, nodes: TypeShard, part_N: np.ndarray
) -> None:
    def path(name: str) -> Path:
        return root / type_file(shard.part, nodes.node_type, name)

    n, off, part = nodes.num_nodes, nodes.offset, shard.part
    for name in ("owned_lid", "halo_lid"):
        arr = getattr(nodes, name)
        if arr.dtype != np.int64 or arr.ndim != 1:
            raise _fail(path(name), f"expected a 1-D int64 array, got {arr.dtype} {arr.shape}")
        _check_ascending(arr, path(name), strict=True)
        _check_range(arr, 0, n, path(name), "type-local id")
    if nodes.owned_lid.size and not np.all(part_N[nodes.owned_lid + off] == part):
        raise _fail(path("owned_lid"), f"a node is not owned by part {part} in node_to_part.npy")
    halo_part = nodes.halo_part
    if halo_part.dtype != np.int32 or halo_part.shape != nodes.halo_lid.shape:
        raise _fail(path("halo_part"), f"expected [{nodes.halo_lid.shape[0]}] int32")
    if halo_part.size and (
        not np.array_equal(part_N[nodes.halo_lid + off], halo_part) or np.any(halo_part == part)
    ):
        raise _fail(path("halo_part"), "owners disagree with node_to_part.npy")
    for name, arr in nodes.data.items():
        if arr.shape[:1] != (nodes.num_owned,):
            raise _fail(path(name), f"{arr.shape[:1]} rows, expected {nodes.num_owned}")
        if name == "x":
            _check_features(arr, path(name))
        elif name == "y":
            _check_labels(arr, manifest.num_classes, path(name))
        elif name.endswith("_mask") and (
            arr.dtype != np.bool_ or (arr.size and int(arr.view(np.uint8).max()) > 1)
        ):
            raise _fail(path(name), "a mask must be a 1-D bool array of 0/1 bytes")


def _check_relation(root: Path, shard: HeteroShard, edges: RelationShard, num_edges: int) -> None:
    def path(name: str) -> Path:
        return root / rel_file(shard.part, edges.edge_type, name)

    src, _, dst = edges.edge_type
    src_nodes, dst_nodes = shard.nodes[src], shard.nodes[dst]
    for name in REL_ARRAYS:
        arr = getattr(edges, name)
        if arr.dtype != np.int64 or arr.ndim != 1:
            raise _fail(path(name), f"expected a 1-D int64 array, got {arr.dtype} {arr.shape}")
    indptr, count = edges.indptr, edges.indices_lid.shape[0]
    if (
        indptr.shape[0] != dst_nodes.num_owned + 1
        or int(indptr[0]) != 0
        or int(indptr[-1]) != count
    ):
        raise _fail(path("indptr"), f"not a CSR over the {dst_nodes.num_owned} owned {dst} nodes")
    _check_ascending(indptr, path("indptr"), strict=False)
    if edges.indices_local.shape[0] != count or edges.e_id.shape[0] != count:
        raise _fail(path("indices_local"), "indices_local/e_id lengths differ from indices_lid")
    _check_range(edges.indices_lid, 0, src_nodes.num_nodes, path("indices_lid"), "source id")
    _check_range(edges.e_id, 0, num_edges, path("e_id"), "edge id")
    table = np.concatenate([src_nodes.owned_lid, src_nodes.halo_lid])
    _check_range(edges.indices_local, 0, table.shape[0], path("indices_local"), "local index")
    if not np.array_equal(table[edges.indices_local], edges.indices_lid):
        raise _fail(path("indices_local"), "a local index names another node than indices_lid")


def read_all(
    root: str | os.PathLike[str], *, verify: bool = True
) -> tuple[HeteroManifest, list[HeteroShard]]:
    """The manifest and every shard, plus the cross-shard edge-id check per relation."""
    root = Path(root)
    manifest = read_hetero_manifest(root)
    shards = [read_hetero_shard(root, p, verify=verify) for p in range(manifest.num_parts)]
    if verify:
        for rentry in manifest.relations:
            _check_edge_ids(root, manifest, shards, rentry.edge_type)
    return manifest, shards


def _check_edge_ids(
    root: Path, manifest: HeteroManifest, shards: list[HeteroShard], edge_type: tuple[str, str, str]
) -> None:
    """Every relation's edge ids, over all shards, are exactly the positions of its CSR."""
    dst = edge_type[2]
    deg = np.zeros(manifest.node_type(dst).num_nodes, dtype=np.int64)
    for shard in shards:
        deg[shard.nodes[dst].owned_lid] = np.diff(shard.relations[edge_type].indptr)
    start = np.concatenate([[0], np.cumsum(deg)])
    for shard in shards:
        edges, owned = shard.relations[edge_type], shard.nodes[dst].owned_lid
        count = np.diff(edges.indptr)
        want = np.repeat(start[owned] - edges.indptr[:-1], count) + np.arange(edges.e_id.shape[0])
        if not np.array_equal(edges.e_id, want):
            raise _fail(
                root / rel_file(shard.part, edge_type, "e_id"),
                "edge ids are not the owned nodes' positions in the relation's CSR",
            )


def assemble_hetero(
    root: str | os.PathLike[str], *, verify: bool = True, with_data: bool = True
) -> HeteroGraph:
    """The whole ``HeteroGraph`` back from every shard (arrays, dtypes and edge order exact).

    Without ``with_data`` only the structure (every relation's CSR; no feature, label or mask
    array is read): what a replicated worker samples from.

    Raises:
        PartitionStoreError: On any corruption or inconsistency, naming the file.
    """
    manifest, shards = read_all(root, verify=verify)
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


def verify_hetero(root: str | os.PathLike[str]) -> HeteroManifest:
    """Check everything: manifest, every file's sha256 and xxh3, every shard, every edge id.

    Unlike a load it never trusts a file this process hashed before.

    Returns:
        The manifest, when the directory is intact.

    Raises:
        PartitionStoreError: The first problem found, naming the file and the fix.
    """
    root = Path(root)
    manifest = read_hetero_manifest(root)
    for rel, entry in sorted(manifest.files.items()):
        load_array(root, manifest, rel, mmap=True, verify=False)
        sha, fast = file_digests(root / rel)
        if sha != entry.sha256 or fast != entry.xxh3:
            raise PartitionStoreError(
                f"{root / rel}: sha256 mismatch; the file changed after it was written. {_FIX}",
                str(root / rel),
            )
    part_N = load_array(root, manifest, NODE_TO_PART, mmap=True, verify=False)
    shards = []
    for part in range(manifest.num_parts):
        shard = read_hetero_shard(root, part, verify=False)
        check_hetero_shard(root, manifest, shard, part_N)
        shards.append(shard)
    for rentry in manifest.relations:
        _check_edge_ids(root, manifest, shards, rentry.edge_type)
    return manifest
