"""Halo nodes: the k-hop in-neighborhood of a part's nodes that other parts own.

Vocabulary (README glossary): a part *owns* the nodes assigned to it; its *halo* is every node
within ``k`` in-edge hops of its owned nodes (``k`` = number of GNN layers) that another part
owns. A k-layer GNN on the owned nodes reads features of owned and halo nodes only.

Shape legend: ``N`` nodes, ``E`` edges, ``H`` halo nodes, ``P`` parts.
"""

from __future__ import annotations

import numpy as np

from gnnsys.partitioners.base import csr_positions, row_blocks, sorted_unique
from gnnsys.types import Graph


def khop_reach(graph: Graph, seeds: np.ndarray, num_hops: int) -> np.ndarray:
    """``[N]`` bool: nodes within ``num_hops`` in-edge hops of ``seeds`` (seeds included).

    Breadth-first over in-edges; each node is expanded at most once, so the cost is at most
    one pass over ``E``. The frontier is read in blocks of whole rows of at most
    ``EDGES_PER_BLOCK`` edges (``base.row_blocks``), so the extra memory is O(N) plus one
    block, also when ``graph.indices`` is a memory map.
    """
    if num_hops < 0:
        raise ValueError(f"num_hops={num_hops}; choose num_hops >= 0")
    reached = np.zeros(graph.num_nodes, dtype=bool)
    frontier = sorted_unique(np.asarray(seeds, dtype=np.int64))
    reached[frontier] = True
    for _ in range(num_hops):
        found = []
        count_F = graph.indptr[frontier + 1] - graph.indptr[frontier]
        for lo, hi in row_blocks(count_F):
            pos_E, _ = csr_positions(graph.indptr, frontier[lo:hi])
            nbr = np.asarray(graph.indices[pos_E], dtype=np.int64)
            nbr = sorted_unique(nbr[~reached[nbr]])
            reached[nbr] = True
            found.append(nbr)
        frontier = np.concatenate(found) if found else np.zeros(0, dtype=np.int64)
        if frontier.size == 0:
            break
    return reached


def halo_of_part(
    graph: Graph,
    part_N: np.ndarray,
    part: int,
    num_hops: int,
    seeds: np.ndarray | None = None,
) -> np.ndarray:
    """``[H]`` int64 gids, ascending: the k-hop in-neighbors of ``seeds`` owned by other parts.

    Args:
        graph: The whole graph.
        part_N: ``[N]`` owner of every node.
        part: The part whose halo to compute.
        num_hops: ``k``, the number of GNN layers.
        seeds: Start nodes (default: every node ``part`` owns), e.g. only its train nodes.
    """
    if seeds is None:
        seeds = np.flatnonzero(part_N == part)
    reached = khop_reach(graph, seeds, num_hops)
    return np.flatnonzero(reached & (part_N != part)).astype(np.int64)
