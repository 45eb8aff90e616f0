"""Per-CSR candidate draws for PyG's optional sampling modes (weighted, temporal, disjoint).

``CandidateDraw`` draws a frontier's in-edges from one CSR (one graph, or one relation of a
heterogeneous graph): every in-edge of a frontier node is a candidate, temporal sampling drops
the candidates later than the frontier's tree root, and each node keeps up to ``k`` of the rest.
Two paths, chosen per call:

* **Prefix path**, ``O(k)`` per node: unweighted draws where each node's candidates are a
  prefix of its row, i.e. no time limit (disjoint trees), or rows in time order
  (``time_sorted``, PyG's ``sort_csc``; the loaders sort, and ``CandidateDraw.prefix`` says
  whether a CSR is sorted) where a bisection finds the prefix. Uniform draws are
  ``draw_positions``' (Floyd's algorithm, as ``NeighborSampler``) on a hash of
  ``(key, tree, node)``; ``'last'`` takes the prefix's last ``k``.
* **Scored path**, ``O(degree)`` per node, for weights and unsorted temporal rows: every
  candidate gets a score and each node keeps its ``k`` smallest: a uniform hash (unsorted
  rows), the Efraimidis-Spirakis key ``-log(u) / w`` (weighted; edges of weight 0 are never
  drawn from a node with more than ``k`` candidates) or minus the time (``'last'``: the same
  edges the prefix path takes). With replacement: ``k`` inverse-CDF draws over the weights.

A node with at most ``k`` candidates (without replacement) takes all of them, as in PyG.

``KeyIds`` numbers ``(tree, node)`` keys by first appearance, as PyG orders a batch's nodes.
``ExtendedSampler`` runs both once per relation (one for a homogeneous graph).

Randomness: every random number is a splitmix64 hash of ``(key, tree, dst gid, counter)``, where
the caller's ``key`` mixes the batch seed, hop, fanout and replacement, so a batch depends only
on its seed.

Shape legend: ``F`` frontier nodes of a hop, ``C`` their candidate in-edges, ``E`` drawn edges,
``B`` trees (seeds), ``N`` nodes (of the source type).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from gnnsys.sampler.csr_source import CSRNeighborSource
from gnnsys.sampler.draw import draw_positions, ragged_range, splitmix64

__all__ = [
    "STRATEGIES",
    "CandidateDraw",
    "KeyIds",
    "by_position",
    "check_strategy",
    "seed_times",
    "time_sorted",
]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
STRATEGIES = ("uniform", "last")
"""PyG's ``temporal_strategy`` values."""


def by_position(
    name: str, values: Tensor | None, e_id: np.ndarray | None, num_edges: int
) -> np.ndarray | None:
    """``values`` (one entry per edge id) reordered to CSR positions (``e_id``: position's id).

    Raises:
        ValueError: ``values`` is not 1-D with ``num_edges`` entries.
    """
    if values is None:
        return None
    if values.dim() != 1 or int(values.shape[0]) != num_edges:
        raise ValueError(
            f"{name} must be a 1-D tensor with one entry per edge ({num_edges}), "
            f"got shape {tuple(values.shape)}"
        )
    out: np.ndarray = values.detach().cpu().numpy()
    return out if e_id is None else out[e_id]


def check_strategy(strategy: str) -> None:
    """Raises ``ValueError`` unless ``strategy`` is one of ``STRATEGIES``."""
    if strategy not in STRATEGIES:
        raise ValueError(f"temporal_strategy={strategy!r}; use one of {STRATEGIES}")


def seed_times(seed_time: Tensor, num_seeds: int) -> np.ndarray:
    """The caller's ``[B]`` seed times as numpy.

    Raises:
        ValueError: Not one entry per seed.
    """
    if int(seed_time.numel()) != num_seeds:
        raise ValueError(f"seed_time has {seed_time.numel()} entries for {num_seeds} seeds")
    out: np.ndarray = seed_time.detach().cpu().numpy().reshape(-1)
    return out


def time_sorted(
    source: CSRNeighborSource,
    *,
    src_time: Tensor | None = None,
    edge_time: Tensor | None = None,
) -> CSRNeighborSource:
    """``source`` with each row's edges in time order: the source node's or the edge's.

    PyG's ``sort_csc`` for temporal sampling: stable, so equal times keep their order, and
    ``e_id`` follows the edges. Only the order of a batch's nodes depends on it (``-1`` fanouts
    and ties in ``'last'`` take candidates in CSR order). Costs a copy of ``indices``/``e_id``.
    With neither time, ``source`` is returned as is.

    Args:
        source: A whole-graph CSR.
        src_time: ``[N]`` times of the source nodes (``indices`` space).
        edge_time: ``[E]`` times by edge id (``source.e_id`` space).

    Raises:
        ValueError: A time of the wrong length.
    """
    indptr = source.indptr.numpy()
    indices = source.indices.numpy()
    e_id = np.arange(indices.shape[0]) if source.e_id is None else source.e_id.numpy()
    time_C = by_position("edge_time", edge_time, e_id, int(indices.shape[0]))
    if src_time is not None:
        limit = int(indices.max()) + 1 if indices.size else 0
        if src_time.dim() != 1 or int(src_time.shape[0]) < limit:
            raise ValueError(
                f"node time has shape {tuple(src_time.shape)}; the edges name nodes up to "
                f"{limit - 1}: give one time per node"
            )
        time_C = src_time.detach().cpu().numpy().take(indices)
    if time_C is None:
        return source
    row_C = np.repeat(np.arange(indptr.shape[0] - 1), np.diff(indptr))
    order = np.lexsort((time_C, row_C))
    return CSRNeighborSource(
        source.indptr, torch.from_numpy(indices[order]), torch.from_numpy(e_id[order])
    )


class CandidateDraw:
    """Draws frontier nodes' in-edges from one CSR (see the module docstring).

    Args:
        indptr: ``[M + 1]`` CSR offsets by destination.
        indices: ``[C]`` source ids by CSR position.
        weight_C: ``[C]`` non-negative weights by CSR position, or ``None`` (uniform).
        edge_time_C: ``[C]`` edge times by CSR position, or ``None``.
        src_time_N: ``[N]`` source node times, or ``None``. At most one time may be given;
            with neither, no candidate is dropped even when the caller passes tree times.
        strategy: ``'uniform'`` or ``'last'`` (temporal only).
        replace: Draw with replacement.

    Raises:
        ValueError: Negative weights, both times, or an unknown strategy.
    """

    def __init__(
        self,
        *,
        indptr: np.ndarray,
        indices: np.ndarray,
        weight_C: np.ndarray | None = None,
        edge_time_C: np.ndarray | None = None,
        src_time_N: np.ndarray | None = None,
        strategy: str = "uniform",
        replace: bool = False,
    ) -> None:
        if weight_C is not None and weight_C.size and weight_C.min() < 0:
            raise ValueError("edge_weight has negative entries; weights must be >= 0")
        if edge_time_C is not None and src_time_N is not None:
            raise ValueError("pass node_time or edge_time, not both (PyG's time_attr is one)")
        check_strategy(strategy)
        self.indptr, self.indices = indptr, indices
        self.weight_C, self.edge_time_C, self.src_time_N = weight_C, edge_time_C, src_time_N
        self.temporal = edge_time_C is not None or src_time_N is not None
        self.strategy, self.replace = strategy, replace
        self.prefix = self.temporal and _rows_sorted(indptr, self._times(None))
        """Every row's in-edges are in time order, so a tree's candidates are a prefix."""

    def draw(
        self,
        gid_F: np.ndarray,
        tree_F: np.ndarray,
        time_B: np.ndarray | None,
        fanout: int,
        key: int,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(count_F, pos_E)``: drawn CSR positions grouped by frontier node.

        Within a node, positions are in CSR order, except for uniform draws of ``k`` among
        more than ``k`` prefix candidates, which come in Floyd's draw order.

        Args:
            gid_F: Frontier node ids (CSR rows).
            tree_F: The tree of each frontier node (it seeds the hashes): the seed position at
                hop 0, afterwards the tree (disjoint) or 0.
            time_B: Each tree's time limit (temporal), or ``None``.
            fanout: ``k``; ``-1`` takes every candidate.
            key: The draw's key (``draw_key`` of the batch seed, hop, fanout, replacement).
        """
        start_F = self.indptr.take(gid_F)
        deg_F = self.indptr.take(gid_F + 1) - start_F
        masking = time_B is not None and self.temporal
        if self.weight_C is None and (self.prefix or not masking):
            limit_F = None if time_B is None or not masking else time_B.take(tree_F)
            return self._draw_prefix(gid_F, tree_F, start_F, deg_F, limit_F, fanout, key)
        pos_C = ragged_range(start_F, deg_F)
        row_C = np.repeat(np.arange(gid_F.shape[0], dtype=np.int64), deg_F)
        if masking:
            assert time_B is not None  # masking implies it
            keep_C = self._times(pos_C) <= time_B.take(tree_F.take(row_C))
            pos_C, row_C = pos_C[keep_C], row_C[keep_C]
        num_f = int(gid_F.shape[0])
        if fanout == -1:
            return np.bincount(row_C, minlength=num_f), pos_C
        if self.replace:
            return self._draw_replace(pos_C, row_C, num_f, fanout, key, gid_F, tree_F)
        hash_C = _hash(key, tree_F.take(row_C), gid_F.take(row_C), pos_C - start_F[row_C])
        return _top_k(pos_C, row_C, self._scores(pos_C, hash_C), num_f, fanout)

    def _draw_prefix(
        self,
        gid_F: np.ndarray,
        tree_F: np.ndarray,
        start_F: np.ndarray,
        deg_F: np.ndarray,
        limit_F: np.ndarray | None,
        fanout: int,
        key: int,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Unweighted draws when each node's candidates are a prefix of its row: ``O(k)`` each.

        The prefix is the whole row (no time limit) or, in time-sorted rows, the edges up to
        the tree's time (a binary search). Uniform draws are ``draw_positions``' (Floyd's
        algorithm, as ``NeighborSampler``) hashed on ``(key, tree, node)``; ``'last'`` takes
        the prefix's last ``k``: the ``k`` largest times, later positions winning ties, the
        set the scored path takes.
        """
        count_F = deg_F if limit_F is None else self._prefix_length(start_F, deg_F, limit_F)
        if limit_F is not None and self.strategy == "last" and fanout != -1 and not self.replace:
            take_F = np.minimum(count_F, fanout)
            return take_F, ragged_range(start_F + count_F - take_F, take_F)
        row_key_F = _hash(key, tree_F, gid_F, np.zeros_like(gid_F)).view(np.int64)
        return draw_positions(row_key_F, start_F, count_F, fanout, key=key, replace=self.replace)

    def _prefix_length(
        self, start_F: np.ndarray, deg_F: np.ndarray, limit_F: np.ndarray
    ) -> np.ndarray:
        """Per node, how many of its time-sorted in-edges have time ``<= limit`` (bisection)."""
        lo_F, hi_F = start_F.copy(), start_F + deg_F
        open_F = np.flatnonzero(lo_F < hi_F)
        while open_F.size:  # ~log2(max degree) rounds over the still-open rows
            lo, hi = lo_F.take(open_F), hi_F.take(open_F)
            mid = (lo + hi) // 2
            early = self._times(mid) <= limit_F.take(open_F)
            lo_F[open_F] = np.where(early, mid + 1, lo)
            hi_F[open_F] = np.where(early, hi, mid)
            open_F = open_F[lo_F.take(open_F) < hi_F.take(open_F)]
        out: np.ndarray = lo_F - start_F
        return out

    def _scores(self, pos_C: np.ndarray, hash_C: np.ndarray) -> np.ndarray:
        """Per-candidate float64 score; each node keeps its ``k`` smallest."""
        unit_C: np.ndarray = ((hash_C >> np.uint64(11)).astype(np.float64) + 1.0) / float(
            1 << 53
        )  # uniform in (0, 1]
        if self.temporal and self.strategy == "last":
            time_C = self._times(pos_C).astype(np.float64)
            tie_C = pos_C / (float(pos_C.max()) + 2.0 if pos_C.size else 1.0)  # later wins
            last: np.ndarray = -time_C - tie_C
            return last
        if self.weight_C is None:
            return unit_C
        weight_C = self.weight_C.take(pos_C).astype(np.float64)
        with np.errstate(divide="ignore"):
            score: np.ndarray = -np.log(unit_C) / weight_C  # weight 0 -> inf: drawn last
        return score

    def _times(self, pos_C: np.ndarray | None) -> np.ndarray:
        """Times at CSR positions ``pos_C`` (``None``: every position); temporal only."""
        if self.edge_time_C is not None:
            return self.edge_time_C if pos_C is None else self.edge_time_C.take(pos_C)
        assert self.src_time_N is not None  # only called when temporal
        indices = self.indices if pos_C is None else self.indices.take(pos_C)
        return self.src_time_N.take(indices)

    def _draw_replace(
        self,
        pos_C: np.ndarray,
        row_C: np.ndarray,
        num_f: int,
        k: int,
        key: int,
        gid_F: np.ndarray,
        tree_F: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``k`` draws with replacement per node with any candidate (weighted: inverse CDF)."""
        if pos_C.size == 0:
            return np.zeros(num_f, dtype=np.int64), pos_C
        weight_C = (
            np.ones(pos_C.shape[0]) if self.weight_C is None else self.weight_C.take(pos_C)
        ).astype(np.float64)
        cum_C = np.cumsum(weight_C)
        total_F = np.bincount(row_C, weights=weight_C, minlength=num_f)
        first_F = np.searchsorted(row_C, np.arange(num_f))
        base_F = np.where(first_F > 0, cum_C.take(np.maximum(first_F - 1, 0)), 0.0)
        has_F = total_F > 0
        rows = np.repeat(np.flatnonzero(has_F), k)
        draw_i = np.tile(np.arange(k, dtype=np.int64), int(has_F.sum()))
        hash_E = _hash(key, tree_F.take(rows), gid_F.take(rows), draw_i)
        unit_E = (hash_E >> np.uint64(11)).astype(np.float64) / float(1 << 53)  # [0, 1)
        target_E = base_F.take(rows) + unit_E * total_F.take(rows)
        pick_E = np.searchsorted(cum_C, target_E, side="right")
        last_F = first_F + np.bincount(row_C, minlength=num_f) - 1
        pick_E = np.clip(pick_E, first_F.take(rows), last_F.take(rows))
        count_F = np.where(has_F, k, 0)
        return count_F, pos_C.take(pick_E)


def _rows_sorted(indptr: np.ndarray, time_C: np.ndarray) -> bool:
    """Whether every CSR row's times are non-decreasing (one pass over the edges)."""
    if time_C.size < 2:
        return True
    rising = time_C[1:] >= time_C[:-1]
    starts = indptr[1:-1]
    rising[starts[(starts > 0) & (starts < time_C.size)] - 1] = True  # rows may restart
    return bool(rising.all())


def _hash(key: int, tree: np.ndarray, gid: np.ndarray, counter: np.ndarray) -> np.ndarray:
    """uint64 hashes of ``(key, tree, gid, counter)``, elementwise."""
    h = gid.astype(np.uint64) * _GOLDEN
    h += np.uint64(key)
    h ^= tree.astype(np.uint64) * np.uint64(0xD6E8FEB86659FD93)
    splitmix64(h)
    h += (counter.astype(np.uint64) + np.uint64(1)) * _GOLDEN
    return splitmix64(h)


def _top_k(
    pos_C: np.ndarray, row_C: np.ndarray, score_C: np.ndarray, num_f: int, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per node, all candidates when it has at most ``k``, else the ``k`` smallest scores.

    Non-finite scores (weight 0) are never drawn from a node with more than ``k`` candidates.
    Output in CSR order.
    """
    cand_F = np.bincount(row_C, minlength=num_f)
    many_C = cand_F.take(row_C) > k
    order = np.lexsort((score_C, row_C))  # by node, then score
    rank = np.arange(order.shape[0]) - np.searchsorted(row_C[order], row_C[order])
    keep = np.zeros(pos_C.shape[0], dtype=bool)
    keep[order] = rank < k
    keep &= ~many_C | np.isfinite(score_C)
    keep |= ~many_C
    chosen = np.flatnonzero(keep)  # ascending = node order, then CSR position
    return np.bincount(row_C[chosen], minlength=num_f), pos_C[chosen]


class KeyIds:
    """Key -> local id, numbered by first appearance (PyG's order); sorted arrays, no table.

    A call's new keys are merged into the sorted arrays at the start of the next call (a
    linear ``searchsorted`` + ``insert``, not a re-sort), so the last hop never pays for it.
    """

    def __init__(self, seed_keys: np.ndarray) -> None:
        order = np.argsort(seed_keys, kind="stable")
        self.keys = seed_keys[order]
        self.ids = order.astype(np.int64)
        self.next_id = int(seed_keys.shape[0])
        self._pending: tuple[np.ndarray, np.ndarray] | None = None
        """The last call's new keys (sorted) and their ids, not yet in ``keys``/``ids``."""

    def _merge(self) -> None:
        if self._pending is None:
            return
        uniq, ids = self._pending
        self._pending = None
        at = np.searchsorted(self.keys, uniq)  # uniq holds no known key
        self.keys, self.ids = np.insert(self.keys, at, uniq), np.insert(self.ids, at, ids)

    def number(self, key_E: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(col_E, new_keys)``: local ids of ``key_E``; unseen keys in first-appearance order."""
        self._merge()
        col_E = np.empty(key_E.shape[0], dtype=np.int64)
        at = np.searchsorted(self.keys, key_E).clip(0, max(self.keys.shape[0] - 1, 0))
        hit = self.keys.take(at) == key_E if self.keys.size else np.zeros(key_E.shape, bool)
        col_E[hit] = self.ids.take(at[hit])
        miss = np.flatnonzero(~hit)
        uniq, first, inverse = np.unique(key_E[miss], return_index=True, return_inverse=True)
        by_first = np.argsort(first)  # first positions are distinct: no ties to keep stable
        rank = np.empty(uniq.shape[0], dtype=np.int64)
        rank[by_first] = np.arange(uniq.shape[0])
        col_E[miss] = self.next_id + rank[inverse.reshape(-1)]
        self._pending = (uniq, self.next_id + rank)
        self.next_id += int(uniq.shape[0])
        return col_E, uniq[by_first]
