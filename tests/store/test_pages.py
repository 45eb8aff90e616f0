"""``release_pages``: file-mapped shard arrays leave the resident set, data unchanged.

``ReadAhead``: the missing pages of a scattered read are asked for first; a no-op off maps.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from gnnsys.store.pages import (
    ReadAhead,
    advise_random,
    dense_range,
    read_ahead_dense,
    release_pages,
)

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")


def _resident_kib(path: Path) -> int:
    """This process's resident KiB of mappings of ``path`` (``/proc/self/smaps``)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5 and ":" in head[3]:  # a mapping line
            inside = len(head) >= 6 and head[5] == str(path)
        elif inside and line.startswith("Rss:"):
            total += int(head[1])
    return total


@pytest.fixture
def mapped(tmp_path: Path) -> tuple[Path, np.ndarray]:
    path = tmp_path / "a.npy"
    np.save(path, np.arange(1 << 20, dtype=np.int64))  # 8 MiB
    return path, np.load(path, mmap_mode="r", allow_pickle=False)


@linux
def test_release_drops_resident_pages_and_keeps_values(mapped: tuple[Path, np.ndarray]) -> None:
    path, arr = mapped
    total = int(arr.sum())  # reads every page
    assert _resident_kib(path) >= 8 * 1024
    assert release_pages(arr) == path.stat().st_size
    assert _resident_kib(path) == 0
    assert int(arr.sum()) == total  # read again from the page cache, same values


@linux
def test_views_and_tensors_release_their_mapping_once(mapped: tuple[Path, np.ndarray]) -> None:
    path, arr = mapped
    view = arr[100:]
    with warnings.catch_warnings():  # torch warns (once a process) about the read-only buffer
        warnings.simplefilter("ignore", UserWarning)
        tensor = torch.from_numpy(view)
    int(tensor.sum())
    assert release_pages(view, arr, arr[5:9]) == path.stat().st_size  # one mapping, once
    assert _resident_kib(path) == 0
    assert int(tensor[0]) == 100


def test_in_memory_arrays_and_others_are_left_alone() -> None:
    assert release_pages(np.arange(10), torch.arange(3), None, "x") == 0


def _vm_flags(path: Path) -> list[list[str]]:
    """``VmFlags`` of each of this process's mappings of ``path`` (``/proc/self/smaps``)."""
    out, inside = [], False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5 and ":" in head[3]:
            inside = len(head) >= 6 and head[5] == str(path)
        elif inside and line.startswith("VmFlags:"):
            out.append(head[1:])
    return out


@linux
def test_advise_random_marks_the_mapping_and_keeps_values(
    mapped: tuple[Path, np.ndarray],
) -> None:
    """The kernel records ``MADV_RANDOM`` as the ``rr`` flag; views reach their mapping."""
    path, arr = mapped
    assert all("rr" not in flags for flags in _vm_flags(path))
    assert advise_random(arr[10:20], arr, np.zeros(3)) == 8 * (1 << 20) + 128  # one mapping once
    assert _vm_flags(path) and all("rr" in flags for flags in _vm_flags(path))
    np.testing.assert_array_equal(arr[::4096], np.arange(0, 1 << 20, 4096))


def test_dense_range_needs_most_pages_of_the_range() -> None:
    # 512-byte rows: 8 share a page, so a row in every other page (1 in 16) fills half
    assert dense_range(np.arange(0, 1600, 16), 512) == (0, 1585)
    assert dense_range(np.arange(0, 1600, 17), 512) is None
    assert dense_range(np.array([5]), 512) == (5, 6)  # one row: its own page
    assert dense_range(np.zeros(0, dtype=np.int64), 512) is None
    assert dense_range(np.array([0, 99]), 8192, min_fill=0.02) == (0, 100)  # wide rows: count
    assert dense_range(np.array([0, 99]), 8192, min_fill=0.03) is None


@linux
def test_read_ahead_dense_asks_only_for_dense_rows_of_maps(
    mapped: tuple[Path, np.ndarray],
) -> None:
    path, arr = mapped
    table = arr[: (arr.shape[0] // 128) * 128].reshape(-1, 128)  # a 2-D view of the map
    assert read_ahead_dense(table, np.arange(0, 64, 2))
    assert not read_ahead_dense(table, np.array([0, table.shape[0] - 1]))  # sparse
    assert not read_ahead_dense(np.asarray(table).copy(), np.arange(64))  # not a map
    np.testing.assert_array_equal(table[1], np.asarray(arr[128:256]))


def test_read_ahead_gathers_plainly_off_file_maps() -> None:
    for array in (np.arange(100), np.arange(40).reshape(10, 4)):
        ahead = ReadAhead(array)
        assert not ahead.live
        np.testing.assert_array_equal(ahead.take(np.array([3, 1, 3])), array[[3, 1, 3]])
    tensor = torch.arange(10)
    assert not ReadAhead(tensor.numpy(), mapped=tensor).live  # a tensor shows no mapping


def _evicted_table(tmp_path: Path, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """``[rows, 128]`` float32 (512 B rows) saved, mapped read-only, its pages dropped."""
    path = tmp_path / "x.npy"
    table = np.arange(rows * 128, dtype=np.float32).reshape(rows, 128)
    np.save(path, table)
    mapped = np.load(path, mmap_mode="r", allow_pickle=False)  # reads (and caches) the header
    advise_random(mapped)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # nothing is mapped in yet
    finally:
        os.close(fd)
    return table, mapped


def _pages(mapped: np.ndarray, rows: np.ndarray) -> int:
    """Pages rows of 512 B touch (the ``.npy`` header shifts them: some straddle two)."""
    start = rows * 512 + mapped.ctypes.data
    return int(np.unique(np.concatenate((start // 4096, (start + 511) // 4096))).shape[0])


@linux
def test_read_ahead_requests_exactly_the_missing_pages(tmp_path: Path) -> None:
    table, mapped = _evicted_table(tmp_path, 4096)  # 2 MiB
    ahead = ReadAhead(mapped)
    assert ahead.live
    rows = np.array([4000, 30, 31, 2047, 900, 901])  # 6 pages (31 and 2047 straddle two)
    if ahead._missing_pages(rows).shape[0] != _pages(mapped, rows):
        pytest.skip("the file system kept the file's pages in memory (posix_fadvise ignored)")
    requested: list[np.ndarray] = []
    request = ahead._request
    ahead._request = lambda missing: requested.append(missing) or request(missing)  # type: ignore[method-assign]
    np.testing.assert_array_equal(ahead.take(rows), table[rows])
    assert [r.shape[0] for r in requested] == [6]
    assert ahead._missing_pages(rows).shape[0] == 0  # read: resident now


@linux
def test_read_ahead_gathers_a_large_request_window_by_window(tmp_path: Path) -> None:
    table, mapped = _evicted_table(tmp_path, 8192)  # 4 MiB, 1024 pages
    ahead = ReadAhead(mapped, window_pages=16)
    rows = np.random.default_rng(0).permutation(8192)[:700]  # scattered, request order random
    missing = ahead._missing_pages(rows)
    if missing.shape[0] != _pages(mapped, rows):
        pytest.skip("the file system kept the file's pages in memory (posix_fadvise ignored)")
    requested: list[np.ndarray] = []
    request = ahead._request
    ahead._request = lambda pages: requested.append(pages) or request(pages)  # type: ignore[method-assign]
    np.testing.assert_array_equal(ahead.take(rows), table[rows])  # in request order
    np.testing.assert_array_equal(np.concatenate(requested), missing)  # each page asked once
    assert max(r.shape[0] for r in requested) == 16


@linux
def test_read_ahead_backs_off_while_everything_is_resident(
    mapped: tuple[Path, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, arr = mapped
    ahead = ReadAhead(arr)
    checks: list[int] = []
    found = np.empty(0, dtype=np.int64)
    monkeypatch.setattr(ahead, "_missing_pages", lambda idx: checks.append(1) or found)
    monkeypatch.setattr(ahead, "_request", lambda missing: None)
    rows = np.array([5, 6])
    for _ in range(100):
        np.testing.assert_array_equal(ahead.take(rows), np.asarray(arr)[rows])
    assert len(checks) == 6  # calls 1, 3, 7, 15, 31, 63: the period doubles to 64
    found = np.arange(3, dtype=np.int64) + arr.ctypes.data // 4096  # pages go missing again
    checks.clear()
    for _ in range(27):
        ahead.take(rows)
    assert len(checks) == 1  # call 127, the next scheduled check, finds pages missing
    for _ in range(10):
        ahead.take(rows)
    assert len(checks) == 11  # pages missing: every call checks


def test_willneed_range_asks_in_pieces_the_kernel_reads_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One ``MADV_WILLNEED`` reads at most a read-ahead window: a long range goes in pieces."""
    from gnnsys.store import pages

    calls: list[tuple[int, int, int]] = []

    class Libc:
        def madvise(self, address: int, nbytes: int, advice: int) -> int:
            calls.append((address, nbytes, advice))
            return 0

    monkeypatch.setattr(pages, "glibc", lambda: Libc())
    start = 10 * 4096 + 100  # not page-aligned: the first piece starts at its page
    pages.willneed_range(start, 1_000_000)
    assert calls[0][0] == 10 * 4096
    assert all(n <= pages._WILLNEED_CHUNK and advice == 3 for _, n, advice in calls)
    assert all(a + n == b for (a, n, _), (b, _, _) in zip(calls[:-1], calls[1:], strict=True))
    assert calls[-1][0] + calls[-1][1] == start + 1_000_000
