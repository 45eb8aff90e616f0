"""Partition quality metrics: pure functions of (graph, assignment), no I/O, no sampler.

Definitions (every edge is a directed in-edge ``u -> v`` of the CSR):

- edge cut: edges whose endpoints lie in different parts (count, and fraction of ``E``);
- balance: ``max_p / mean_p`` of owned nodes, owned in-edges, and owned train nodes (1.0 is
  perfect);
- communication volume: distinct ``(u, part)`` pairs where ``part != owner(u)`` holds an
  out-neighbor of ``u`` = feature rows shipped per full-graph layer = sum of 1-hop halo sizes;
- halo replication factor: ``sum_p |halo_p| / N`` with the k-hop halo (``halo.py``);
- remote-fetch upper bound: ``sum_p`` of the k-hop halo of ``p``'s *train* nodes, i.e. the
  distinct remote nodes one epoch of k-layer training can ever touch. Sampling with fanouts
  touches fewer per batch but may touch a node in several batches; the bench command
  simulates that (``gnnsys.sampler.remote_fetches``).

Shape legend: ``N`` nodes, ``E`` edges, ``P`` parts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gnnsys.partitioners.base import row_blocks, sorted_unique
from gnnsys.partitioners.halo import halo_of_part
from gnnsys.types import Assignment, Graph


@dataclass(frozen=True, kw_only=True, slots=True)
class PartitionMetrics:
    """Quality of one assignment (see the module docstring for each definition)."""

    num_parts: int
    num_hops: int
    edge_cut: int
    edge_cut_fraction: float
    node_balance: float
    edge_balance: float
    train_balance: float | None
    """``None`` when the graph has no train mask."""
    comm_volume: int
    halo_sizes: tuple[int, ...]
    halo_factor: float
    remote_fetch_upper_bound: int
    """Distinct remote nodes an epoch can touch: k-hop halo of the train nodes, all parts."""


def edge_cut(graph: Graph, part_N: np.ndarray) -> int:
    """Number of in-edges whose source and destination parts differ.

    Read in blocks of whole rows (``base.row_blocks``): the scratch is one block, not ``[E]``,
    when ``graph.indices`` is a memory map.
    """
    degree_N = graph.in_degree
    cut = 0
    for lo, hi in row_blocks(degree_N):
        src_E = graph.indices[int(graph.indptr[lo]) : int(graph.indptr[hi])]
        dst_part_E = np.repeat(part_N[lo:hi], degree_N[lo:hi])
        cut += int(np.count_nonzero(part_N[src_E] != dst_part_E))
    return cut


def balance(load_P: np.ndarray) -> float:
    """``max / mean`` of per-part loads (1.0 = perfect; ``nan`` when every load is zero)."""
    mean = float(np.mean(load_P))
    return float(np.max(load_P)) / mean if mean > 0 else float("nan")


def part_loads(graph: Graph, part_N: np.ndarray, num_parts: int) -> dict[str, np.ndarray]:
    """``[P]`` owned nodes, owned in-edges and owned train nodes (key ``train`` only if known)."""
    loads = {
        "nodes": np.bincount(part_N, minlength=num_parts),
        "edges": np.bincount(part_N, weights=graph.in_degree, minlength=num_parts).astype(np.int64),
    }
    if graph.train_mask is not None:
        loads["train"] = np.bincount(part_N[graph.train_mask], minlength=num_parts)
    return loads


def communication_volume(graph: Graph, part_N: np.ndarray, num_parts: int) -> int:
    """Distinct ``(source gid, destination part)`` pairs over cut edges."""
    dst_part_E = np.repeat(part_N, graph.in_degree).astype(np.int64)
    src_E = np.asarray(graph.indices, dtype=np.int64)
    cut = part_N[src_E] != dst_part_E
    return int(sorted_unique(src_E[cut] * num_parts + dst_part_E[cut]).size)


def halo_sizes(graph: Graph, part_N: np.ndarray, num_parts: int, num_hops: int) -> list[int]:
    """``|halo_p|`` for every part, with the k-hop halo of all owned nodes."""
    return [int(halo_of_part(graph, part_N, p, num_hops).size) for p in range(num_parts)]


def remote_fetch_upper_bound(
    graph: Graph, part_N: np.ndarray, num_parts: int, num_hops: int
) -> int:
    """Sum over parts of the k-hop halo of the part's train nodes (all nodes if no mask)."""
    total = 0
    for p in range(num_parts):
        owned = part_N == p
        seeds = np.flatnonzero(owned if graph.train_mask is None else owned & graph.train_mask)
        if seeds.size:
            total += int(halo_of_part(graph, part_N, p, num_hops, seeds=seeds).size)
    return total


def compute_metrics(graph: Graph, assignment: Assignment, num_hops: int = 2) -> PartitionMetrics:
    """Every metric of the module docstring for one assignment.

    Raises:
        ValueError: The assignment does not cover exactly ``graph.num_nodes`` nodes.
    """
    part_N, num_parts = assignment.part_N, assignment.num_parts
    if part_N.shape[0] != graph.num_nodes:
        raise ValueError(
            f"assignment covers {part_N.shape[0]} nodes but the graph has {graph.num_nodes}; "
            "partition this graph, not another one"
        )
    loads = part_loads(graph, part_N, num_parts)
    cut = edge_cut(graph, part_N)
    halos = halo_sizes(graph, part_N, num_parts, num_hops)
    return PartitionMetrics(
        num_parts=num_parts,
        num_hops=num_hops,
        edge_cut=cut,
        edge_cut_fraction=cut / graph.num_edges if graph.num_edges else 0.0,
        node_balance=balance(loads["nodes"]),
        edge_balance=balance(loads["edges"]),
        train_balance=balance(loads["train"]) if "train" in loads else None,
        comm_volume=communication_volume(graph, part_N, num_parts),
        halo_sizes=tuple(halos),
        halo_factor=sum(halos) / graph.num_nodes if graph.num_nodes else 0.0,
        remote_fetch_upper_bound=remote_fetch_upper_bound(graph, part_N, num_parts, num_hops),
    )
