"""Partition a ``HeteroGraph``: one ``Assignment`` over the global id space, balanced per type.

Every node type goes into one assignment: ``part_N[offset[t] + lid]`` is the owner of node
``lid`` of type ``t`` (``HeteroGraph.node_offsets``; the id space of PyG's and DGL's
``to_homogeneous``). The partitioner sees the *homogenised, symmetrised* graph
(``partition_graph``): every relation's edges in both directions, self loops and duplicates
dropped, because a relation's direction says nothing about locality (``author -> paper`` has no
in-edge at an author, so a directed stream would place every author blind).

Per-type balance, by strategy (``PER_TYPE_BALANCE``):

- ``metis``: one METIS balance constraint per node type (a one-hot ``[G, T]`` vertex weight,
  METIS's multi-constraint mode), plus ``train``/``edges`` when asked; METIS meets every
  constraint to ``imbalance`` (default 1.03 per constraint; a little looser in practice);
- ``fennel``/``ldg``: a capacity per type and part, ``ceil((1 + slack) * N_t / P)``, on top of
  the streaming score (``run_stream(groups_N=...)``): every type within ``slack``;
- ``random``: a seeded permutation per type dealt round-robin: exact (sizes differ by <= 1);
- ``range``: contiguous lid ranges per type: exact;
- ``hash``: none, balanced in expectation only (a node's owner must follow from its gid alone).

Shape legend: ``G`` nodes of all types, ``T`` node types, ``C`` balance constraints, ``P`` parts.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gnnsys.partitioners.base import check_num_parts, make_assignment
from gnnsys.partitioners.metis import Metis, metis_csr, run_pymetis
from gnnsys.partitioners.simple import Hash, Random, Range
from gnnsys.partitioners.streaming import Fennel, Ldg
from gnnsys.types import Assignment, Graph
from gnnsys.types.relations import HeteroGraph

__all__ = [
    "PER_TYPE_METHODS",
    "PER_TYPE_BALANCE",
    "hetero_train_mask",
    "partition_graph",
    "partition_hetero",
]

PER_TYPE_BALANCE: dict[str, str] = {
    "metis": "one METIS constraint per node type",
    "fennel": "capacity per node type and part",
    "ldg": "capacity per node type and part",
    "random": "exact (per-type permutation)",
    "range": "exact (per-type ranges)",
    "hash": "none (expected only)",
}
"""How each strategy balances every node type (module docstring)."""

PER_TYPE_METHODS = tuple(PER_TYPE_BALANCE)
"""Strategies ``partition_hetero`` takes."""


def hetero_train_mask(graph: HeteroGraph) -> np.ndarray | None:
    """``[G]`` bool train mask over global ids (types without one count as not train)."""
    if all(s.train_mask is None for s in graph.nodes.values()):
        return None
    parts = [
        s.train_mask if s.train_mask is not None else np.zeros(s.num_nodes, dtype=bool)
        for s in graph.nodes.values()
    ]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=bool)


def partition_graph(graph: HeteroGraph) -> Graph:
    """The graph a partitioner sees: all relations over global ids, symmetric, loop-free.

    Costs one sort of ``2 E`` int64 keys (``coo_to_csr``) and holds ``2 E`` int32 indices;
    it already meets METIS's input contract, so METIS takes its arrays without a copy.
    """
    offsets = graph.node_offsets()
    src = [r.indices.astype(np.int64) + offsets[s] for (s, _, _), r in graph.relations.items()]
    dst = [r.dst_of_edges() + offsets[d] for (_, _, d), r in graph.relations.items()]
    empty = np.zeros(0, dtype=np.int64)
    edge_index = np.stack([np.concatenate(src or [empty]), np.concatenate(dst or [empty])])
    return Graph.from_edge_index(
        edge_index,
        graph.num_nodes(),
        symmetric=True,
        self_loops=False,
        train_mask=hetero_train_mask(graph),
        name=f"{graph.name}/homogeneous",
    )


def partition_hetero(
    graph: HeteroGraph,
    method: str,
    num_parts: int,
    seed: int = 0,
    *,
    per_type: bool = True,
    homogeneous: Graph | None = None,
    **cfg: Any,
) -> Assignment:
    """Assign every node of every type to a part, in one assignment over global ids.

    Args:
        graph: The heterogeneous graph.
        method: One of ``PER_TYPE_METHODS``.
        num_parts: ``P``, ``1 <= P <= G``.
        seed: Seed of every random choice; same seed -> identical assignment.
        per_type: Balance each node type (``PER_TYPE_BALANCE``); ``False`` balances only the
            total node count, as the homogeneous partitioners do.
        homogeneous: ``partition_graph(graph)`` when the caller already built it (reused).
        **cfg: The strategy's ``Config`` options (``balance=``, ``imbalance=``, ``slack=``...).

    Returns:
        An ``Assignment`` with ``part_N`` over ``[0, G)``; ``params`` records the node types,
        their offsets and the per-type balance mode.

    Raises:
        ValueError: Unknown method or option, ``num_parts`` out of range, or a ``train``
            constraint on a graph without train nodes.
    """
    if method not in PER_TYPE_METHODS:
        raise ValueError(
            f"partitioner {method!r} does not take heterogeneous graphs; choose one of "
            f"{list(PER_TYPE_METHODS)}"
        )
    homo = partition_graph(graph) if homogeneous is None else homogeneous
    if homo.num_nodes != graph.num_nodes():
        raise ValueError(
            f"homogeneous graph has {homo.num_nodes} nodes but {graph.name!r} has "
            f"{graph.num_nodes()}; pass partition_graph(graph)"
        )
    check_num_parts(homo, num_parts)
    type_N = graph.node_type_of()
    if method == "metis":
        assignment = _metis(graph, homo, type_N, num_parts, seed, per_type, cfg)
    elif method in ("fennel", "ldg"):
        cls: Any = Fennel if method == "fennel" else Ldg
        try:
            partitioner = cls(cls.Config(**cfg))
        except TypeError as err:
            raise ValueError(f"bad option for partitioner {method!r}: {err}") from err
        groups = type_N if per_type else None
        assignment = partitioner.assign(homo, num_parts, seed=seed, groups_N=groups)
    else:
        if cfg:
            raise ValueError(f"partitioner {method!r} takes no options; got {sorted(cfg)}")
        assignment = _simple(graph, homo, method, num_parts, seed, per_type)
    params = dict(assignment.params) | {
        "node_types": graph.node_types,
        "node_offsets": list(graph.node_offsets().values()),
        "per_type_balance": PER_TYPE_BALANCE[method] if per_type else "none (total only)",
    }
    return Assignment(
        part_N=assignment.part_N, num_parts=num_parts, method=method, seed=seed, params=params
    )


def _simple(
    graph: HeteroGraph, homo: Graph, method: str, num_parts: int, seed: int, per_type: bool
) -> Assignment:
    """``random``/``range`` per type (exact), or ``hash`` on the gid."""
    if method == "hash" or not per_type:
        baseline: Any = {"hash": Hash, "random": Random, "range": Range}[method]()
        out: Assignment = baseline.assign(homo, num_parts, seed=seed)
        return out
    part_N = np.empty(graph.num_nodes(), dtype=np.int64)
    rng = np.random.default_rng(seed)
    start = 0  # round-robin continues across types, so part totals stay balanced too
    for node_type, offset in graph.node_offsets().items():
        n = graph.num_nodes(node_type)
        rank = np.arange(n, dtype=np.int64)
        if method == "random":
            part_N[offset + rng.permutation(n)] = (rank + start) % num_parts
            start = (start + n) % num_parts
        else:
            part_N[offset : offset + n] = rank * num_parts // max(n, 1)
    return make_assignment(part_N, num_parts, method, seed, {})


def _metis(
    graph: HeteroGraph,
    homo: Graph,
    type_N: np.ndarray,
    num_parts: int,
    seed: int,
    per_type: bool,
    cfg: dict[str, Any],
) -> Assignment:
    """METIS on the homogenised graph, one constraint per type (plus ``train``/``edges``)."""
    try:
        config = Metis.Config(**cfg)
    except TypeError as err:
        raise ValueError(f"bad option for partitioner 'metis': {err}") from err
    params: dict[str, object] = {
        "balance": list(config.balance),
        "imbalance": config.imbalance,
        "recursive": config.recursive,
    }
    if num_parts == 1:
        return make_assignment(np.zeros(homo.num_nodes), 1, "metis", seed, params)
    w_GC = _weights(graph, homo, type_N, config.balance, per_type)
    xadj, adjncy = metis_csr(homo)
    if adjncy.size == 0:  # METIS rejects edgeless graphs; per-type ranges are optimal
        return _simple(graph, homo, "range", num_parts, seed, True)
    flat = None if w_GC is None else np.ascontiguousarray(w_GC.ravel())
    part_N = run_pymetis(xadj, adjncy, num_parts, flat, config, seed)
    return make_assignment(part_N, num_parts, "metis", seed, params)


def _weights(
    graph: HeteroGraph,
    homo: Graph,
    type_N: np.ndarray,
    balance: tuple[str, ...],
    per_type: bool,
) -> np.ndarray | None:
    """``[G, C]`` int64 vertex weights (node-major for METIS), or ``None`` for unit weights.

    ``nodes`` becomes one one-hot column per non-empty node type when ``per_type``.
    """
    columns: list[np.ndarray] = []
    for key in balance:
        if key == "nodes" and per_type:
            for t in np.flatnonzero(np.bincount(type_N, minlength=len(graph.nodes))):
                columns.append((type_N == t).astype(np.int64))
        elif key == "nodes":
            columns.append(np.ones(homo.num_nodes, dtype=np.int64))
        elif key == "edges":
            columns.append(homo.in_degree + 1)
        elif homo.train_mask is None or not homo.train_mask.any():
            raise ValueError(
                f"balance includes 'train' but {graph.name!r} has no train nodes; drop 'train'"
            )
        else:
            columns.append(homo.train_mask.astype(np.int64))
    if len(columns) == 1 and balance == ("nodes",) and not per_type:
        return None
    return np.stack(columns, axis=1)
