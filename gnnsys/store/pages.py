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

``ReadAhead`` serves the sparse reads between the two: a training batch gathers rows (and
neighbour lists) scattered over a shard too large for the page cache. One 4 KiB fault at a time,
each waiting for the disk, reads ~12,000 pages a second on the machines measured here; asking for
every missing page first (``MADV_WILLNEED`` per run of missing pages, found with one ``mincore``)
lets the device serve them together, ~120,000 a second. Where everything is resident the check
backs off, so an in-memory run pays almost nothing.

Arrays that are not file mappings (in-memory copies, ``mmap=False``) are left alone.
"""

from __future__ import annotations

import ctypes
import mmap

import numpy as np

__all__ = [
    "ReadAhead",
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
    """The ``mmap`` under ``arr`` (a ``np.memmap``, a view of one, or ``np.frombuffer`` of a map).

    Views chain through ``.base``; ``np.frombuffer(map)``'s base is a ``memoryview`` of the map
    (followed through ``.obj``).
    """
    seen = 0
    while arr is not None and seen < 8:
        if isinstance(arr, np.memmap):
            mapped = getattr(arr, "_mmap", None)
            if isinstance(mapped, mmap.mmap):
                return mapped
        if isinstance(arr, mmap.mmap):
            return arr
        arr = arr.obj if isinstance(arr, memoryview) else getattr(arr, "base", None)
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
    ``gnnsys.train.eval.memory`` go through it; without glibc they are all no-ops.
    """
    global _LIBC
    if _LIBC is None:
        try:
            _LIBC = ctypes.CDLL("libc.so.6")
            _LIBC.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            _LIBC.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        except (OSError, AttributeError):
            _LIBC = False
    return _LIBC if isinstance(_LIBC, ctypes.CDLL) else None


_WILLNEED_CHUNK = 128 << 10
"""Bytes per ``MADV_WILLNEED`` call: the kernel reads at most the device's read-ahead window
(``max(read_ahead_kb, max_sectors_kb)``, 128 KiB on some devices) of one call and silently
drops the rest; a 48 MiB block asked for in one call was 25-37 % resident afterwards on the
machines measured here (8 MiB window), 100 % asked for in pieces."""


def willneed_range(address: int, nbytes: int) -> None:
    """``madvise(MADV_WILLNEED)`` over ``[address, address + nbytes)`` (page-aligned down).

    The kernel starts reading a file-mapped range at once, in large requests, whatever
    read-around the mapping has; on anonymous memory it does nothing. Asked in pieces of
    ``_WILLNEED_CHUNK`` (one call reads at most a read-ahead window). A hint: errors and
    platforms without glibc are ignored.
    """
    libc = glibc()
    if libc is None or nbytes <= 0:
        return
    aligned = address - address % mmap.PAGESIZE
    end = address + nbytes
    for first in range(aligned, end, _WILLNEED_CHUNK):
        libc.madvise(first, min(_WILLNEED_CHUNK, end - first), _MADV_WILLNEED)


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


class ReadAhead:
    """Gathers scattered rows of a file-mapped array with their missing pages asked for first.

    ``take(idx)`` is ``np.take(array, idx, axis=0)``. Before it gathers, one ``mincore`` over
    the span of the rows finds the pages the page cache lacks; those are requested with one
    ``madvise(MADV_WILLNEED)`` per run of consecutive pages, so the device serves them together
    instead of one fault at a time. A request missing more than ``window_pages`` pages is
    gathered in ascending page order, one window of missing pages at a time, each window
    requested while the one before it is gathered: at most two windows are in flight, so pages
    read ahead are not evicted, under a memory limit, before they are used. Same result
    either way.

    When a check finds (almost) nothing missing the next checks are skipped, doubling up to one
    check in ``max_period`` calls; a check that finds pages missing checks every call again.
    Arrays that are not file mappings, and platforms without glibc, gather plainly. Safe to
    call from several threads (its counters are only a schedule).

    Args:
        array: The 1-D or 2-D array gathered from (a ``np.memmap``, a view of one, a numpy view
            of a tensor).
        mapped: The mapping ``array`` shares its memory with, when ``array`` itself does not
            show it (a numpy view of a tensor made from a ``np.memmap``); default ``array``.
        max_period: The longest back-off, in calls.
        window_pages: Missing pages in flight per window.
    """

    def __init__(
        self,
        array: np.ndarray,
        *,
        mapped: object = None,
        max_period: int = 64,
        window_pages: int = 4096,
    ) -> None:
        self.array = np.asarray(array)
        self._live, self._address, self._row = False, 0, 0
        self._period, self._calls, self._max, self._window = 1, 0, max_period, window_pages
        a, m = self.array, array if mapped is None else mapped
        if a.ndim not in (1, 2) or a.size == 0 or not a.flags.c_contiguous:
            return
        if not isinstance(m, np.ndarray) or m.ctypes.data != a.ctypes.data:
            return
        if _mapping(m) is not None and glibc() is not None:
            self._live = True
            self._address, self._row = int(a.ctypes.data), int(a.strides[0])

    @property
    def live(self) -> bool:
        """Whether the array is a file mapping this can advise."""
        return self._live

    def take(self, idx: np.ndarray) -> np.ndarray:
        """``np.take(array, idx, axis=0)``, the missing pages requested a window ahead."""
        missing = self._check(idx)
        if missing.shape[0] <= self._window:
            if missing.shape[0]:
                self._request(missing)
            out: np.ndarray = np.take(self.array, idx, axis=0)
            return out
        return self._windowed(idx, missing)

    def _check(self, idx: np.ndarray) -> np.ndarray:
        """The missing pages of rows ``idx`` (empty when skipped, resident or not a mapping)."""
        none = np.empty(0, dtype=np.int64)
        if not self._live or idx.shape[0] == 0:
            return none
        self._calls += 1
        if self._calls < self._period:
            return none
        self._calls = 0
        missing = self._missing_pages(idx)
        if missing.shape[0] * 64 <= idx.shape[0]:  # (almost) resident: check less often
            self._period = min(self._max, self._period * 2)
        else:
            self._period = 1
        return missing

    def _windowed(self, idx: np.ndarray, missing: np.ndarray) -> np.ndarray:
        """Gather rows ``idx`` in page order, a window of ``missing`` pages requested ahead."""
        order = np.argsort(idx, kind="stable")
        rows = idx[order]
        first_page = (rows.astype(np.int64) * self._row + self._address) // mmap.PAGESIZE
        starts = missing[:: self._window]  # the first missing page of each window
        cuts = np.searchsorted(first_page, starts[1:]).tolist()
        bounds = list(zip([0, *cuts], [*cuts, rows.shape[0]], strict=True))
        out = np.empty((idx.shape[0], *self.array.shape[1:]), dtype=self.array.dtype)
        self._request(missing[: self._window])
        for w, (lo, hi) in enumerate(bounds):
            ahead = missing[(w + 1) * self._window : (w + 2) * self._window]
            if ahead.shape[0]:
                self._request(ahead)
            out[order[lo:hi]] = np.take(self.array, rows[lo:hi], axis=0)
        return out

    def _missing_pages(self, idx: np.ndarray) -> np.ndarray:
        """Absolute page numbers rows ``idx`` touch that are not in the page cache, ascending."""
        page = mmap.PAGESIZE
        start = idx.astype(np.int64, copy=False) * self._row + self._address
        first, last = start // page, (start + (self._row - 1)) // page
        lo, hi = int(first.min()), int(last.max()) + 1
        resident = np.empty(hi - lo, dtype=np.uint8)
        libc = glibc()
        assert libc is not None  # _live
        if libc.mincore(lo * page, (hi - lo) * page, resident.ctypes.data) != 0:
            return np.empty(0, dtype=np.int64)  # cannot tell: leave it to the faults
        needed = np.zeros(hi - lo, dtype=bool)
        needed[first - lo] = True
        needed[last - lo] = True
        needed &= (resident & 1) == 0
        return np.flatnonzero(needed) + lo

    def _request(self, missing: np.ndarray) -> None:
        """:func:`willneed_range` over each run of consecutive pages of ``missing`` (ascending)."""
        page = mmap.PAGESIZE
        breaks = np.flatnonzero(np.diff(missing) != 1)
        starts = np.concatenate((missing[:1], missing[breaks + 1]))
        stops = np.concatenate((missing[breaks], missing[-1:])) + 1
        for first, stop in zip(starts.tolist(), stops.tolist(), strict=True):
            willneed_range(first * page, (stop - first) * page)
