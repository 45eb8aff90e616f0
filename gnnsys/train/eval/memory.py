"""Where a rank's exact evaluation keeps its memory: the layer tables and the C heap.

:class:`LayerTables` holds the ``[M, H]`` float32 output tables of the layers a rank computed.
By default they are ordinary (anonymous) tensors. With ``EvalConfig.spill_mb > 0`` a table of
more than that many MiB lives in a shared memory map of a temporary file instead
(:func:`spilled_table`): the file is unlinked as soon as it is mapped, so nothing is left on
disk even if the process is killed, and its pages are page cache, which the kernel writes back
and evicts under memory pressure (anonymous memory it cannot drop without swap). Rows are
written into the map as they are computed; the full table never exists in anonymous memory.

The heap helpers keep glibc from holding freed evaluation temporaries (see
:func:`set_mmap_threshold` and :func:`release_free_memory`).

:func:`eval_tick` counts the steps of a rank's evaluation (a chunk summed, a block read, a piece
of rows fetched) in a process-wide counter, :func:`eval_ticks` reads it: the driver waits for an
evaluation layer, one call that runs for minutes on a graph larger than memory, for as long as
the count moves (``TrainWorker.progress``), so a working rank is not mistaken for a hung one.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import tempfile

import numpy as np
import torch
from torch import Tensor

from gnnsys.store.pages import ReadAhead, glibc, read_ahead_rows, willneed_range

__all__ = [
    "EVAL_MMAP_THRESHOLD",
    "SPILL_PREFIX",
    "TRAIN_MMAP_THRESHOLD",
    "LayerTables",
    "eval_tick",
    "eval_ticks",
    "release_free_memory",
    "set_mmap_threshold",
    "spilled_table",
    "table_rows",
    "willneed_rows",
]

_TICKS = [0]  # evaluation steps done in this process (a progress signal, not an exact count)


def eval_tick() -> None:
    """One more step of this process's evaluation (a chunk, a block, a piece of rows)."""
    _TICKS[0] += 1


def eval_ticks() -> int:
    """Evaluation steps this process has done (only ever grows)."""
    return _TICKS[0]


SPILL_PREFIX = "gnnsys-eval-"
"""Name prefix of the (immediately unlinked) temporary files of spilled tables."""


def spilled_table(rows: int, width: int) -> tuple[Tensor, mmap.mmap]:
    """A ``[rows, width]`` float32 tensor over a shared map of an unlinked temporary file.

    The file is made in ``tempfile.gettempdir()`` (``TMPDIR``) and unlinked at once (the
    descriptor, then the map, keep the data; nothing stays on disk even after ``SIGKILL``); its
    blocks are reserved (``posix_fallocate``: a full disk fails here, not later with ``SIGBUS``
    on a write into the map; a file system that cannot reserve gets a sparse ``ftruncate``),
    it is mapped read-write (``MAP_SHARED``) and the descriptor closed. The tensor keeps the
    map alive (``torch.frombuffer`` holds a reference); the map is unmapped when the last
    tensor or view of it is gone. ``mmap.close`` must not be called on it: it unmaps even
    while a tensor still points into it.

    Raises:
        OSError: The temporary directory has no room for ``rows * width * 4`` bytes.
    """
    nbytes = max(4, rows * width * 4)  # mmap refuses an empty map
    where = tempfile.gettempdir()
    fd, path = tempfile.mkstemp(prefix=SPILL_PREFIX, dir=where)
    try:
        os.unlink(path)
        try:
            os.posix_fallocate(fd, 0, nbytes)
        except OSError as err:
            if err.errno in (errno.EOPNOTSUPP, errno.EINVAL):
                os.ftruncate(fd, nbytes)
            else:
                raise OSError(
                    err.errno,
                    f"cannot reserve {nbytes / 2**20:.1f} MiB for an evaluation table in {where} "
                    f"({err.strerror}); point TMPDIR at a file system with room, or raise "
                    "--eval-spill-mb (0 keeps tables in memory)",
                ) from err
        table_map = mmap.mmap(fd, nbytes)  # MAP_SHARED, read-write
    finally:
        os.close(fd)
    if hasattr(mmap, "MADV_RANDOM"):
        # Rows are read at random (a neighbour sum, a peer's halo request): without this a
        # fault on an evicted page reads the device's whole read-ahead window around it
        # (8 MiB here), which under a memory limit evicts the rows read next.
        table_map.madvise(mmap.MADV_RANDOM)
    flat = torch.frombuffer(table_map, dtype=torch.float32)
    return flat[: rows * width].view(rows, width), table_map


class LayerTables:
    """A rank's layer output tables by number, in memory or spilled to unlinked files.

    Reads go through ``tables[n]``, ``n in tables`` and :meth:`rows` (a peer's request: a spilled
    table's missing pages are asked for together first, ``store.pages.ReadAhead``, instead of
    one 4 KiB fault at a time on its ``MADV_RANDOM`` map); a table being computed is
    :meth:`buffer` (created at its first chunk, when the width is known) and becomes readable
    at :meth:`publish`, so peers never read a half-written table. :meth:`pop` and
    :meth:`clear` drop tables and their maps; a map is unmapped once no tensor points into it.

    Args:
        spill_mb: Tables of more than this many MiB are spilled (0: none).
    """

    def __init__(self, spill_mb: float = 0.0) -> None:
        self.spill_mb = spill_mb
        self._tables: dict[int, Tensor] = {}
        self._pending: dict[int, Tensor] = {}
        self._maps: dict[int, mmap.mmap] = {}
        self._ahead: dict[int, ReadAhead] = {}

    def __contains__(self, table: object) -> bool:
        return table in self._tables

    def __getitem__(self, table: int) -> Tensor:
        return self._tables[table]

    def rows(self, table: int, pos: np.ndarray) -> Tensor:
        """Rows ``pos`` of published ``table`` (a copy), read ahead where it is spilled."""
        pos = np.asarray(pos, dtype=np.int64)
        return table_rows(self._tables[table], pos, self._ahead.get(table))

    def spills(self, rows: int, width: int) -> bool:
        """Whether a ``[rows, width]`` table goes to a file."""
        return self.spill_mb > 0 and rows * width * 4 > self.spill_mb * 2**20

    def buffer(self, table: int, rows: int, width: int) -> Tensor:
        """The ``[rows, width]`` buffer of unpublished ``table``, made on the first call."""
        if table not in self._pending:
            if self.spills(rows, width):
                self._pending[table], self._maps[table] = spilled_table(rows, width)
            else:
                self._pending[table] = torch.empty(rows, width, dtype=torch.float32)
        out = self._pending[table]
        assert tuple(out.shape) == (rows, width), (tuple(out.shape), rows, width)
        return out

    def publish(self, table: int) -> None:
        """Make the finished ``table`` readable."""
        self._tables[table] = out = self._pending.pop(table)
        if table in self._maps:  # a numpy view whose base is the map: ReadAhead can advise it
            view = np.frombuffer(self._maps[table], dtype=np.float32, count=out.numel())
            self._ahead[table] = ReadAhead(view.reshape(tuple(out.shape)))

    def pop(self, table: int) -> None:
        """Drop ``table`` (published or not), if held."""
        self._tables.pop(table, None)
        self._pending.pop(table, None)
        self._maps.pop(table, None)  # unmapped by its last reference, never by close()
        self._ahead.pop(table, None)

    def clear(self) -> None:
        """Drop every table."""
        self._tables.clear()
        self._pending.clear()
        self._maps.clear()
        self._ahead.clear()

    def spilled(self) -> list[int]:
        """The tables held in files."""
        return sorted(self._maps)


# ---- the C heap ---------------------------------------------------------------------------------
def _libc() -> ctypes.CDLL | None:
    """The C library with its heap calls typed, or ``None`` (the heap calls are then no-ops)."""
    libc = glibc()
    if libc is not None and libc.malloc_trim.argtypes is None:
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return libc


_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number
EVAL_MMAP_THRESHOLD = 4 << 20
"""While a rank evaluates, C allocations of this size or more are their own memory maps."""
TRAIN_MMAP_THRESHOLD = 32 << 20
"""After evaluating: glibc's largest dynamic threshold, which a training epoch reaches."""


def release_free_memory() -> None:
    """Hand the C heap's free pages back to the OS (glibc ``malloc_trim``).

    Evaluation frees tables of hundreds of MiB and many chunk temporaries; glibc keeps freed
    heap pages resident, so without this a layer starts on the last one's high-water mark.
    """
    if (libc := _libc()) is not None:
        libc.malloc_trim(0)


def set_mmap_threshold(nbytes: int) -> None:
    """Serve C allocations of ``nbytes`` or more from their own memory maps (glibc).

    glibc raises this threshold after a large block is freed (up to 32 MiB), after which
    blocks of a few MiB (the answers a rank decodes, the rows it serves, chunk temporaries)
    come from per-thread arenas that keep their pages when freed: at products size that was
    ~0.45 GiB of a worker's evaluation peak. A low threshold while evaluating returns them on
    ``free``, at the price of page faults on fresh blocks, so training runs with the high one.
    """
    if (libc := _libc()) is not None:
        libc.mallopt(_M_MMAP_THRESHOLD, nbytes)


def willneed_rows(table: Tensor, first: int, stop: int) -> None:
    """Ask the kernel to read rows ``[first, stop)`` of a 2-D ``table`` ahead (``MADV_WILLNEED``).

    For a file-mapped table (the shard's features, a spilled layer table) the kernel starts
    reading the whole range at once, in large sequential requests, whatever read-around the
    mapping has (the maps are ``MADV_RANDOM``: a fault alone would read one 4 KiB page). On
    anonymous memory it does nothing.
    """
    if stop <= first or not table.is_contiguous() or table.dim() != 2:
        return
    row = int(table.shape[1]) * table.element_size()
    willneed_range(table.data_ptr() + first * row, (stop - first) * row)


def table_rows(table: Tensor, lid: np.ndarray, ahead: ReadAhead | None = None) -> Tensor:
    """Rows ``lid`` of a 2-D table, their pages asked for before the gather where it is mapped.

    ``pages.dense_range``: when the rows touch most pages of their range anyway (a peer asking
    for a large share of a spilled table), one sequential read-ahead replaces a 4 KiB fault
    per page of the ``MADV_RANDOM`` map. A sparse request goes through ``ahead`` (the
    table's ``ReadAhead``: only the pages it lacks, asked for together) when given.
    """
    if table.is_contiguous() and table.dim() == 2:
        row_bytes = int(table.shape[1]) * table.element_size()
        if not read_ahead_rows(table.data_ptr(), row_bytes, lid) and ahead is not None:
            return torch.from_numpy(ahead.take(np.asarray(lid, dtype=np.int64)))
    return table[torch.from_numpy(lid)]
