"""Read a partition directory: manifest, partition book, shards, and a full integrity check.

Reads are memory-mapped (``np.load(mmap_mode="r", allow_pickle=False)``): loading a shard
costs page-table entries, not RAM, until rows are touched. Every load checks each array's shape
and dtype against the manifest, its checksum (xxh3_128, once per process and file) and the
shard's semantics (``gnnsys.store.integrity``); ``verify=False`` skips the checksum and
semantic checks for a trusted store. ``verify`` also recomputes every sha256. Any problem raises
``PartitionStoreError`` naming the file and the fix.
"""

from __future__ import annotations

import json
import os
import tokenize
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from gnnsys.errors import PartitionStoreError
from gnnsys.store.integrity import (
    check_book,
    check_data,
    check_edge_ids,
    check_file,
    check_lids,
    check_shard,
    file_digests,
    mark_shard_checked,
    shard_checked,
    shard_key,
)
from gnnsys.store.layout import (
    MANIFEST,
    NODE_LID,
    NODE_TO_PART,
    SHARD_ARRAYS,
    SHARD_DATA,
    Manifest,
    shard_file,
)
from gnnsys.store.pages import advise_random, release_pages
from gnnsys.types import PartitionBook, PartitionShard

if TYPE_CHECKING:
    from gnnsys.store.hetero_layout import HeteroManifest

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
    manifest: Manifest | HeteroManifest,
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
        check_book(root, manifest, part_N)
    else:
        _check_part_ids(part_N, manifest.num_parts, root / NODE_TO_PART)
    if NODE_LID not in manifest.files:
        return PartitionBook.from_assignment(np.array(part_N), manifest.num_parts)
    lid_N = load_array(root, manifest, NODE_LID, mmap=True, verify=verify)
    if verify:
        check_lids(root, manifest, part_N, lid_N)
    advise_random(part_N, lid_N)  # looked up one gid at a time
    return PartitionBook(part_N=part_N, lid_N=lid_N, num_parts=manifest.num_parts)


def load_shard(
    root: str | os.PathLike[str], part: int, *, mmap: bool = True, verify: bool = True
) -> PartitionShard:
    """Load the shard of ``part`` (memory-mapped unless ``mmap=False``).

    Args:
        root: The partition directory.
        part: Part id in ``[0, P)``.
        mmap: Memory-map the arrays (read-only) instead of reading them into RAM.
        verify: Check every file's checksum before use, and the shard's semantics (index
            ranges, masks, labels, finite features); ``False`` only for a trusted store.

    Raises:
        PartitionStoreError: ``part`` out of range, or any missing or corrupt file.
    """
    root = Path(root)
    manifest = read_manifest(root)
    if isinstance(part, bool) or not isinstance(part, (int, np.integer)):
        raise TypeError(f"part={part!r}; pass an int part id")
    if not 0 <= part < manifest.num_parts:
        raise PartitionStoreError(
            f"{root}: part id {part} out of range; this directory has parts "
            f"0..{manifest.num_parts - 1} (pass one of those)",
            str(root),
        )
    part = int(part)

    def load(name: str) -> np.ndarray:
        return load_array(root, manifest, shard_file(part, name), mmap=mmap, verify=verify)

    arrays = {k: load(k) for k in SHARD_ARRAYS}
    data = {k: load(k) for k in SHARD_DATA if shard_file(part, k) in manifest.files}
    _check_sizes(root, manifest, part, arrays)
    if verify:
        _check_semantics(root, manifest, part, arrays, data)
        release_pages(*arrays.values(), *data.values())  # the checks read every page once
    else:
        _check_part_ids(
            arrays["halo_part"], manifest.num_parts, root / shard_file(part, "halo_part")
        )
    return PartitionShard(
        part=part, num_parts=manifest.num_parts, num_nodes=manifest.num_nodes, **arrays, **data
    )


def _short(err: BaseException, limit: int = 120) -> str:
    """``err`` as text of at most ``limit`` characters (numpy quotes whole corrupt headers)."""
    text = f"{type(err).__name__}: {err}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def load_partition(
    root: str | os.PathLike[str], *, verify: bool = True
) -> tuple[PartitionBook, list[PartitionShard]]:
    """The book and every shard, plus the cross-shard edge-id check (what a driver loads).

    The extra check proves the shards' edge ids are exactly the global CSR positions, which
    assembling the whole graph relies on.

    Raises:
        PartitionStoreError: On any corruption or inconsistency, naming the file.
    """
    root = Path(root)
    book = load_book(root, verify=verify)
    shards = [load_shard(root, p, verify=verify) for p in range(book.num_parts)]
    if verify:
        check_edge_ids(root, read_manifest(root), shards)
    return book, shards


def _check_semantics(
    root: Path,
    manifest: Manifest,
    part: int,
    arrays: dict[str, np.ndarray],
    data: dict[str, np.ndarray],
) -> None:
    """The semantic checks of ``gnnsys.store.integrity``, once per process and unchanged shard."""
    rels = [MANIFEST, NODE_TO_PART, *(shard_file(part, k) for k in (*arrays, *data))]
    key = shard_key([root / rel for rel in rels])
    if shard_checked(key):
        return
    part_N = load_array(root, manifest, NODE_TO_PART, verify=True)
    check_book(root, manifest, part_N)
    check_shard(root, manifest, part, arrays, part_N)
    check_data(root, manifest, part, data, int(arrays["owned_gid"].shape[0]))
    mark_shard_checked(key)


def _check_part_ids(arr: np.ndarray, num_parts: int, path: Path) -> None:
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= num_parts):
        raise PartitionStoreError(
            f"{path}: part id out of range [{int(arr.min())}, {int(arr.max())}], expected "
            f"[0, {num_parts - 1}]; the file is corrupted. {_FIX}",
            str(path),
        )


def _check_sizes(root: Path, manifest: Manifest, part: int, arrays: dict[str, np.ndarray]) -> None:
    """Cheap structural checks: sizes agree with each other and with the manifest summary."""
    indptr, summary = arrays["indptr"], manifest.parts[part]
    num_edges = arrays["indices_gid"].shape[0] if arrays["indices_gid"].ndim == 1 else -1
    consistent = (
        all(a.ndim == 1 for a in arrays.values())
        and indptr.shape[0] == arrays["owned_gid"].shape[0] + 1
        and int(indptr[0]) == 0
        and int(indptr[-1]) == num_edges
        and arrays["e_id"].shape[0] == num_edges
        and arrays["indices_local"].shape[0] == num_edges
        and arrays["halo_part"].shape == arrays["halo_gid"].shape
        and summary.num_owned == arrays["owned_gid"].shape[0]
        and summary.num_edges == num_edges
        and summary.num_halo == arrays["halo_gid"].shape[0]
    )
    if not consistent:
        path = root / shard_file(part, "indptr")
        raise PartitionStoreError(
            f"{path.parent}: shard arrays disagree in size with each other or the manifest; {_FIX}",
            str(path.parent),
        )


def verify(root: str | os.PathLike[str]) -> Manifest:
    """Check everything: manifest, every file's shape, dtype, sha256 and xxh3, every shard.

    Reads every byte once (both digests in one pass), so it takes about as long as copying
    the directory; unlike a load it never trusts a file this process hashed before.

    Returns:
        The manifest, when the directory is intact.

    Raises:
        PartitionStoreError: The first problem found, naming the file and the fix.
    """
    root = Path(root)
    manifest = read_manifest(root)
    for rel, entry in sorted(manifest.files.items()):
        load_array(root, manifest, rel, verify=False)
        sha, fast = file_digests(root / rel, xxh3=entry.xxh3 is not None)
        if sha != entry.sha256 or (entry.xxh3 is not None and fast != entry.xxh3):
            raise PartitionStoreError(
                f"{root / rel}: sha256 mismatch; the file changed after it was written. {_FIX}",
                str(root / rel),
            )
    part_N = load_book(root, verify=False).part_N
    check_book(root, manifest, part_N)
    shards = []
    for part in range(manifest.num_parts):  # semantics afresh: never the per-process cache
        shard = load_shard(root, part, verify=False)
        arrays = {k: getattr(shard, k) for k in SHARD_ARRAYS}
        data = {k: getattr(shard, k) for k in SHARD_DATA if getattr(shard, k) is not None}
        check_shard(root, manifest, part, arrays, part_N)
        check_data(root, manifest, part, data, shard.num_owned)
        shards.append(shard)
    check_edge_ids(root, manifest, shards)
    return manifest
