"""``ExtendedSampler``: PyG's optional sampling modes (disjoint, weighted, temporal) in numpy.

``NeighborSampler`` is the fast path for plain fanout sampling, and the distributed runtime uses
it; this sampler adds the modes of PyG's ``NeighborSampler`` that it lacks, over a whole-graph
``CSRNeighborSource``, with the same output layout (seeds first, one segment per hop, edges
grouped by destination in ``n_id`` order, blocks as prefixes):

* **disjoint**: every seed grows its own tree; a node reached from two seeds appears twice in
  ``n_id``, and ``SampledSubgraph.batch`` names the seed position of every node.
* **weighted** (``edge_weight``): without replacement, the ``k`` edges with the smallest
  Efraimidis-Spirakis keys ``-log(u) / w`` (a weighted draw without replacement; edges of weight
  0 are never drawn); with replacement, ``k`` inverse-CDF draws over the weights.
* **temporal** (``node_time`` or ``edge_time``): a neighbor of a tree rooted at a seed with
  time ``t`` is a candidate only if its node time (or the edge's time) is ``<= t``.
  ``temporal_strategy='uniform'`` draws uniformly among the candidates, ``'last'`` takes the
  ``k`` most recent. As in PyG, temporal sampling is always disjoint.

As in PyG, a node with at most ``k`` candidates (without replacement) takes all of them, and a
node is expanded once per tree, at the hop where it is first reached.

Randomness: every random number is a splitmix64 hash of ``(seed, hop, fanout, replace, tree,
dst gid, counter)``, so a batch depends only on the batch seed. Cost per hop is ``O(sum of the
frontier's degrees)`` (every in-edge gets a key), plus a sort of the drawn edges, unlike
``NeighborSampler``'s ``O(M * k^2)``: use this sampler only for the modes that need it.

Shape legend: ``F`` frontier nodes of a hop, ``C`` their candidate in-edges, ``E`` drawn edges,
``B`` seeds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from gnnsys.sampler.base import prefix_blocks
from gnnsys.sampler.csr_source import CSRNeighborSource
from gnnsys.sampler.draw import draw_key, ragged_range, splitmix64
from gnnsys.types import SampledSubgraph

__all__ = ["ExtendedSampler"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_STRATEGIES = ("uniform", "last")


class ExtendedSampler:
    """Implements ``Sampler`` with disjoint, weighted and temporal neighbor sampling.

    Args:
        config: Fanouts, replacement, disjointness and the temporal strategy.
        source: A whole-graph ``CSRNeighborSource`` (rows = gids).
        edge_weight: ``[E]`` non-negative weights by edge id (``source.e_id`` space), or
            ``None`` for uniform draws.
        node_time: ``[N]`` node timestamps (temporal sampling on nodes), or ``None``.
        edge_time: ``[E]`` edge timestamps by edge id (temporal sampling on edges), or ``None``.

    Raises:
        ValueError: A per-shard source, both times given, wrong lengths, negative weights.
    """

    @dataclass(frozen=True, kw_only=True, slots=True)
    class Config:
        """Sampling settings."""

        fanouts: tuple[int, ...] = (15, 10)
        """Neighbors drawn per hop, seed hop first; -1 takes every candidate neighbor. May be
        empty (zero hops: the batch is its seeds, as PyG's ``num_neighbors=[]``)."""
        replace: bool = False
        """Draw with replacement (exactly ``fanout`` edges for nodes with any candidate)."""
        disjoint: bool = False
        """Every seed grows its own tree (forced on by temporal sampling, as in PyG)."""
        temporal_strategy: str = "uniform"
        """``'uniform'`` among the temporal candidates, or ``'last'``: the most recent."""

        def __post_init__(self) -> None:
            """Reject fanouts of 0 or below -1 and unknown strategies."""
            fanouts = tuple(self.fanouts)
            if any(not isinstance(f, int) or f == 0 or f < -1 for f in fanouts):
                raise ValueError(f"fanouts must be a tuple of ints > 0 or -1, got {self.fanouts!r}")
            object.__setattr__(self, "fanouts", fanouts)
            if self.temporal_strategy not in _STRATEGIES:
                raise ValueError(
                    f"temporal_strategy={self.temporal_strategy!r}; use one of {_STRATEGIES}"
                )

    def __init__(
        self,
        config: Config,
        *,
        source: CSRNeighborSource,
        edge_weight: Tensor | None = None,
        node_time: Tensor | None = None,
        edge_time: Tensor | None = None,
    ) -> None:
        if source.row_of_gid is not None:
            raise ValueError("ExtendedSampler needs a whole-graph CSRNeighborSource (rows = gids)")
        if node_time is not None and edge_time is not None:
            raise ValueError("pass node_time or edge_time, not both (PyG's time_attr is one)")
        self.config = config
        self.source = source
        self.num_nodes = source.num_rows
        self._indptr = source.indptr.numpy()
        self._indices = source.indices.numpy()
        self._e_id = None if source.e_id is None else source.e_id.numpy()
        self._weight_C = self._by_position("edge_weight", edge_weight)
        if self._weight_C is not None and self._weight_C.size and self._weight_C.min() < 0:
            raise ValueError("edge_weight has negative entries; weights must be >= 0")
        self._edge_time_C = self._by_position("edge_time", edge_time)
        self._node_time_N = None
        if node_time is not None:
            if int(node_time.shape[0]) != self.num_nodes:
                raise ValueError(
                    f"node_time has {node_time.shape[0]} entries; the graph has {self.num_nodes}"
                )
            self._node_time_N = node_time.numpy()
        self.temporal = node_time is not None or edge_time is not None
        self.disjoint = config.disjoint or self.temporal

    def _by_position(self, name: str, values: Tensor | None) -> np.ndarray | None:
        """``values`` (by edge id) reordered to CSR positions."""
        if values is None:
            return None
        num_edges = int(self._indices.shape[0])
        if values.dim() != 1 or int(values.shape[0]) != num_edges:
            raise ValueError(
                f"{name} must be a 1-D tensor with one entry per edge ({num_edges}), "
                f"got shape {tuple(values.shape)}"
            )
        out = values.detach().cpu().numpy()
        return out if self._e_id is None else out[self._e_id]

    def sample(
        self, seed_gid: Tensor, *, seed: int, seed_time: Tensor | None = None
    ) -> SampledSubgraph:
        """Sample the ``len(fanouts)``-hop in-neighborhood of ``seed_gid``.

        Args:
            seed_gid: ``[B]`` int64 seed gids (distinct unless disjoint).
            seed: Batch seed; it fixes every draw.
            seed_time: ``[B]`` time of each seed (temporal sampling); ``None`` takes the seeds'
                ``node_time``.

        Returns:
            ``SampledSubgraph``; ``batch`` is set when sampling is disjoint.

        Raises:
            ValueError: Empty, repeated (not disjoint) or out-of-range seeds; edge-level
                temporal sampling without ``seed_time``.
        """
        seeds = seed_gid.long().contiguous().numpy()
        if seeds.ndim != 1 or seeds.size == 0:
            raise ValueError(f"seed_gid must be a non-empty 1-D tensor, got {tuple(seeds.shape)}")
        if int(seeds.min()) < 0 or int(seeds.max()) >= self.num_nodes:
            raise ValueError(f"seed_gid has gids outside [0, {self.num_nodes})")
        if not self.disjoint and np.unique(seeds).size != seeds.size:
            raise ValueError("seed_gid has repeated gids; pass each seed once or use disjoint")
        time_B = self._seed_times(seeds, seed_time)
        return self._sample_hops(seeds, time_B, seed)

    def _seed_times(self, seeds: np.ndarray, seed_time: Tensor | None) -> np.ndarray | None:
        if not self.temporal:
            return None
        if seed_time is not None:
            if int(seed_time.numel()) != seeds.size:
                raise ValueError(
                    f"seed_time has {seed_time.numel()} entries for {seeds.size} seeds"
                )
            out: np.ndarray = seed_time.detach().cpu().numpy().reshape(-1)
            return out
        if self._node_time_N is None:
            raise ValueError(
                "edge-level temporal sampling needs a time per seed; pass input_time "
                "(NeighborLoader) or edge_label_time (LinkNeighborLoader)"
            )
        out = self._node_time_N[seeds]
        return out

    def _sample_hops(
        self, seeds: np.ndarray, time_B: np.ndarray | None, seed: int
    ) -> SampledSubgraph:
        num_seeds = int(seeds.shape[0])
        tree_F = np.arange(num_seeds, dtype=np.int64)
        gid_F = seeds
        ids = _KeyIds(self._keys(tree_F, gid_F))
        node_parts, tree_parts = [gid_F], [tree_F]
        counts, cols, e_ids, num_edges = [], [], [], []
        for hop, fanout in enumerate(self.config.fanouts):
            key = draw_key(seed, hop, fanout, self.config.replace)
            count_F, pos_E = self._draw(gid_F, tree_F, time_B, fanout, key)
            src_E = self._indices.take(pos_E).astype(np.int64, copy=False)
            tree_E = np.repeat(tree_F, count_F)
            col_E, new_keys = ids.number(self._keys(tree_E, src_E))
            gid_F, tree_F = self._split_keys(new_keys)
            node_parts.append(gid_F)
            tree_parts.append(tree_F)
            counts.append(count_F)
            cols.append(col_E)
            e_ids.append(pos_E if self._e_id is None else self._e_id.take(pos_E))
            num_edges.append(int(pos_E.shape[0]))
        batch = torch.from_numpy(np.concatenate(tree_parts)) if self.disjoint else None
        return _assemble(node_parts, counts, cols, e_ids, num_edges, batch)

    def _keys(self, tree: np.ndarray, gid: np.ndarray) -> np.ndarray:
        """One int64 key per (tree, gid) when disjoint, else the gid."""
        return tree * self.num_nodes + gid if self.disjoint else gid

    def _split_keys(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.disjoint:
            return keys % self.num_nodes, keys // self.num_nodes
        return keys, np.zeros_like(keys)

    def _draw(
        self,
        gid_F: np.ndarray,
        tree_F: np.ndarray,
        time_B: np.ndarray | None,
        fanout: int,
        key: int,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(count_F, pos_E)``: drawn CSR positions grouped by frontier node, CSR order."""
        start_F = self._indptr.take(gid_F)
        deg_F = self._indptr.take(gid_F + 1) - start_F
        pos_C = ragged_range(start_F, deg_F)
        row_C = np.repeat(np.arange(gid_F.shape[0], dtype=np.int64), deg_F)
        cand_C = self._temporal_mask(pos_C, tree_F.take(row_C), time_B)
        if cand_C is not None:
            pos_C, row_C = pos_C[cand_C], row_C[cand_C]
        num_f = int(gid_F.shape[0])
        if fanout == -1:
            return np.bincount(row_C, minlength=num_f), pos_C
        if self.config.replace:
            return self._draw_replace(pos_C, row_C, num_f, fanout, key, gid_F, tree_F)
        hash_C = self._hash(key, tree_F.take(row_C), gid_F.take(row_C), pos_C - start_F[row_C])
        score_C = self._scores(pos_C, hash_C)
        return _top_k(pos_C, row_C, score_C, num_f, fanout)

    def _temporal_mask(
        self, pos_C: np.ndarray, tree_C: np.ndarray, time_B: np.ndarray | None
    ) -> np.ndarray | None:
        if time_B is None:
            return None
        limit_C = time_B.take(tree_C)
        if self._edge_time_C is not None:
            mask: np.ndarray = self._edge_time_C.take(pos_C) <= limit_C
            return mask
        assert self._node_time_N is not None  # temporal without edge time means node time
        src_C = self._indices.take(pos_C)
        mask = self._node_time_N.take(src_C) <= limit_C
        return mask

    @staticmethod
    def _hash(key: int, tree: np.ndarray, gid: np.ndarray, counter: np.ndarray) -> np.ndarray:
        """uint64 hashes of ``(key, tree, gid, counter)``, elementwise."""
        h = gid.astype(np.uint64) * _GOLDEN
        h += np.uint64(key)
        h ^= tree.astype(np.uint64) * np.uint64(0xD6E8FEB86659FD93)
        splitmix64(h)
        h += (counter.astype(np.uint64) + np.uint64(1)) * _GOLDEN
        return splitmix64(h)

    def _scores(self, pos_C: np.ndarray, hash_C: np.ndarray) -> np.ndarray:
        """Per-candidate float64 score; each node keeps its ``k`` smallest."""
        unit_C: np.ndarray = ((hash_C >> np.uint64(11)).astype(np.float64) + 1.0) / float(
            1 << 53
        )  # uniform in (0, 1]
        if self.temporal and self.config.temporal_strategy == "last":
            time_C = self._candidate_times(pos_C).astype(np.float64)
            tie_C = pos_C / (float(pos_C.max()) + 2.0 if pos_C.size else 1.0)  # later wins
            last: np.ndarray = -time_C - tie_C
            return last
        if self._weight_C is None:
            return unit_C
        weight_C = self._weight_C.take(pos_C).astype(np.float64)
        with np.errstate(divide="ignore"):
            score: np.ndarray = -np.log(unit_C) / weight_C  # weight 0 -> inf: drawn last
        return score

    def _candidate_times(self, pos_C: np.ndarray) -> np.ndarray:
        if self._edge_time_C is not None:
            return self._edge_time_C.take(pos_C)
        assert self._node_time_N is not None
        return self._node_time_N.take(self._indices.take(pos_C))

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
            np.ones(pos_C.shape[0]) if self._weight_C is None else self._weight_C.take(pos_C)
        ).astype(np.float64)
        cum_C = np.cumsum(weight_C)
        total_F = np.bincount(row_C, weights=weight_C, minlength=num_f)
        first_F = np.searchsorted(row_C, np.arange(num_f))
        base_F = np.where(first_F > 0, cum_C.take(np.maximum(first_F - 1, 0)), 0.0)
        has_F = total_F > 0
        rows = np.repeat(np.flatnonzero(has_F), k)
        draw_i = np.tile(np.arange(k, dtype=np.int64), int(has_F.sum()))
        hash_E = self._hash(key, tree_F.take(rows), gid_F.take(rows), draw_i)
        unit_E = (hash_E >> np.uint64(11)).astype(np.float64) / float(1 << 53)  # [0, 1)
        target_E = base_F.take(rows) + unit_E * total_F.take(rows)
        pick_E = np.searchsorted(cum_C, target_E, side="right")
        last_F = first_F + np.bincount(row_C, minlength=num_f) - 1
        pick_E = np.clip(pick_E, first_F.take(rows), last_F.take(rows))
        count_F = np.where(has_F, k, 0)
        return count_F, pos_C.take(pick_E)


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


class _KeyIds:
    """Key -> local id, numbered by first appearance (PyG's order); sorted arrays, no table."""

    def __init__(self, seed_keys: np.ndarray) -> None:
        order = np.argsort(seed_keys, kind="stable")
        self.keys = seed_keys[order]
        self.ids = order.astype(np.int64)
        self.next_id = int(seed_keys.shape[0])

    def number(self, key_E: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(col_E, new_keys)``: local ids of ``key_E``; unseen keys in first-appearance order."""
        col_E = np.empty(key_E.shape[0], dtype=np.int64)
        at = np.searchsorted(self.keys, key_E).clip(0, max(self.keys.shape[0] - 1, 0))
        hit = self.keys.take(at) == key_E if self.keys.size else np.zeros(key_E.shape, bool)
        col_E[hit] = self.ids.take(at[hit])
        miss = np.flatnonzero(~hit)
        uniq, first, inverse = np.unique(key_E[miss], return_index=True, return_inverse=True)
        rank = np.empty(uniq.shape[0], dtype=np.int64)
        rank[np.argsort(first, kind="stable")] = np.arange(uniq.shape[0])
        col_E[miss] = self.next_id + rank[inverse.reshape(-1)]
        new_keys = uniq[np.argsort(first, kind="stable")]
        merged = np.concatenate([self.keys, uniq])
        merged_ids = np.concatenate([self.ids, self.next_id + rank])
        order = np.argsort(merged, kind="stable")
        self.keys, self.ids = merged[order], merged_ids[order]
        self.next_id += int(uniq.shape[0])
        return col_E, new_keys


def _assemble(
    node_parts: list[np.ndarray],
    counts: list[np.ndarray],
    cols: list[np.ndarray],
    e_ids: list[np.ndarray],
    num_edges: list[int],
    batch: Tensor | None,
) -> SampledSubgraph:
    """Blocks as prefixes of the concatenated hops (input layer first), as NeighborSampler."""
    num_nodes = tuple(int(p.shape[0]) for p in node_parts)
    empty = [np.zeros(0, dtype=np.int64)]  # zero hops: no edges at all
    rowptr = torch.from_numpy(np.concatenate([[0], np.cumsum(np.concatenate(counts + empty))]))
    col = torch.from_numpy(np.concatenate(cols + empty).astype(np.int64, copy=False))
    e_id = torch.from_numpy(np.concatenate(e_ids + empty).astype(np.int64, copy=False))
    return SampledSubgraph(
        n_id=torch.from_numpy(np.concatenate(node_parts).astype(np.int64, copy=False)),
        blocks=prefix_blocks(num_nodes, tuple(num_edges), rowptr, col, e_id),
        batch_size=num_nodes[0],
        num_sampled_nodes=num_nodes,
        num_sampled_edges=tuple(num_edges),
        batch=batch,
    )
