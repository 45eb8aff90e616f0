"""Give back the resident pages of memory-mapped shard arrays that a phase no longer reads.

A shard's arrays are read-only file mappings (``np.load(mmap_mode="r")``). Whatever a process
reads stays in its resident set until the kernel needs the memory, so a shard checked at load
(every index array read once) or a feature table read by layer 0 of the evaluation keeps
counting in the process's RSS while the next phase reads none of it. ``release_pages`` tells
the kernel (``madvise(MADV_DONTNEED)``) that this process is done with those pages: they leave
its resident set at once, stay in the page cache, and a later read maps them again (a minor
fault). The data cannot change: the mappings are read-only views of files the store checked.

``advise_random`` tells the kernel that a mapping is read at random (``MADV_RANDOM``): a page
fault then reads the one page, not the device's read-ahead window around it (128 KiB by default,
8 MiB on the virtio disks of the machines measured here). Training reads feature rows and
neighbour lists of sampled nodes scattered over the file; with the default read-around, a
process under a memory limit fills the page cache with rows nobody asked for and evicts the ones
it will read next (at 2**22 nodes under a 4.69 GiB limit an epoch ran at 6-18 % CPU on faults).

``read_ahead_dense`` is the other side: where a request reads so many rows of a range that
most of its pages are needed anyway (an evaluation fetching a large share of a part's rows,
sorted), it asks for the whole range at once (``MADV_WILLNEED``: large sequential reads) rather
than one 4 KiB fault per page.

Arrays that are not file mappings (in-memory copies, ``mmap=False``) are left alone.
"""

from __future__ import annotations

import ctypes
import mmap

import numpy as np

__all__ = [
    "advise_random",
    "dense_range",
    "glibc",
    "read_ahead_dense",
    "read_ahead_rows",
    "release_pages",
    "willneed_range",
]

_MADV_WILLNEED = 3  # Linux
_LIBC: ctypes.CDLL | bool | None = None


def _mapping(arr: object) -> mmap.mmap | None:
    """The ``mmap`` under ``arr`` (a ``np.memmap`` or a view of one), else ``None``."""
    seen = 0
    while arr is not None and seen < 8:  # views chain through .base
        if isinstance(arr, np.memmap):
            mapped = getattr(arr, "_mmap", None)
            if isinstance(mapped, mmap.mmap):
                return mapped
        if isinstance(arr, mmap.mmap):
            return arr
        arr = getattr(arr, "base", None)
        seen += 1
    return None


def _advise(arrays: tuple[object, ...], advice: int) -> int:
    done: dict[int, int] = {}
    for arr in arrays:
        mapped = _mapping(arr)
        if mapped is None or id(mapped) in done or mapped.closed:
            continue
        size = len(mapped)
        if size:
            mapped.madvise(advice)
        done[id(mapped)] = size
    return sum(done.values())


def advise_random(*arrays: object) -> int:
    """Mark every file-mapped array in ``arrays`` as read at random (no read-around).

    Returns:
        The bytes of mappings advised (each mapping once), 0 where nothing is mapped or the
        platform lacks ``madvise``.
    """
    if not hasattr(mmap, "MADV_RANDOM"):
        return 0
    return _advise(arrays, mmap.MADV_RANDOM)


def release_pages(*arrays: object) -> int:
    """Drop this process's resident pages of every file-mapped array in ``arrays``.

    Returns:
        The bytes of mappings advised (each mapping once), 0 where nothing is mapped or the
        platform lacks ``madvise``.
    """
    if not hasattr(mmap, "MADV_DONTNEED"):
        return 0
    return _advise(arrays, mmap.MADV_DONTNEED)


def glibc() -> ctypes.CDLL | None:
    """The C library (glibc, loaded once, ``madvise`` typed), or ``None`` where there is none.

    The one handle of the package: the page hints here and the heap calls of
    ``gnnsys.train.eval_memory`` go through it; without glibc they are all no-ops.
    """
    global _LIBC
    if _LIBC is None:
        try:
            _LIBC = ctypes.CDLL("libc.so.6")
            _LIBC.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        except (OSError, AttributeError):
            _LIBC = False
    return _LIBC if isinstance(_LIBC, ctypes.CDLL) else None


def willneed_range(address: int, nbytes: int) -> None:
    """``madvise(MADV_WILLNEED)`` over ``[address, address + nbytes)`` (page-aligned down).

    The kernel starts reading a file-mapped range at once, in large requests, whatever
    read-around the mapping has; on anonymous memory it does nothing. A hint: errors and
    platforms without glibc are ignored.
    """
    libc = glibc()
    if libc is None or nbytes <= 0:
        return
    aligned = address - address % mmap.PAGESIZE
    libc.madvise(aligned, nbytes + (address - aligned), _MADV_WILLNEED)


def dense_range(
    rows: np.ndarray, row_bytes: int, *, min_fill: float = 0.5
) -> tuple[int, int] | None:
    """``(min(rows), max(rows) + 1)`` if reading ``rows`` touches most of that range anyway.

    Each row needs at least its own page, so the rows need ``K * max(row, page)`` bytes of a
    range of ``(hi - lo) * row`` (an over-count for rows sharing pages); at least ``min_fill``
    of it makes the range dense. ``None`` for sparse or empty ``rows``.
    """
    if rows.shape[0] == 0:
        return None
    lo, hi = int(rows.min()), int(rows.max()) + 1
    needed = rows.shape[0] * max(row_bytes, mmap.PAGESIZE)
    return (lo, hi) if needed >= min_fill * (hi - lo) * row_bytes else None


def read_ahead_rows(address: int, row_bytes: int, rows: np.ndarray) -> bool:
    """Read the range of ``rows`` of a table at ``address`` ahead when they are dense.

    Dense as :func:`dense_range` says; returns whether it asked (:func:`willneed_range`).
    """
    span = dense_range(rows, row_bytes)
    if span is None:
        return False
    willneed_range(address + span[0] * row_bytes, (span[1] - span[0]) * row_bytes)
    return True


def read_ahead_dense(table: np.ndarray, rows: np.ndarray) -> bool:
    """Read rows ``[min(rows), max(rows)]`` of a file-mapped table ahead if they are dense.

    ``table`` is 2-D (:func:`read_ahead_rows`). Returns whether it asked. Sparse requests
    (training's sampled rows) are left to their page faults; so are arrays that are not file
    mappings.
    """
    if table.ndim != 2 or _mapping(table) is None:
        return False
    return read_ahead_rows(table.ctypes.data, int(table.shape[1]) * table.itemsize, rows)
