"""Gid -> local id numbering for one batch, split into chunks that threads process at once.

The sampler numbers sources by first appearance (PyG's order): the seeds are ``0 .. B-1``, then
each hop's unseen sources get the next ids in the order they first occur in the hop's edges.
A table of ``N`` int32 (``-1`` = unseen) is kept between batches (as DGL and PyG keep their hash
maps); only touched entries are reset, so a batch costs ``O(E)`` and never ``O(N)``.

One hop's edges arrive as ``Piece`` s, contiguous chunks of the hop's edge list. Every step
below is per piece (a thread each) except ``claim``, a scatter-min that must not race::

    lookup  (parallel)  col = table[src]; fresh = positions where col < 0; cand = src[fresh]
    claim   (serial)    table[cand] = min over occurrences of (global position - BIAS)
    detect  (parallel)  first = positions where table[cand] == own position (first occurrence)
    assign  (parallel)  table[cand[first]] = next ids, in position order across pieces
    fill    (parallel)  col[fresh] = table[cand]

``detect`` reads entries another piece's ``assign`` may write, so the two are separate rounds;
the values compared are biased positions (below ``-1``) or ids (``>= 0``) and never collide.
Min and position order do not depend on where the chunks are cut, so the ids (and the whole
batch) are identical for any thread count.

Every array op in the parallel steps is numpy: single-threaded per call and the GIL is released
inside it, so two threads on two pieces overlap; torch ops would start their own intra-op
threads per call. The serial ``claim`` uses torch's faster scatter-min.

Shape legend: ``E`` edges of a piece, ``F`` fresh sources of a piece, ``U`` first occurrences.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar, cast

import numpy as np
import torch

__all__ = ["ChunkPool", "LocalIds", "Piece"]

_UNSEEN = -1
_BIAS = (1 << 31) - 2  # claim stores position - _BIAS: always below _UNSEEN for int32 positions

_T = TypeVar("_T")
_R = TypeVar("_R")


@dataclass(slots=True)
class Piece:
    """One chunk of one hop's drawn edges while it is numbered (a private working record).

    Attributes:
        count_M: ``[M]`` edges per destination of this chunk.
        src_E: ``[E]`` int64 source gids, grouped by destination.
        e_id_E: ``[E]`` int64 edge ids.
        col_E: ``[E]`` int32 local source ids; ``-1`` at ``fresh_F`` until ``fill``.
        fresh_F: Positions in ``src_E`` of sources unseen before this hop.
        cand_F: ``src_E[fresh_F]``.
        base: Global position of ``cand_F[0]`` among the hop's fresh sources.
        new_U: Gids first occurring in this piece, in position order (set by ``detect``).
        first_id: Local id of ``new_U[0]`` (set between ``detect`` and ``assign``).
    """

    count_M: np.ndarray
    src_E: np.ndarray
    e_id_E: np.ndarray
    col_E: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    fresh_F: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    cand_F: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    base: int = 0
    new_U: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    first_id: int = 0


class ChunkPool:
    """Runs one function over a few chunks on up to ``num_threads`` threads, the caller's too.

    The threads pull chunks from a shared counter, so a thread the OS preempts (the machine is
    shared) delays the round by at most the chunk it holds: the others take the rest.

    Args:
        num_threads: Threads used at most (the caller's included); 1 runs everything inline.
    """

    def __init__(self, num_threads: int) -> None:
        self.num_threads = num_threads
        self.pid = os.getpid()  # a forked child inherits the pool but not its threads
        self._pool: ThreadPoolExecutor | None = None
        if num_threads > 1:
            self._pool = ThreadPoolExecutor(num_threads - 1, thread_name_prefix="gnnsys-sampler")

    def map(self, fn: Callable[[_T], _R], items: Sequence[_T]) -> list[_R]:
        """``[fn(x) for x in items]``, concurrently; waits for all before raising any error.

        Returns once every item is done, without waiting for a helper thread that never got
        to run: it finds the counter exhausted later and does nothing.
        """
        if self._pool is None or len(items) < 2:
            return [fn(x) for x in items]
        results: list[_R | None] = [None] * len(items)
        errors: list[BaseException] = []
        order, finished = itertools.count(), itertools.count(1)  # next() is atomic (GIL)
        all_done = threading.Event()

        def drain() -> None:
            for i in iter(order.__next__, None):
                if i >= len(items):
                    return
                try:
                    if not errors:
                        results[i] = fn(items[i])
                except BaseException as error:  # re-raised by the caller below
                    errors.append(error)
                if next(finished) == len(items):
                    all_done.set()

        for _ in range(min(self.num_threads, len(items)) - 1):
            self._pool.submit(drain)
        drain()
        all_done.wait()  # every item done: the table is quiet before the caller goes on
        if errors:
            raise errors[0]
        return cast(list[_R], results)  # every slot is set when no item raised

    def close(self) -> None:
        """Stop the worker threads (idle ones also exit when the pool is garbage collected)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


class LocalIds:
    """The gid -> local id table of one sampler (grows on demand; ``-1`` means unseen)."""

    def __init__(self) -> None:
        self.table_N = np.full(0, _UNSEEN, dtype=np.int32)

    def grow(self, max_gid: int) -> None:
        """Make room for ``max_gid`` (doubling, so growth is rare). Call between rounds only."""
        size = int(self.table_N.shape[0])
        if max_gid >= size:
            grown = np.full(max(max_gid + 1, 2 * size), _UNSEEN, dtype=np.int32)
            grown[:size] = self.table_N
            self.table_N = grown

    def add_seeds(self, seed_gid: np.ndarray) -> None:
        """Number the seeds ``0 .. B-1``; raises ``ValueError`` (table untouched) on repeats."""
        self.grow(int(seed_gid.max()))
        local_B = np.arange(seed_gid.shape[0], dtype=np.int32)
        self.table_N[seed_gid] = local_B
        if not np.array_equal(self.table_N.take(seed_gid), local_B):
            self.table_N[seed_gid] = _UNSEEN
            raise ValueError("seed_gid has repeated gids; pass each seed once (e.g. torch.unique)")

    def lookup(self, piece: Piece) -> Piece:
        """Known ids of the piece's sources; collects the unseen ones (parallel-safe: reads)."""
        col_E = self.table_N.take(piece.src_E)
        piece.col_E = col_E
        piece.fresh_F = np.flatnonzero(col_E < 0)
        piece.cand_F = piece.src_E.take(piece.fresh_F)
        return piece

    def claim(self, pieces: Sequence[Piece]) -> None:
        """Serial: every unseen gid's entry becomes its first global position, biased."""
        table_N = torch.from_numpy(self.table_N)  # same memory
        base = 0
        for piece in pieces:
            piece.base = base
            num = int(piece.cand_F.shape[0])
            # torch's scatter-min is 1.5-3x numpy's np.minimum.at here; it runs alone, so its
            # intra-op threads (if any) cannot collide with the numpy workers.
            biased_F = torch.from_numpy(self._biased(base, num))
            table_N.scatter_reduce_(0, torch.from_numpy(piece.cand_F), biased_F, reduce="amin")
            base += num

    @staticmethod
    def _biased(base: int, num: int) -> np.ndarray:
        return np.arange(base - _BIAS, base + num - _BIAS, dtype=np.int32)

    def detect(self, piece: Piece) -> Piece:
        """The gids whose first occurrence lies in this piece (parallel-safe, see module doc)."""
        claimed_F = self.table_N.take(piece.cand_F)
        first_U = np.flatnonzero(claimed_F == self._biased(piece.base, claimed_F.shape[0]))
        piece.new_U = piece.cand_F.take(first_U)
        return piece

    def assign(self, piece: Piece) -> None:
        """Ids ``first_id ..`` for the piece's new gids (pieces write disjoint entries)."""
        num = int(piece.new_U.shape[0])
        ids_U = np.arange(piece.first_id, piece.first_id + num, dtype=np.int32)
        self.table_N[piece.new_U] = ids_U

    def number(self, pieces: Sequence[Piece], num_known: int, pool: ChunkPool) -> int:
        """Give one hop's unseen sources ids from ``num_known`` on; returns the next free id.

        Every piece must have been through ``lookup``; afterwards ``new_U`` lists the hop's new
        gids, piece by piece, in id order, and ``fill`` may complete each ``col_E`` (the
        sampler runs it in its next round).
        """
        self.claim(pieces)
        pool.map(self.detect, pieces)
        for piece in pieces:
            piece.first_id = num_known
            num_known += int(piece.new_U.shape[0])
        pool.map(self.assign, pieces)
        return num_known

    def fill(self, piece: Piece) -> None:
        """Local ids of the piece's fresh sources, once every piece of the hop is assigned."""
        piece.col_E[piece.fresh_F] = self.table_N.take(piece.cand_F)

    def reset(self, gid: np.ndarray) -> None:
        """Mark ``gid`` unseen again (the gids a batch numbered, plus any it claimed)."""
        self.table_N[gid] = _UNSEEN
