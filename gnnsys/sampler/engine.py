"""``FanoutEngine``: the one hop loop of ``gnnsys.sampler.neighbor``'s two fronts.

Hop ``h`` draws, for every relation, in-edges of the destination nodes first reached at hop
``h - 1`` (the seeds at hop 0), and every type numbers its new nodes by first appearance.

Relabelling uses a gid -> local-id table of ``N`` int32 kept between batches (as DGL and PyG do
with their hash maps): ``O(E)`` gathers instead of a sort, and only touched entries are reset.
It grows on demand, so a remote source need not tell the sampler ``N``.

Threads (``Config.num_threads``): a hop with enough destinations is cut into contiguous chunks,
one per thread; each thread draws its chunk (when the source allows concurrent calls) and looks
its sources up, and only one scatter-min per hop runs alone (``gnnsys.sampler.relabel``). A
node's draw depends only on ``(seed, hop, gid, degree)`` and ids follow first appearance in the
whole hop, so the batch is identical for every thread count.

Shape legend: ``N`` sampled nodes, ``E`` sampled edges, ``M`` destinations of a hop.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np
import torch
from torch import Tensor

from gnnsys.sampler.base import NeighborSource
from gnnsys.sampler.relabel import ChunkPool, LocalIds, Piece
from gnnsys.types import EdgeType

__all__ = ["FanoutEngine", "Sampled"]

# Destinations per chunk below which a hop is not split: a chunk must keep a thread busy for
# well over the ~50 us a hand-off costs. 256 splits even the seed hop of a 1024-seed batch
# (its 512-destination chunks draw 7.5k edges each at fanout 15); 2048 left that hop serial
# and cut the measured critical path less (13.6 vs 12.0 ms per batch on the R-MAT benchmark).
_MIN_DST_PER_CHUNK = 256


@dataclass(frozen=True, slots=True, eq=False)
class Sampled:
    """What ``FanoutEngine.run`` returns: per type and per relation, every hop concatenated.

    Attributes:
        n_id: Node type -> ``[N_t]`` int64 ids, seeds first, then every hop's new nodes.
        num_nodes: Node type -> nodes added per hop, seeds first (``L + 1``).
        num_edges: Relation -> edges drawn per hop, seed hop first (``L``).
        rowptr: Relation -> ``[M_r + 1]`` int64 over every hop's destinations, in ``n_id`` order
            of the destination type.
        col: Relation -> ``[E_r]`` int64 local index of each edge's source.
        e_id: Relation -> ``[E_r]`` int64 edge ids.
    """

    n_id: dict[str, Tensor]
    num_nodes: dict[str, tuple[int, ...]]
    num_edges: dict[EdgeType, tuple[int, ...]]
    rowptr: dict[EdgeType, Tensor]
    col: dict[EdgeType, Tensor]
    e_id: dict[EdgeType, Tensor]


class FanoutEngine:
    """Plain fanout sampling over typed nodes: the one hop loop of both samplers.

    Hop ``h`` draws, for every relation ``(src, rel, dst)`` in order, up to ``fanouts[r][h]``
    in-neighbors of the ``dst`` nodes first reached at hop ``h - 1`` (the seeds at hop 0); then
    every source type numbers its new nodes by first appearance over its relations, in order
    (``LocalIds``, one table per type). A homogeneous graph is one type and one relation.

    Args:
        fanouts: Relation -> fanout per hop (every relation the same number of hops); ``0``
            draws none, ``-1`` all.
        sources: Relation -> its ``NeighborSource``.
        node_types: Every node type, in output order.
        replace: Draw with replacement.
        num_threads: Threads per call (the caller's included); ``None`` follows
            ``torch.get_num_threads()`` at call time. The result never depends on it.
        relation_key: ``(batch seed, relation) -> the relation's draw seed``; ``None`` draws
            every relation with the batch seed itself (the one-type case).
    """

    def __init__(
        self,
        fanouts: Mapping[EdgeType, tuple[int, ...]],
        sources: Mapping[EdgeType, NeighborSource],
        node_types: Sequence[str],
        *,
        replace: bool = False,
        num_threads: int | None = None,
        relation_key: Callable[[int, EdgeType], int] | None = None,
    ) -> None:
        self.fanouts = dict(fanouts)
        self.edge_types = list(self.fanouts)
        self.sources = dict(sources)
        self.node_types = list(node_types)
        self.replace = replace
        self.num_threads = num_threads
        self.relation_key = relation_key
        self.num_hops = len(next(iter(self.fanouts.values()), ()))
        self._free: list[_Context] = []  # contexts not in use; a call pops one or makes one
        self._lock = threading.Lock()

    def _take_context(self) -> _Context:
        threads = self.num_threads or torch.get_num_threads()
        with self._lock:
            ctx = self._free.pop() if self._free else None
        if ctx is None:
            ctx = _Context({t: LocalIds() for t in self.node_types}, ChunkPool(1))
        if ctx.pool.pid != os.getpid():  # forked: the workers stayed in the parent
            ctx.pool = ChunkPool(threads)
        elif ctx.pool.num_threads != threads:
            ctx.pool.close()
            ctx.pool = ChunkPool(threads)
        return ctx

    def run(self, seeds: Mapping[str, np.ndarray], seed: int) -> Sampled:
        """Sample from checked seeds (type -> ``[B_t]`` int64 distinct ids >= 0).

        Raises:
            ValueError: Repeated seeds, or a source error (an id it does not hold).
        """
        ctx = self._take_context()
        touched: list[tuple[LocalIds, np.ndarray]] = []  # entries written; reset before return
        try:
            for node_type, lid in seeds.items():
                ctx.ids[node_type].add_seeds(lid)
                touched.append((ctx.ids[node_type], lid))
            try:
                return self._sample_hops(seeds, seed, ctx, touched)
            finally:
                for ids, lid in touched:  # empty unless a hop raised: _finish resets on success
                    ids.reset(lid)
        finally:
            with self._lock:
                self._free.append(ctx)

    def _sample_hops(
        self,
        seeds: Mapping[str, np.ndarray],
        seed: int,
        ctx: _Context,
        touched: list[tuple[LocalIds, np.ndarray]],
    ) -> Sampled:
        """Run every hop; ``touched`` collects the ids written to the tables.

        Rounds per split relation and hop: draw + lookup (the first also fills the previous
        hop's ids), then per source type detect and assign; two more at the end (fill the last
        hop while copying the output; reset).
        """
        empty = np.zeros(0, dtype=np.int64)
        parts = {t: [seeds.get(t, empty)] for t in self.node_types}
        known = {t: int(parts[t][0].shape[0]) for t in self.node_types}
        hops: dict[EdgeType, list[list[Piece]]] = {et: [] for et in self.edge_types}
        unfilled: list[tuple[LocalIds, Piece]] = []
        for hop in range(self.num_hops):
            by_src: dict[str, list[Piece]] = {t: [] for t in self.node_types}
            for et in self.edge_types:
                key = seed if self.relation_key is None else self.relation_key(seed, et)
                pieces = self._draw(et, parts[et[2]][-1], hop, key, ctx, unfilled)
                unfilled = []
                hops[et].append(pieces)
                by_src[et[0]].extend(pieces)
            for node_type, pieces in by_src.items():
                ids = ctx.ids[node_type]
                if not pieces:
                    parts[node_type].append(empty)
                    continue
                claimed = [(ids, p.cand_F) for p in pieces]
                touched.extend(claimed)  # claimed; those not assigned need a reset
                known[node_type] = ids.number(pieces, known[node_type], ctx.pool)
                del touched[len(touched) - len(claimed) :]  # assigned: each is some new_U
                touched.extend((ids, p.new_U) for p in pieces)
                parts[node_type].append(np.concatenate([p.new_U for p in pieces]))
                unfilled.extend((ids, p) for p in pieces)
        return self._finish(parts, hops, ctx, touched)

    def _finish(
        self,
        parts: dict[str, list[np.ndarray]],
        hops: dict[EdgeType, list[list[Piece]]],
        ctx: _Context,
        touched: list[tuple[LocalIds, np.ndarray]],
    ) -> Sampled:
        """Fill the last hop and build the output arrays, then reset the tables: two rounds."""
        jobs: list[Callable[[], object]] = []
        rowptr, col, e_id, n_id = {}, {}, {}, {}
        for et, per_hop in hops.items():
            pieces = [p for hop_pieces in per_hop for p in hop_pieces]
            first_unfilled = len(pieces) - (len(per_hop[-1]) if per_hop else 0)
            ends = np.cumsum([0] + [int(p.src_E.shape[0]) for p in pieces]).tolist()
            col[et], e_id[et] = np.empty(ends[-1], np.int64), np.empty(ends[-1], np.int64)
            num_dst = sum(int(p.count_M.shape[0]) for p in pieces)
            rowptr[et] = np.zeros(num_dst + 1, dtype=np.int64)
            ids = ctx.ids[et[0]]
            jobs += [
                partial(
                    _copy_piece,
                    ids if i >= first_unfilled else None,
                    piece,
                    col[et][ends[i] : ends[i + 1]],
                    e_id[et][ends[i] : ends[i + 1]],
                )
                for i, piece in enumerate(pieces)
            ]
            jobs.append(partial(_rowptr, pieces, rowptr[et]))
        for node_type, arrays in parts.items():
            n_id[node_type] = np.empty(sum(int(a.shape[0]) for a in arrays), dtype=np.int64)
            jobs.append(partial(np.concatenate, arrays, out=n_id[node_type]))
        resets = [partial(ids.reset, gid) for ids, gid in touched]  # each entry written once
        touched.clear()  # from here on nothing can raise between the tables and the caller
        _spread(ctx.pool, jobs)
        _spread(ctx.pool, resets)
        return Sampled(
            n_id={t: torch.from_numpy(a) for t, a in n_id.items()},
            num_nodes={t: tuple(int(a.shape[0]) for a in ps) for t, ps in parts.items()},
            num_edges={
                et: tuple(sum(int(p.src_E.shape[0]) for p in hp) for hp in per_hop)
                for et, per_hop in hops.items()
            },
            rowptr={et: torch.from_numpy(a) for et, a in rowptr.items()},
            col={et: torch.from_numpy(a) for et, a in col.items()},
            e_id={et: torch.from_numpy(a) for et, a in e_id.items()},
        )

    def _draw(
        self,
        edge_type: EdgeType,
        frontier: np.ndarray,
        hop: int,
        key: int,
        ctx: _Context,
        unfilled: list[tuple[LocalIds, Piece]],
    ) -> list[Piece]:
        """One relation's edges of one hop as looked-up pieces (one per thread when big enough).

        The same round fills ``unfilled``, the previous hop's pieces: that reads table entries
        this round never writes.
        """
        ids, pool = ctx.ids[edge_type[0]], ctx.pool
        fanout = self.fanouts[edge_type][hop]
        source = self.sources[edge_type]
        num_chunks = max(1, min(pool.num_threads, frontier.shape[0] // _MIN_DST_PER_CHUNK))
        concurrent = num_chunks > 1 and getattr(source, "concurrent_calls", False)
        chunks: list[np.ndarray] = []
        pieces: list[Piece] = []
        if fanout == 0:  # every destination gets its (empty) row
            if frontier.size:
                none = np.zeros(0, dtype=np.int64)
                pieces = [Piece(np.zeros(frontier.shape[0], np.int64), none, none)]
        elif concurrent:
            chunks = np.array_split(frontier, num_chunks)  # drawn inside the round
        elif frontier.size:  # one call, then per-thread lookups
            call = self._call_source(source, frontier, fanout, hop, key)
            pieces = _split(call, num_chunks)
            _grow_for(ids, pieces)
        table_size = int(ids.table_N.shape[0])
        num_tasks = max(len(chunks), len(pieces), len(unfilled), 1)

        def task(t: int) -> Piece | None:
            for table, piece in unfilled[t::num_tasks]:
                table.fill(piece)
            if t < len(chunks):
                piece = self._call_source(source, chunks[t], fanout, hop, key)
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

    def _call_source(
        self, source: NeighborSource, dst: np.ndarray, fanout: int, hop: int, key: int
    ) -> Piece:
        got = source.sample_neighbors(
            torch.from_numpy(dst), fanout, seed=key, hop=hop, replace=self.replace
        )
        return Piece(_np64(got.count_M), _np64(got.src_gid_E), _np64(got.e_id_E))


@dataclass(slots=True)
class _Context:
    """What one in-flight ``sample`` call owns: its id table and its chunk threads."""

    ids: dict[str, LocalIds]
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


def _copy_piece(ids: LocalIds | None, piece: Piece, col_E: np.ndarray, e_id_E: np.ndarray) -> None:
    """Fill ``piece`` (``ids`` given: a last-hop piece) and copy it into the output."""
    if ids is not None:
        ids.fill(piece)
    col_E[:] = piece.col_E  # int32 ids widen here
    e_id_E[:] = piece.e_id_E


def _rowptr(pieces: list[Piece], rowptr: np.ndarray) -> None:
    np.concatenate([rowptr[:0]] + [p.count_M for p in pieces], out=rowptr[1:])
    np.cumsum(rowptr, out=rowptr)


def _spread(pool: ChunkPool, jobs: Sequence[Callable[[], object]]) -> None:
    """Run every job, round-robin over the pool's threads (one hand-off)."""
    step = pool.num_threads

    def task(t: int) -> None:
        for job in jobs[t::step]:
            job()

    pool.map(task, range(min(step, len(jobs))))
