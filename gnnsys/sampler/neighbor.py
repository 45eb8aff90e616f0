"""``NeighborSampler``: multi-hop fanout sampling with PyG's node order and hop-sliced blocks.

Per hop the sampler sends the hop's *new* nodes (deduplicated) to the ``NeighborSource`` in one
call, so a remote source sends one request per hop per owner. Nodes sampled at an earlier hop are
not sampled again (PyG's semantics): hop ``h`` draws in-edges of the nodes first reached at hop
``h - 1`` (the seeds at hop 0).

Layout of the output (``L`` hops, PyG's ``NeighborLoader`` layout)::

    n_id   = [seeds | new at hop 0 | new at hop 1 | ... ]      num_sampled_nodes per segment
    edges  = [hop 0 edges | hop 1 edges | ... ]                num_sampled_edges per hop

Edges are grouped by destination and destinations appear in ``n_id`` order, so the edges of hops
``0 .. h`` form a CSR over the destinations ``n_id[:sum(num_sampled_nodes[:h+1])]``. The block of
layer ``l`` (input layer first) is therefore a *prefix* of the arrays of the input block: every
block is a zero-copy slice.

Relabelling uses a gid -> local-id table of ``N`` int32 kept between batches (as DGL and PyG do
with their hash maps): ``O(E)`` gathers instead of a sort, and only touched entries are reset.
It grows on demand, so a remote source need not tell the sampler ``N``.

Threads (``Config.num_threads``): a hop with enough destinations is cut into contiguous chunks,
one per thread; each thread draws its chunk (when the source allows concurrent calls) and looks
its sources up, and only one scatter-min per hop runs alone (``gnnsys.sampler.relabel``). A
node's draw depends only on ``(seed, hop, gid, degree)`` and ids follow first appearance in the
whole hop, so the batch is identical for every thread count.

Shape legend: ``B`` seeds, ``N`` sampled nodes, ``E`` sampled edges, ``M`` destinations of a hop.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from gnnsys.sampler.base import NeighborSource, prefix_blocks
from gnnsys.sampler.degree import DegreeSource, with_in_degree
from gnnsys.sampler.ordered import OrderedMap
from gnnsys.sampler.relabel import ChunkPool, LocalIds, Piece
from gnnsys.types import SampledSubgraph

__all__ = ["NeighborSampler"]

# Destinations per chunk below which a hop is not split: a chunk must keep a thread busy for
# well over the ~50 us a hand-off costs. 256 splits even the seed hop of a 1024-seed batch
# (its 512-destination chunks draw 7.5k edges each at fanout 15); 2048 left that hop serial
# and cut the measured critical path less (13.6 vs 12.0 ms per batch on the R-MAT benchmark).
_MIN_DST_PER_CHUNK = 256


class NeighborSampler:
    """Implements ``Sampler``: fanout sampling of in-neighbors, hop by hop.

    Args:
        config: Fanouts, replacement and threads.
        source: Where neighbors come from (``CSRNeighborSource`` or a remote implementation).
            A source whose class sets ``concurrent_calls = True`` is called once per chunk, from
            several threads at once; any other source gets one call per hop.
        degrees: Whole-graph in-degrees (``gnnsys.sampler.degree``); when given, every block
            carries ``src_in_degree`` (GCN normalises by it, as PyG's ``GCNConv`` on the whole
            graph). One lookup of ``N`` gids per batch; ``None`` leaves it unset.

    Thread-safe: concurrent ``sample`` calls each take their own id table (``N`` int32, made
    on first use and kept for later calls), so several threads can sample different batches
    at once (``sample_batches`` does this, in order).
    """

    @dataclass(frozen=True, kw_only=True, slots=True)
    class Config:
        """Sampling settings."""

        fanouts: tuple[int, ...] = (15, 10)
        """Neighbors drawn per hop, seed hop first; -1 takes every neighbor."""
        replace: bool = False
        """Draw with replacement (exactly ``fanout`` edges for nodes with any in-edge)."""
        num_threads: int | None = None
        """Threads one ``sample`` call uses (the caller's included); ``None`` follows
        ``torch.get_num_threads()`` at call time, so a Ray worker pinned to 1 thread samples on
        1 thread. The result never depends on it."""

        def __post_init__(self) -> None:
            """Reject fanouts of 0 or below -1, an empty tuple, and num_threads below 1."""
            fanouts = tuple(self.fanouts)
            if not fanouts or any(not isinstance(f, int) or f == 0 or f < -1 for f in fanouts):
                raise ValueError(
                    f"fanouts must be a non-empty tuple of ints > 0 or -1, got {self.fanouts!r}"
                )
            object.__setattr__(self, "fanouts", fanouts)
            threads = self.num_threads
            if threads is not None and (not isinstance(threads, int) or threads < 1):
                raise ValueError(f"num_threads must be an int >= 1 or None, got {threads!r}")

    def __init__(
        self, config: Config, *, source: NeighborSource, degrees: DegreeSource | None = None
    ) -> None:
        if not isinstance(config, NeighborSampler.Config):
            raise TypeError(f"config must be NeighborSampler.Config, got {type(config).__name__}")
        self.config = config
        self.source = source
        self.degrees = degrees
        self._free: list[_Context] = []  # contexts not in use; a call pops one or makes one
        self._lock = threading.Lock()

    def _take_context(self) -> _Context:
        threads = self.config.num_threads or torch.get_num_threads()
        with self._lock:
            ctx = self._free.pop() if self._free else _Context(LocalIds(), ChunkPool(1))
        if ctx.pool.pid != os.getpid():  # forked: the workers stayed in the parent
            ctx.pool = ChunkPool(threads)
        elif ctx.pool.num_threads != threads:
            ctx.pool.close()
            ctx.pool = ChunkPool(threads)
        return ctx

    def _give_back(self, ctx: _Context) -> None:
        with self._lock:
            self._free.append(ctx)

    def sample(self, seed_gid: Tensor, *, seed: int) -> SampledSubgraph:
        """Sample the ``len(fanouts)``-hop in-neighborhood of ``seed_gid``.

        Args:
            seed_gid: ``[B]`` distinct int64 (or int32) seed gids.
            seed: Batch seed (e.g. ``batch_seed(run_seed, epoch, batch_index)``).

        Returns:
            ``SampledSubgraph`` with seeds first in ``n_id`` and blocks input layer first.

        Raises:
            ValueError: Empty or repeated seeds, or a source error (a gid it does not hold).
        """
        if seed_gid.dim() != 1 or seed_gid.numel() == 0:
            raise ValueError(
                f"seed_gid must be a non-empty 1-D tensor, got {tuple(seed_gid.shape)}"
            )
        seeds = seed_gid.long().contiguous().numpy()
        if int(seeds.min()) < 0:
            raise ValueError(f"seed_gid has negative gid {int(seeds.min())}; gids are >= 0")
        ctx = self._take_context()
        try:
            ctx.ids.add_seeds(seeds)
            touched = [seeds]  # every table entry this batch writes; reset before returning
            try:
                sub = self._sample_hops(seeds, seed, ctx, touched)
            finally:
                for gid in touched:  # empty unless a hop raised: _finish resets on success
                    ctx.ids.reset(gid)
        finally:
            self._give_back(ctx)
        if self.degrees is None:
            return sub
        return with_in_degree(sub, self.degrees.in_degree(sub.n_id))

    def sample_batches(
        self, requests: Iterable[tuple[Tensor, int]], *, num_workers: int = 2
    ) -> Iterator[SampledSubgraph]:
        """``sample(seed_gid, seed=seed)`` for every request, ``num_workers`` batches at a time.

        Whole batches run concurrently on worker threads (each with its own id table) and come
        back in request order, identical to sequential ``sample`` calls. This is how gnnsys
        uses a second core: one batch is a few milliseconds of numpy work, too little to split
        across threads without hand-offs costing what the split saves (``Config.num_threads``
        splits a batch; use 1 there when ``num_workers > 1``).

        Args:
            requests: ``(seed_gid, seed)`` pairs, read lazily (at most ``2 * num_workers``
                ahead of the consumer).
            num_workers: Worker threads; 1 samples on one background thread.

        Returns:
            An iterator; ``close()`` on it (or dropping it) stops the workers.

        Raises:
            ValueError: ``num_workers < 1``; errors of ``sample`` re-raise at their batch.
        """
        if not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError(f"num_workers must be an int >= 1, got {num_workers!r}")
        return OrderedMap(
            lambda request: self.sample(request[0], seed=request[1]),
            iter(requests),
            num_workers=num_workers,
            capacity=2 * num_workers,
            name="gnnsys-sampler-batch",
        )

    def _sample_hops(
        self, seeds: np.ndarray, seed: int, ctx: _Context, touched: list[np.ndarray]
    ) -> SampledSubgraph:
        """Run every hop; ``touched`` collects the gids written to the table.

        Rounds per split hop: draw + lookup (which also fills the previous hop's ids), detect,
        assign; two more at the end (fill the last hop while copying the output; reset).
        """
        frontier = seeds
        num_known = int(seeds.shape[0])
        node_parts, hops = [seeds], []
        unfilled: list[Piece] = []
        for hop, fanout in enumerate(self.config.fanouts):
            pieces = self._draw(frontier, fanout, hop, seed, ctx, unfilled)
            touched.extend(p.cand_F for p in pieces)  # claimed; those not assigned need a reset
            num_known = ctx.ids.number(pieces, num_known, ctx.pool)
            del touched[len(touched) - len(pieces) :]  # assigned: each is some piece's new_U
            touched.extend(p.new_U for p in pieces)
            frontier = np.concatenate([p.new_U for p in pieces]) if pieces else seeds[:0]
            node_parts.append(frontier)
            hops.append(pieces)
            unfilled = pieces
        return self._finish(node_parts, hops, ctx, touched)

    def _finish(
        self,
        node_parts: list[np.ndarray],
        hops: list[list[Piece]],
        ctx: _Context,
        touched: list[np.ndarray],
    ) -> SampledSubgraph:
        """Fill the last hop and build the output arrays, then reset the table: two rounds."""
        pieces = [p for hop_pieces in hops for p in hop_pieces]
        first_unfilled = len(pieces) - (len(hops[-1]) if hops else 0)
        ends = np.cumsum([0] + [int(p.src_E.shape[0]) for p in pieces]).tolist()
        num_dst = sum(int(p.count_M.shape[0]) for p in pieces)
        col_all, e_id_all = np.empty(ends[-1], np.int64), np.empty(ends[-1], np.int64)
        rowptr_all = np.zeros(num_dst + 1, dtype=np.int64)
        n_id = np.empty(sum(int(p.shape[0]) for p in node_parts), dtype=np.int64)
        resets = list(touched)  # the seeds and every hop's new gids: each entry written once
        touched.clear()  # from here on nothing can raise between the table and the caller

        def copy(i: int) -> None:  # one piece, or (past the pieces) the rowptr or the n_id
            if i < len(pieces):
                if i >= first_unfilled:
                    ctx.ids.fill(pieces[i])
                col_all[ends[i] : ends[i + 1]] = pieces[i].col_E  # int32 ids widen here
                e_id_all[ends[i] : ends[i + 1]] = pieces[i].e_id_E
            elif i == len(pieces):
                np.concatenate([col_all[:0]] + [p.count_M for p in pieces], out=rowptr_all[1:])
                np.cumsum(rowptr_all, out=rowptr_all)
            else:
                np.concatenate(node_parts, out=n_id)

        jobs = list(range(len(pieces) + 2))
        self._spread(ctx.pool, copy, jobs)
        self._spread(ctx.pool, lambda i: ctx.ids.reset(resets[i]), list(range(len(resets))))
        return _assemble(node_parts, hops, rowptr_all, col_all, e_id_all, n_id)

    @staticmethod
    def _spread(pool: ChunkPool, job: Callable[[int], None], items: list[int]) -> None:
        """Run ``job`` on every item, round-robin over the pool's threads (one hand-off)."""
        step = pool.num_threads

        def task(t: int) -> None:
            for i in items[t::step]:
                job(i)

        pool.map(task, range(min(step, len(items))))

    def _draw(
        self,
        frontier: np.ndarray,
        fanout: int,
        hop: int,
        seed: int,
        ctx: _Context,
        unfilled: list[Piece],
    ) -> list[Piece]:
        """The hop's edges as looked-up pieces (one per thread when the hop is big enough).

        The same round fills ``unfilled``, the previous hop's pieces: that reads table entries
        this round never writes.
        """
        ids, pool = ctx.ids, ctx.pool
        num_chunks = max(1, min(pool.num_threads, frontier.shape[0] // _MIN_DST_PER_CHUNK))
        concurrent = num_chunks > 1 and getattr(self.source, "concurrent_calls", False)
        chunks: list[np.ndarray] = []
        pieces: list[Piece] = []
        if concurrent:
            chunks = np.array_split(frontier, num_chunks)  # drawn inside the round
        elif frontier.size:  # one call, then per-thread lookups
            pieces = _split(self._call_source(frontier, fanout, hop, seed), num_chunks)
            _grow_for(ids, pieces)
        table_size = int(ids.table_N.shape[0])
        num_tasks = max(len(chunks), len(pieces), len(unfilled), 1)

        def task(t: int) -> Piece | None:
            for piece in unfilled[t::num_tasks]:
                ids.fill(piece)
            if t < len(chunks):
                piece = self._call_source(chunks[t], fanout, hop, seed)
                if piece.src_E.size and int(piece.src_E.max()) >= table_size:
                    return piece  # not looked up: the table must grow first, between rounds
            elif t < len(pieces):
                piece = pieces[t]
            else:
                return None
            return ids.lookup(piece)

        done = [p for p in pool.map(task, range(num_tasks)) if p is not None]
        late = [p for p in done if p.col_E.shape != p.src_E.shape]
        if late:  # rare: the table doubles when it grows
            _grow_for(ids, late)
            for piece in late:
                ids.lookup(piece)
        return done

    def _call_source(self, dst: np.ndarray, fanout: int, hop: int, seed: int) -> Piece:
        got = self.source.sample_neighbors(
            torch.from_numpy(dst), fanout, seed=seed, hop=hop, replace=self.config.replace
        )
        return Piece(_np64(got.count_M), _np64(got.src_gid_E), _np64(got.e_id_E))


@dataclass(slots=True)
class _Context:
    """What one in-flight ``sample`` call owns: its id table and its chunk threads."""

    ids: LocalIds
    pool: ChunkPool


def _grow_for(ids: LocalIds, pieces: list[Piece]) -> None:
    ids.grow(max((int(p.src_E.max()) for p in pieces if p.src_E.size), default=0))


def _np64(values: Tensor) -> np.ndarray:
    out: np.ndarray = values.long().contiguous().numpy()
    return out


def _split(piece: Piece, num_chunks: int) -> list[Piece]:
    """Cut one hop's edges into ``num_chunks`` pieces at destination boundaries (views)."""
    if num_chunks == 1:
        return [piece]
    bounds_M = np.linspace(0, piece.count_M.shape[0], num_chunks + 1).astype(np.int64)
    ends_M = np.concatenate([[0], np.cumsum(piece.count_M)])
    cuts = [(int(bounds_M[c]), int(bounds_M[c + 1])) for c in range(num_chunks)]
    return [
        Piece(
            piece.count_M[a:b],
            piece.src_E[ends_M[a] : ends_M[b]],
            piece.e_id_E[ends_M[a] : ends_M[b]],
        )
        for a, b in cuts
    ]


def _assemble(
    node_parts: list[np.ndarray],
    hops: list[list[Piece]],
    rowptr_all: np.ndarray,
    col_all: np.ndarray,
    e_id_all: np.ndarray,
    n_id: np.ndarray,
) -> SampledSubgraph:
    """Cut one prefix block per layer (input layer first) out of the concatenated hops."""
    num_nodes = tuple(int(p.shape[0]) for p in node_parts)
    num_edges = tuple(sum(int(p.src_E.shape[0]) for p in hop_pieces) for hop_pieces in hops)
    rowptr_t, col_t, e_id_t = (torch.from_numpy(a) for a in (rowptr_all, col_all, e_id_all))
    return SampledSubgraph(
        n_id=torch.from_numpy(n_id),
        blocks=prefix_blocks(num_nodes, num_edges, rowptr_t, col_t, e_id_t),
        batch_size=num_nodes[0],
        num_sampled_nodes=num_nodes,
        num_sampled_edges=num_edges,
    )
