"""Structure-blind baselines: ``random``, ``hash`` and ``range``.

They ignore the edges, so their cut is the yardstick the structure-aware strategies must beat:
``random`` and ``hash`` cut about ``1 - 1/P`` of the edges; ``range`` cuts fewer when node ids
carry locality (crawl order, community order), else the same.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gnnsys.partitioners.base import check_num_parts, make_assignment
from gnnsys.types import Assignment, Graph

_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finalizer: a fast, well-mixed 64-bit hash of every element of ``x``."""
    z = x.astype(np.uint64) + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    out: np.ndarray = z ^ (z >> np.uint64(31))
    return out


class Random:
    """Exactly balanced random split: a seeded permutation dealt round-robin to the parts."""

    name = "random"

    @dataclass(frozen=True, kw_only=True, slots=True)
    class Config:
        """No options: the seed passed to ``assign`` is the only knob."""

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or Random.Config()

    def assign(self, graph: Graph, num_parts: int, *, seed: int = 0) -> Assignment:
        """Part sizes differ by at most one node. See ``Partitioner.assign``."""
        check_num_parts(graph, num_parts)
        perm = np.random.default_rng(seed).permutation(graph.num_nodes)
        part_N = np.empty(graph.num_nodes, dtype=np.int32)
        part_N[perm] = np.arange(graph.num_nodes, dtype=np.int64) % num_parts
        return make_assignment(part_N, num_parts, self.name, seed, {})


class Hash:
    """``part = splitmix64(gid ^ seed) mod P``: any process recomputes a node's owner alone."""

    name = "hash"

    @dataclass(frozen=True, kw_only=True, slots=True)
    class Config:
        """No options: the seed passed to ``assign`` salts the hash."""

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or Hash.Config()

    def assign(self, graph: Graph, num_parts: int, *, seed: int = 0) -> Assignment:
        """Balanced in expectation only; an empty part (tiny graphs) gets one node moved in."""
        check_num_parts(graph, num_parts)
        gid = np.arange(graph.num_nodes, dtype=np.uint64) ^ np.uint64(seed & (2**64 - 1))
        part_N = (splitmix64(gid) % np.uint64(num_parts)).astype(np.int32)
        return make_assignment(part_N, num_parts, self.name, seed, {})


class Range:
    """Contiguous gid blocks: part ``p`` owns gids ``[p*N/P, (p+1)*N/P)``; the seed is unused."""

    name = "range"

    @dataclass(frozen=True, kw_only=True, slots=True)
    class Config:
        """No options."""

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or Range.Config()

    def assign(self, graph: Graph, num_parts: int, *, seed: int = 0) -> Assignment:
        """Part sizes differ by at most one node. See ``Partitioner.assign``."""
        check_num_parts(graph, num_parts)
        gid = np.arange(graph.num_nodes, dtype=np.int64)
        part_N = (gid * num_parts // max(graph.num_nodes, 1)).astype(np.int32)
        return make_assignment(part_N, num_parts, self.name, seed, {})
