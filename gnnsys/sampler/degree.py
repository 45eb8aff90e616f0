"""Whole-graph in-degrees for the sampled blocks: ``DegreeTable`` and ``with_in_degree``.

GCN normalises an edge ``j -> i`` by ``(deg_i deg_j) ** -0.5`` with ``deg = in-degree + 1`` of
the *whole graph* (PyG's ``GCNConv``: ``gcn_norm`` counts the in-edges of every node after
adding self loops). A sampled block holds only the drawn edges, so degrees counted inside it are
wrong for every node whose neighbourhood was cut (the last hop's sources have none at all). The
sampler therefore stamps each block with ``Block.src_in_degree`` from a ``DegreeSource``:

- replicated / single process: ``DegreeTable.from_indptr(graph.indptr)``, every node's
  ``indptr[g + 1] - indptr[g]`` (no copy: the CSR is the table);
- partitioned: ``gnnsys.train.remote.degrees.RoutedDegreeSource``, a ``DegreeTable`` of the
  rank's owned and halo nodes (halo degrees fetched from their owners once) with a fallback to
  the owners for nodes outside it.

Shape legend: ``K`` looked-up gids, ``T`` entries of a table, ``N`` sampled nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
import torch
from torch import Tensor

from gnnsys.types import SampledSubgraph

__all__ = ["DegreeLookup", "DegreeSource", "DegreeTable", "with_in_degree"]


class DegreeSource(Protocol):
    """Answers whole-graph in-degrees (self loops not counted) of any gid."""

    def in_degree(self, gid: Tensor) -> Tensor:
        """``[K]`` int64 in-degrees of ``gid`` ``[K]`` in the whole graph."""
        ...


@dataclass(frozen=True, slots=True, eq=False)
class DegreeLookup:
    """Result of ``DegreeTable.lookup``; entries at ``miss_pos`` are 0 until filled.

    Attributes:
        degree_K: ``[K]`` int64 in-degrees, in request order.
        miss_pos: ``[X]`` int64 positions in the request the table does not hold.
    """

    degree_K: np.ndarray
    miss_pos: np.ndarray


class DegreeTable:
    """Implements ``DegreeSource`` over a fixed set of gids (all of them, or a sorted subset).

    Args:
        degree_T: ``[T]`` int in-degrees.
        gid_T: ``[T]`` int64 gids of the entries, strictly ascending; ``None``: entry ``g``
            is gid ``g`` (the table covers gids ``0 .. T-1``).

    Raises:
        ValueError: ``gid_T`` and ``degree_T`` differ in length or ``gid_T`` is not ascending.
    """

    def __init__(self, degree_T: np.ndarray, gid_T: np.ndarray | None = None) -> None:
        self.degree_T = np.asarray(degree_T)
        self.gid_T = None if gid_T is None else np.asarray(gid_T, dtype=np.int64)
        if self.gid_T is not None:
            if self.gid_T.shape != self.degree_T.shape:
                raise ValueError(
                    f"gid_T {self.gid_T.shape} and degree_T {self.degree_T.shape} differ; "
                    "pass one degree per gid"
                )
            if self.gid_T.size > 1 and not bool(np.all(self.gid_T[1:] > self.gid_T[:-1])):
                raise ValueError("gid_T must be strictly ascending; sort it (np.argsort) first")

    @classmethod
    def from_indptr(cls, indptr: np.ndarray) -> DegreeTable:
        """Every node of a whole-graph in-edge CSR (row = gid): ``indptr[g+1] - indptr[g]``."""
        indptr = np.asarray(indptr)
        return cls(indptr[1:] - indptr[:-1])

    @classmethod
    def from_pairs(cls, gid: np.ndarray, degree: np.ndarray) -> DegreeTable:
        """A table of distinct ``gid`` in any order (sorted here, once)."""
        gid = np.asarray(gid, dtype=np.int64)
        order = np.argsort(gid, kind="stable")
        return cls(np.asarray(degree)[order], gid[order])

    @property
    def num_entries(self) -> int:
        """``T``."""
        return int(self.degree_T.shape[0])

    def lookup(self, gid_K: np.ndarray) -> DegreeLookup:
        """Degrees of ``gid_K`` held here, and the positions of the others (no exception)."""
        gid_K = np.asarray(gid_K, dtype=np.int64)
        if self.gid_T is None:
            held_K = (gid_K >= 0) & (gid_K < self.num_entries)
            slot_K = np.where(held_K, gid_K, 0)
        else:  # O(K log T): a dense [N] table would cost 8 N bytes on every rank
            slot_K = np.searchsorted(self.gid_T, gid_K).clip(0, max(self.num_entries - 1, 0))
            held_K = (
                self.gid_T.take(slot_K) == gid_K
                if self.num_entries
                else np.zeros(gid_K.shape[0], dtype=bool)
            )
        degree_K = np.zeros(gid_K.shape[0], dtype=np.int64)
        if self.num_entries:
            degree_K[held_K] = self.degree_T.take(slot_K[held_K])
        return DegreeLookup(degree_K=degree_K, miss_pos=np.flatnonzero(~held_K))

    def in_degree(self, gid: Tensor) -> Tensor:
        """``[K]`` int64 in-degrees of ``gid``.

        Raises:
            ValueError: A gid the table does not hold (the message names it).
        """
        got = self.lookup(gid.long().numpy())
        if got.miss_pos.size:
            missing = int(gid[int(got.miss_pos[0])])
            raise ValueError(
                f"gid {missing} is not in this DegreeTable ({self.num_entries} entries); "
                "build it over every node the sampler can reach, or ask the owner"
            )
        return torch.from_numpy(got.degree_K)


def with_in_degree(sub: SampledSubgraph, degree_N: Tensor) -> SampledSubgraph:
    """``sub`` with every block's ``src_in_degree`` set from ``degree_N`` ``[N]`` (of ``n_id``).

    Block sources are prefixes of ``n_id``, so each block's degrees are a zero-copy slice.
    """
    if degree_N.shape != sub.n_id.shape:
        raise ValueError(
            f"degree_N has shape {tuple(degree_N.shape)}; pass one degree per n_id "
            f"{tuple(sub.n_id.shape)}"
        )
    degree_N = degree_N.long()
    blocks = tuple(replace(b, src_in_degree=degree_N[: b.num_src]) for b in sub.blocks)
    return replace(sub, blocks=blocks)
