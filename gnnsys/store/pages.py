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

Arrays that are not file mappings (in-memory copies, ``mmap=False``) are left alone.
"""

from __future__ import annotations

import mmap

import numpy as np

__all__ = ["advise_random", "release_pages"]


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
