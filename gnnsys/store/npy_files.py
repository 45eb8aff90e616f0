"""Plain ``.npy`` files of a store, checksummed as written, and the staging directory.

The writers' file mechanics: every array is a plain ``.npy`` (``np.save``'s bytes, no pickle),
each file gets a sha256 (for ``verify``) and an xxh3_128 (checked by every load) from one read,
feature rows are gathered and written ``_ROWS_PER_CHUNK`` at a time with ``write`` (a full disk
is an ``OSError``, never a SIGBUS on a mapped page), and a store is written into a hidden
sibling that one rename publishes (:func:`staged`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import uuid
from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import BinaryIO

import numpy as np

from gnnsys.errors import GnnsysError
from gnnsys.store.diskio import disk_error
from gnnsys.store.integrity import file_digests
from gnnsys.store.layout import FileEntry

__all__ = [
    "file_entry",
    "package_version",
    "save_array",
    "save_rows",
    "sha256_file",
    "staged",
    "write_npy_header",
]

_ROWS_PER_CHUNK = 1 << 16  # feature rows gathered per write; bounds the writer's extra memory
_HASH_BLOCK = 1 << 24  # bytes read per sha256 update


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 16 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def file_entry(path: Path, arr_shape: tuple[int, ...], dtype: np.dtype) -> FileEntry:
    """The manifest entry of the written file ``path``: shape, dtype, sha256 and xxh3_128."""
    sha, fast = file_digests(path)
    return FileEntry(tuple(int(d) for d in arr_shape), np.dtype(dtype).str, sha, fast)


def save_array(root: Path, rel: str, arr: np.ndarray) -> FileEntry:
    """Save ``arr`` as ``root/rel`` (``np.save``, no pickle); its manifest entry."""
    path = root / rel
    np.save(path, np.ascontiguousarray(arr), allow_pickle=False)
    return file_entry(path, arr.shape, arr.dtype)


def save_rows(root: Path, rel: str, src: np.ndarray, rows: np.ndarray) -> FileEntry:
    """Write ``src[rows]`` as a ``.npy``, gathered and written ``_ROWS_PER_CHUNK`` rows at a time.

    The bytes are those ``np.lib.format.open_memmap`` wrote before (same header, same rows), but
    through ``write``: a full disk is then an ``OSError``, not a SIGBUS on a mapped page.
    """
    path = root / rel
    shape = (rows.shape[0], *src.shape[1:])
    if rows.shape[0] == 0:
        return save_array(root, rel, np.zeros(shape, dtype=src.dtype))
    with open(path, "wb") as fh:
        write_npy_header(fh, shape, src.dtype)
        for lo in range(0, rows.shape[0], _ROWS_PER_CHUNK):
            chunk = np.ascontiguousarray(src[rows[lo : lo + _ROWS_PER_CHUNK]])  # one chunk copy
            fh.write(chunk.reshape(-1).view(np.uint8).data)
    return file_entry(path, shape, src.dtype)


def write_npy_header(fh: BinaryIO, shape: tuple[int, ...], dtype: np.dtype) -> None:
    """The ``.npy`` header ``np.save`` writes for a C-order array of ``shape`` and ``dtype``."""
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
    try:
        np.lib.format.write_array_header_1_0(fh, header)
    except ValueError:  # a header over 64 KiB needs format 2.0 (as np.save would pick)
        fh.seek(0)
        np.lib.format.write_array_header_2_0(fh, header)


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
