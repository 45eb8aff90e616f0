"""Partitioner protocol and the helpers every strategy shares.

A partitioner is pure: ``assign(graph, num_parts, *, seed) -> Assignment`` decides the owner part
of every node and does no I/O (``gnnsys.store`` writes the result). Every strategy returns an
assignment with no empty part whenever ``num_parts <= num_nodes``.

Shape legend: ``N`` nodes, ``E`` edges, ``P`` parts.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import numpy as np

from gnnsys.types import Assignment, Graph

EDGES_PER_BLOCK = 1 << 21
"""Edges gathered at once by the edge passes (halo, streaming scores, edge cut): each pass's
scratch is a few arrays of this many int64, ~16 MiB each, so a graph whose ``indices`` is a
memory map is read block by block and never copied whole. Tests shrink it to split rows."""

BALANCE_KEYS = ("nodes", "train", "edges")
"""Quantities a partitioner can balance: node count, train-node count, in-edge count."""


class Partitioner(Protocol):
    """Decides the owner part of every node of a graph."""

    name: str

    def assign(self, graph: Graph, num_parts: int, *, seed: int = 0) -> Assignment:
        """Return the part of every node.

        Args:
            graph: The graph to split.
            num_parts: ``P``, with ``1 <= P <= graph.num_nodes``.
            seed: Seed of every random choice; same seed -> identical assignment.

        Returns:
            An ``Assignment`` with ``part_N`` int32 in ``[0, P)`` and no empty part.

        Raises:
            ValueError: ``num_parts`` out of range.
        """
        ...


def check_num_parts(graph: Graph, num_parts: int) -> None:
    """Raise ``ValueError`` unless ``1 <= num_parts <= graph.num_nodes``."""
    if not isinstance(num_parts, int | np.integer) or isinstance(num_parts, bool):
        raise TypeError(f"num_parts must be an int, got {type(num_parts).__name__}")
    if num_parts < 1 or num_parts > graph.num_nodes:
        raise ValueError(
            f"num_parts={num_parts} but the graph has {graph.num_nodes} nodes; "
            f"choose 1 <= num_parts <= {max(graph.num_nodes, 1)}"
        )


def check_balance(balance: tuple[str, ...]) -> None:
    """Raise ``ValueError`` on an empty or unknown balance constraint list."""
    if (
        not balance
        or any(b not in BALANCE_KEYS for b in balance)
        or len(set(balance)) < len(balance)
    ):
        raise ValueError(
            f"balance={balance!r}; choose distinct names from {BALANCE_KEYS}, e.g. ('nodes',)"
        )


def vertex_weights(graph: Graph, balance: tuple[str, ...]) -> np.ndarray:
    """``[N, C]`` int64 weights, one column per balance constraint (C = ``len(balance)``).

    ``train`` needs ``graph.train_mask``; ``edges`` weighs a node by its in-degree plus one, so
    isolated nodes still count.

    Raises:
        ValueError: ``train`` requested on a graph without a train mask.
    """
    check_balance(balance)
    columns = []
    for key in balance:
        if key == "nodes":
            columns.append(np.ones(graph.num_nodes, dtype=np.int64))
        elif key == "edges":
            columns.append(graph.in_degree + 1)
        else:
            if graph.train_mask is None:
                raise ValueError(
                    f"balance includes 'train' but graph {graph.name!r} has no train_mask; "
                    "drop 'train' from balance or load a dataset with a split"
                )
            columns.append(graph.train_mask.astype(np.int64))
    return np.stack(columns, axis=1)


def fill_empty_parts(part_N: np.ndarray, num_parts: int) -> np.ndarray:
    """Move one node from the largest part into each empty part (no-op when none is empty).

    Heuristic partitioners (METIS under tight constraints, streaming on tiny graphs) can leave a
    part empty; a shard with no owned node breaks training, so the contract forbids it. The
    moved node is the largest-part node with the highest gid, which keeps the result
    deterministic.
    """
    counts = np.bincount(part_N, minlength=num_parts)
    for empty in np.flatnonzero(counts == 0):
        donor = int(np.argmax(counts))
        gid = int(np.flatnonzero(part_N == donor)[-1])
        part_N[gid] = empty
        counts[donor] -= 1
        counts[empty] += 1
    return part_N


def make_assignment(
    part_N: np.ndarray, num_parts: int, method: str, seed: int, params: dict[str, object]
) -> Assignment:
    """Cast to int32, fill empty parts, and wrap in an ``Assignment``."""
    part_N = fill_empty_parts(np.ascontiguousarray(part_N, dtype=np.int32), num_parts)
    return Assignment(part_N=part_N, num_parts=num_parts, method=method, seed=seed, params=params)


def csr_positions(indptr: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions in ``indices`` of the CSR rows ``rows``, concatenated in request order.

    Vectorized (no per-row Python): one ``repeat`` plus one ``arange`` of the output size.

    Returns:
        ``pos_E`` int64 edge positions (global edge ids) and ``count_R`` int64 row lengths.
    """
    rows = np.asarray(rows, dtype=np.int64)
    start_R = indptr[rows]
    count_R = indptr[rows + 1] - start_R
    shift_R = start_R - (np.cumsum(count_R) - count_R)
    pos_E = np.arange(int(count_R.sum()), dtype=np.int64) + np.repeat(shift_R, count_R)
    return pos_E, count_R


def row_blocks(count_R: np.ndarray, max_edges: int | None = None) -> Iterator[tuple[int, int]]:
    """Split rows ``[0, R)`` into consecutive ranges ``[lo, hi)`` of whole rows.

    Each range holds at most ``max_edges`` edges (default :data:`EDGES_PER_BLOCK`), except a
    single row with more, which is a range of its own; rows without edges join their
    neighbours. Consecutive ranges together exceed ``max_edges``, so there are at most
    ``2 * E / max_edges + 1`` of them. Costs one ``[R]`` cumulative sum.

    Args:
        count_R: ``[R]`` edges of every row, in order.
        max_edges: The edge bound of a range.
    """
    limit = EDGES_PER_BLOCK if max_edges is None else max_edges
    if limit < 1:
        raise ValueError(f"max_edges={limit}; choose max_edges >= 1")
    end_R = np.cumsum(count_R, dtype=np.int64)
    lo = 0
    while lo < end_R.shape[0]:
        base = int(end_R[lo - 1]) if lo else 0
        hi = max(int(np.searchsorted(end_R, base + limit, side="right")), lo + 1)
        yield lo, hi
        lo = hi


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` for a 1-D integer array, by one sort and a neighbour compare.

    Same output (ascending, distinct, same dtype); numpy 2.4's hash-based ``np.unique`` is
    10-100x slower than a sort on this machine (4.8 s vs 0.1 s on 5 M int64 below 1 M).
    """
    return dedupe_sorted(np.sort(values))


def dedupe_sorted(ordered: np.ndarray) -> np.ndarray:
    """An ascending 1-D array without its repeats (a neighbour compare; no copy when none)."""
    if ordered.shape[0] < 2:
        return ordered
    keep = np.empty(ordered.shape[0], dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered if keep.all() else ordered[keep]
