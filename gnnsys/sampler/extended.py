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
node is expanded once per tree, at the hop where it is first reached. The draws themselves are
``gnnsys.sampler.candidates.CandidateDraw``'s, which ``HeteroExtendedSampler`` runs per relation.

Randomness: every random number is a splitmix64 hash of ``(seed, hop, fanout, replace, tree,
dst gid, counter)``, so a batch depends only on the batch seed. Cost per hop: ``O(k)`` per
frontier node for unweighted draws from rows whose candidates are a prefix (no time limit, or
time-sorted rows: ``candidates.time_sorted``, which the loaders apply), else ``O(degree)``
(every in-edge gets a score), plus the numbering sort; ``NeighborSampler`` stays the fast path
for plain fanouts.

Shape legend: ``F`` frontier nodes of a hop, ``C`` their candidate in-edges, ``E`` drawn edges,
``B`` seeds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from gnnsys.sampler.base import prefix_blocks
from gnnsys.sampler.candidates import (
    CandidateDraw,
    KeyIds,
    by_position,
    check_strategy,
    seed_times,
)
from gnnsys.sampler.csr_source import CSRNeighborSource
from gnnsys.sampler.draw import draw_key
from gnnsys.types import SampledSubgraph

__all__ = ["ExtendedSampler"]


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
            check_strategy(self.temporal_strategy)

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
        self.config = config
        self.source = source
        self.num_nodes = source.num_rows
        indices = source.indices.numpy()
        self._indices = indices
        self._e_id = None if source.e_id is None else source.e_id.numpy()
        num_edges = int(indices.shape[0])
        self._node_time_N = None
        if node_time is not None:
            if int(node_time.shape[0]) != self.num_nodes:
                raise ValueError(
                    f"node_time has {node_time.shape[0]} entries; the graph has {self.num_nodes}"
                )
            self._node_time_N = node_time.numpy()
        self._candidates = CandidateDraw(
            indptr=source.indptr.numpy(),
            indices=indices,
            weight_C=by_position("edge_weight", edge_weight, self._e_id, num_edges),
            edge_time_C=by_position("edge_time", edge_time, self._e_id, num_edges),
            src_time_N=self._node_time_N,
            strategy=config.temporal_strategy,
            replace=config.replace,
        )
        self.temporal = node_time is not None or edge_time is not None
        self.disjoint = config.disjoint or self.temporal

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
            return seed_times(seed_time, seeds.size)
        if self._node_time_N is None:
            raise ValueError(
                "edge-level temporal sampling needs a time per seed; pass input_time "
                "(NeighborLoader) or edge_label_time (LinkNeighborLoader)"
            )
        out: np.ndarray = self._node_time_N[seeds]
        return out

    def _sample_hops(
        self, seeds: np.ndarray, time_B: np.ndarray | None, seed: int
    ) -> SampledSubgraph:
        num_seeds = int(seeds.shape[0])
        tree_F = np.arange(num_seeds, dtype=np.int64)
        gid_F = seeds
        ids = KeyIds(self._keys(tree_F, gid_F))
        node_parts, tree_parts = [gid_F], [tree_F]
        counts, cols, e_ids, num_edges = [], [], [], []
        for hop, fanout in enumerate(self.config.fanouts):
            key = draw_key(seed, hop, fanout, self.config.replace)
            count_F, pos_E = self._candidates.draw(gid_F, tree_F, time_B, fanout, key)
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
