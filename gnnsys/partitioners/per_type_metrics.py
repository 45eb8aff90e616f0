"""Quality of a heterogeneous assignment, per node type and per relation: pure, no I/O.

Definitions (``metrics.py``'s, split by type or relation; every edge is a directed in-edge
``u -> v`` of one relation ``(src, rel, dst)``):

- per type: owned nodes per part and their imbalance ``max_p / mean_p``;
- per relation: edge cut (edges whose endpoints lie in different parts) and communication
  volume, the distinct ``(u, part)`` pairs over its cut edges: ``src`` feature rows shipped
  per full-graph layer for that relation;
- per type: the k-hop halo of each part (nodes of that type within ``k`` in-edge hops of the
  part's owned nodes over *all* relations, owned elsewhere: the rows a store shard keeps as
  halo), and the remote-fetch upper bound, the k-hop halo of each part's train seeds.

Shape legend: ``G`` nodes of all types, ``E`` edges, ``P`` parts, ``T`` node types.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gnnsys.partitioners.base import sorted_unique
from gnnsys.partitioners.halo import halo_of_part
from gnnsys.partitioners.per_type import hetero_train_mask
from gnnsys.types import Assignment, EdgeType, Graph
from gnnsys.types.relations import HeteroGraph

__all__ = [
    "PerTypePartitionMetrics",
    "RelationCut",
    "TypeMetrics",
    "compute_per_type_metrics",
    "relation_key",
    "type_balance",
]


def relation_key(edge_type: EdgeType) -> str:
    """``"src__rel__dst"``, PyG's string form of an edge type (folder and JSON key)."""
    return "__".join(edge_type)


@dataclass(frozen=True, kw_only=True, slots=True)
class TypeMetrics:
    """One node type's balance and halo."""

    nodes_per_part: tuple[int, ...]
    imbalance: float
    """``max_p / mean_p`` of ``nodes_per_part`` (1.0 perfect; ``nan`` for an empty type)."""
    halo_per_part: tuple[int, ...]
    """Nodes of this type in each part's k-hop halo."""
    halo_factor: float
    """``sum(halo_per_part) / N_t``: halo copies per node of this type."""
    remote_fetch_upper_bound: int
    """Nodes of this type in the k-hop halo of each part's train seeds, summed over parts."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RelationCut:
    """One relation's edge cut and communication volume."""

    num_edges: int
    edge_cut: int
    edge_cut_fraction: float
    comm_volume: int
    """Distinct ``(src node, destination part)`` pairs over cut edges."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PerTypePartitionMetrics:
    """Quality of one heterogeneous assignment (module docstring)."""

    num_parts: int
    num_hops: int
    node_types: dict[str, TypeMetrics]
    relations: dict[str, RelationCut]
    """Keyed by ``relation_key``."""
    edge_cut: int
    edge_cut_fraction: float
    """Over every relation's edges together."""


def type_balance(
    graph: HeteroGraph, part_N: np.ndarray, num_parts: int
) -> dict[str, tuple[tuple[int, ...], float]]:
    """Type -> (owned nodes per part, ``max / mean`` imbalance)."""
    out = {}
    for node_type, offset in graph.node_offsets().items():
        rows = part_N[offset : offset + graph.num_nodes(node_type)]
        counts = np.bincount(rows, minlength=num_parts)
        mean = float(counts.mean())
        out[node_type] = (
            tuple(int(c) for c in counts),
            float(counts.max()) / mean if mean else float("nan"),
        )
    return out


def relation_cuts(graph: HeteroGraph, part_N: np.ndarray, num_parts: int) -> dict[str, RelationCut]:
    """``relation_key`` -> its edge cut and communication volume."""
    offsets = graph.node_offsets()
    out = {}
    for edge_type, rel in graph.relations.items():
        src, _, dst = edge_type
        src_part_E = part_N[rel.indices.astype(np.int64) + offsets[src]]
        dst_part_E = np.repeat(
            part_N[offsets[dst] : offsets[dst] + rel.num_dst], np.diff(rel.indptr)
        )
        cut_E = src_part_E != dst_part_E
        cut = int(np.count_nonzero(cut_E))
        pairs = rel.indices[cut_E].astype(np.int64) * num_parts + dst_part_E[cut_E]
        out[relation_key(edge_type)] = RelationCut(
            num_edges=rel.num_edges,
            edge_cut=cut,
            edge_cut_fraction=cut / rel.num_edges if rel.num_edges else 0.0,
            comm_volume=int(sorted_unique(pairs).shape[0]),
        )
    return out


def _halo_counts(
    graph: HeteroGraph,
    directed: Graph,
    part_N: np.ndarray,
    num_parts: int,
    num_hops: int,
    train_G: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray]:
    """``[P, T]`` halo nodes per part and type, and ``[P, T]`` train-seed halo nodes."""
    type_N = graph.node_type_of()
    num_types = len(graph.nodes)
    halo_PT = np.zeros((num_parts, num_types), dtype=np.int64)
    fetch_PT = np.zeros((num_parts, num_types), dtype=np.int64)
    for p in range(num_parts):
        owned = part_N == p
        halo = halo_of_part(directed, part_N, p, num_hops, seeds=np.flatnonzero(owned))
        halo_PT[p] = np.bincount(type_N[halo], minlength=num_types)
        seeds = np.flatnonzero(owned if train_G is None else owned & train_G)
        if seeds.size:
            fetch = halo_of_part(directed, part_N, p, num_hops, seeds=seeds)
            fetch_PT[p] = np.bincount(type_N[fetch], minlength=num_types)
    return halo_PT, fetch_PT


def compute_per_type_metrics(
    graph: HeteroGraph,
    assignment: Assignment,
    num_hops: int = 2,
    *,
    directed: Graph | None = None,
) -> PerTypePartitionMetrics:
    """Every metric of the module docstring for one assignment over global ids.

    Args:
        graph: The heterogeneous graph.
        assignment: Its assignment (``partition_hetero``).
        num_hops: ``k`` of the halo (number of GNN layers).
        directed: ``graph.to_homogeneous()[0]`` when the caller has it (the halo follows
            in-edges, as the store's does).

    Raises:
        ValueError: The assignment does not cover exactly the graph's ``G`` nodes.
    """
    part_N, num_parts = assignment.part_N, assignment.num_parts
    if part_N.shape[0] != graph.num_nodes():
        raise ValueError(
            f"assignment covers {part_N.shape[0]} nodes but {graph.name!r} has "
            f"{graph.num_nodes()} (all types); partition this graph with partition_hetero"
        )
    directed = graph.to_homogeneous()[0] if directed is None else directed
    halo_PT, fetch_PT = _halo_counts(
        graph, directed, part_N, num_parts, num_hops, hetero_train_mask(graph)
    )
    types = {}
    for t, (node_type, (counts, imbalance)) in enumerate(
        type_balance(graph, part_N, num_parts).items()
    ):
        n = graph.num_nodes(node_type)
        types[node_type] = TypeMetrics(
            nodes_per_part=counts,
            imbalance=imbalance,
            halo_per_part=tuple(int(h) for h in halo_PT[:, t]),
            halo_factor=float(halo_PT[:, t].sum()) / n if n else 0.0,
            remote_fetch_upper_bound=int(fetch_PT[:, t].sum()),
        )
    cuts = relation_cuts(graph, part_N, num_parts)
    total_cut = sum(c.edge_cut for c in cuts.values())
    return PerTypePartitionMetrics(
        num_parts=num_parts,
        num_hops=num_hops,
        node_types=types,
        relations=cuts,
        edge_cut=total_cut,
        edge_cut_fraction=total_cut / graph.num_edges if graph.num_edges else 0.0,
    )
