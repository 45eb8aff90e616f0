"""Seeded held-out edge splits for link prediction, with fixed negatives per held-out edge.

``edge_split(graph, config)`` treats the graph as undirected: every pair ``{u, v}`` (``u != v``)
that has an edge in either direction is one candidate link. A seeded permutation puts
``config.val`` of them in validation, ``config.test`` in test and the rest in train. The
training graph keeps only the train links, in both directions, so message passing never sees
a held-out edge (neither ``u -> v`` nor ``v -> u``); self-loops are dropped.

Each held-out link gets ``config.num_neg`` fixed negative destinations, drawn uniformly over
all ``N`` nodes from the same seed (the OGB ``ogbl-citation2`` protocol: a positive is ranked
against its own negatives; a drawn negative may by chance be a true neighbour, as in OGB).
Each link's orientation (which endpoint is the source) is a seeded coin flip, so ownership by
source node does not favour low ids.

Shape legend: ``N`` nodes, ``E`` train links, ``K`` held-out links of a split, ``Q`` negatives
per held-out link.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from gnnsys.types import EdgeType, Graph
from gnnsys.types.relations import HeteroGraph, Relation

__all__ = [
    "LinkSplit",
    "LinkSplitConfig",
    "RelationLinkSplit",
    "edge_split",
    "relation_edge_split",
    "undirected_pairs",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class LinkSplitConfig:
    """How links are held out (``--val-edges``, ``--test-edges``, ``--eval-negatives``)."""

    val: float = 0.1
    """Fraction of the undirected links held out for validation."""
    test: float = 0.1
    """Fraction held out for test."""
    num_neg: int = 1000
    """Fixed negative destinations per held-out link (OGB ``ogbl-citation2`` uses 1000)."""
    seed: int = 0
    """Seed of the split, the orientations and the negatives."""
    edge_type: str = ""
    """Target relation of a heterogeneous graph, ``src__rel__dst`` (``--target-edge``); empty
    for a homogeneous graph."""

    def __post_init__(self) -> None:
        if self.edge_type and len(self.edge_type.split("__")) != 3:
            raise ValueError(
                f"--target-edge {self.edge_type!r}: name a relation as src__rel__dst, "
                "e.g. paper__cites__paper"
            )
        for name in ("val", "test"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and 0.0 <= value < 1.0):
                raise ValueError(f"--{name}-edges {value}: choose a fraction in [0, 1), e.g. 0.1")
        if self.val + self.test >= 1.0:
            raise ValueError(
                f"--val-edges {self.val} + --test-edges {self.test} >= 1 leaves no training "
                "edges; choose fractions that sum to less than 1, e.g. 0.1 and 0.1"
            )
        if self.num_neg < 1:
            raise ValueError(f"--eval-negatives {self.num_neg}: choose >= 1, e.g. 1000")
        if self.seed < 0:
            raise ValueError(f"link split seed={self.seed}; choose a seed >= 0")

    @property
    def target(self) -> tuple[str, str, str]:
        """``edge_type`` as a triple (a heterogeneous run's target relation)."""
        src, rel, dst = self.edge_type.split("__")
        return src, rel, dst


@dataclass(frozen=True, slots=True, eq=False)
class LinkSplit:
    """A link-prediction split of one graph (held-out links removed from ``graph``).

    Attributes:
        graph: The training graph: train links in both directions, features, labels, masks.
        train_2E: ``[2, E]`` int64 train links, each undirected link once (row 0 = source).
        val_2K: ``[2, K]`` int64 validation links; ``val_neg_KQ`` ``[K, Q]`` int64 negative
            destinations of each (the source is the link's).
        val_neg_KQ: See ``val_2K``.
        test_2K: ``[2, K]`` int64 test links; ``test_neg_KQ`` likewise.
        test_neg_KQ: See ``test_2K``.
    """

    graph: Graph
    train_2E: np.ndarray
    val_2K: np.ndarray
    val_neg_KQ: np.ndarray
    test_2K: np.ndarray
    test_neg_KQ: np.ndarray

    def __post_init__(self) -> None:
        n = self.graph.num_nodes
        for name in ("train_2E", "val_2K", "test_2K"):
            arr = getattr(self, name)
            if arr.ndim != 2 or arr.shape[0] != 2 or arr.dtype != np.int64:
                raise ValueError(f"{name} is {arr.dtype} {arr.shape}; expected int64 [2, K]")
            if arr.size and (arr.min() < 0 or arr.max() >= n):
                raise ValueError(f"{name} has node ids outside [0, {n}); fix the split files")
        for split in ("val", "test"):
            pos, neg = getattr(self, f"{split}_2K"), getattr(self, f"{split}_neg_KQ")
            if neg.ndim != 2 or neg.shape[0] != pos.shape[1] or neg.dtype != np.int64:
                raise ValueError(
                    f"{split}_neg_KQ is {neg.dtype} {neg.shape}; expected int64 "
                    f"[{pos.shape[1]}, Q] (one row of negatives per {split} link)"
                )
            if neg.size and (neg.min() < 0 or neg.max() >= n):
                raise ValueError(f"{split}_neg_KQ has node ids outside [0, {n})")

    @property
    def num_neg(self) -> int:
        """``Q``, negatives per held-out link."""
        return int(self.val_neg_KQ.shape[1])


def undirected_pairs(graph: Graph) -> np.ndarray:
    """``[2, U]`` int64 distinct ``(min, max)`` pairs of the graph's edges, sorted, no loops."""
    dst_E = graph.dst_of_edges()
    src_E = np.asarray(graph.indices, dtype=np.int64)
    lo, hi = np.minimum(src_E, dst_E), np.maximum(src_E, dst_E)
    keep = lo != hi
    key = np.unique(lo[keep] * graph.num_nodes + hi[keep])
    return np.stack([key // graph.num_nodes, key % graph.num_nodes]).astype(np.int64)


def _oriented(pairs_2K: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``pairs_2K`` with each column's endpoints swapped on a seeded coin flip."""
    flip = rng.random(pairs_2K.shape[1]) < 0.5
    return np.where(flip, pairs_2K[::-1], pairs_2K).astype(np.int64)


def training_graph(graph: Graph, train_2E: np.ndarray) -> Graph:
    """``graph`` with only the ``train_2E`` links, in both directions (data fields kept)."""
    return Graph.from_edge_index(
        train_2E,
        graph.num_nodes,
        symmetric=True,
        self_loops=False,
        x=graph.x,
        y=graph.y,
        train_mask=graph.train_mask,
        val_mask=graph.val_mask,
        test_mask=graph.test_mask,
        name=graph.name,
        num_classes_hint=graph.num_classes_hint,
    )


def edge_split(graph: Graph, config: LinkSplitConfig) -> LinkSplit:
    """Hold out ``config.val`` / ``config.test`` of the undirected links (module docstring).

    Args:
        graph: Any homogeneous graph (read as undirected).
        config: Fractions, negatives per held-out link and seed.

    Returns:
        The split; the same config and graph always give the same split.

    Raises:
        ValueError: The graph has no links, or a fraction leaves a split empty.
    """
    pairs = undirected_pairs(graph)
    total = int(pairs.shape[1])
    num_val, num_test = int(config.val * total), int(config.test * total)
    if total == 0 or total - num_val - num_test < 1:
        raise ValueError(f"graph {graph.name!r} has {total} links; nothing to split")
    if (config.val > 0 and num_val == 0) or (config.test > 0 and num_test == 0):
        raise ValueError(
            f"graph {graph.name!r} has {total} links: --val-edges {config.val} / --test-edges "
            f"{config.test} hold out no link; raise them or use a larger graph"
        )
    rng = np.random.default_rng(config.seed)
    perm = rng.permutation(total)
    pairs = _oriented(pairs[:, perm], rng)
    val, test = pairs[:, :num_val], pairs[:, num_val : num_val + num_test]
    train = pairs[:, num_val + num_test :]
    n = graph.num_nodes
    return LinkSplit(
        graph=training_graph(graph, train),
        train_2E=np.ascontiguousarray(train),
        val_2K=np.ascontiguousarray(val),
        val_neg_KQ=rng.integers(0, n, size=(num_val, config.num_neg), dtype=np.int64),
        test_2K=np.ascontiguousarray(test),
        test_neg_KQ=rng.integers(0, n, size=(num_test, config.num_neg), dtype=np.int64),
    )


@dataclass(frozen=True, slots=True, eq=False)
class RelationLinkSplit:
    """A link-prediction split of one relation of a heterogeneous graph.

    Attributes:
        graph: The training graph: held-out links removed from the target relation, and their
            reverses from every relation that leads back (``rev_`` relations, symmetrized
            same-type relations), so message passing never sees a held-out link.
        edge_type: The target relation ``(src, rel, dst)``; links are ``src -> dst`` pairs of
            type-local ids.
        train_2E: ``[2, E]`` int64 train links (row 0: ``src`` ids, row 1: ``dst`` ids).
        val_2K: ``[2, K]`` int64 validation links; ``val_neg_KQ`` ``[K, Q]`` int64 negative
            ``dst`` ids of each.
        val_neg_KQ: See ``val_2K``.
        test_2K: ``[2, K]`` int64 test links; ``test_neg_KQ`` likewise.
        test_neg_KQ: See ``test_2K``.
    """

    graph: HeteroGraph
    edge_type: EdgeType
    train_2E: np.ndarray
    val_2K: np.ndarray
    val_neg_KQ: np.ndarray
    test_2K: np.ndarray
    test_neg_KQ: np.ndarray


def relation_edge_split(
    graph: HeteroGraph, edge_type: EdgeType, config: LinkSplitConfig
) -> RelationLinkSplit:
    """Hold out ``config.val`` and ``config.test`` of ``edge_type``'s links (see the module doc).

    Candidates are the relation's distinct ``(src, dst)`` pairs; for a same-type relation,
    its distinct undirected pairs without self-loops, each oriented by a seeded coin flip (as
    ``edge_split``). Negatives are ``dst`` ids uniform over the destination type.

    Raises:
        ValueError: ``edge_type`` is not a relation of ``graph``, or it has no links.
    """
    if edge_type not in graph.relations:
        names = sorted("__".join(et) for et in graph.relations)
        raise ValueError(
            f"--target-edge {'__'.join(edge_type)} is not a relation; choose one of {names}"
        )
    src, _, dst = edge_type
    rel = graph.relations[edge_type]
    n_dst = graph.num_nodes(dst)
    src_E = np.asarray(rel.indices, dtype=np.int64)
    dst_E = np.repeat(np.arange(n_dst, dtype=np.int64), np.diff(rel.indptr))
    rng = np.random.default_rng(config.seed)
    if src == dst:
        lo, hi = np.minimum(src_E, dst_E), np.maximum(src_E, dst_E)
        keys = np.unique((lo * n_dst + hi)[lo != hi])
        pairs = _oriented(np.stack([keys // n_dst, keys % n_dst]), rng)
    else:
        keys = np.unique(src_E * n_dst + dst_E)
        pairs = np.stack([keys // n_dst, keys % n_dst])
    if pairs.shape[1] == 0:
        raise ValueError(f"relation {'__'.join(edge_type)} has no links to split")
    perm = rng.permutation(pairs.shape[1])
    k_val, k_test = (round(pairs.shape[1] * f) for f in (config.val, config.test))
    val, test = np.sort(perm[:k_val]), np.sort(perm[k_val : k_val + k_test])
    train = np.sort(perm[k_val + k_test :])
    held = pairs[:, np.concatenate([val, test])]
    relations = dict(graph.relations)
    for et, r in graph.relations.items():
        if et == edge_type or (et[0] == dst and et[2] == src):
            relations[et] = _without(
                r, held, forward=et[0] == src and et[2] == dst, same=src == dst
            )
    return RelationLinkSplit(
        graph=replace(graph, relations=relations),
        edge_type=edge_type,
        train_2E=pairs[:, train],
        val_2K=pairs[:, val],
        val_neg_KQ=rng.integers(0, n_dst, (val.shape[0], config.num_neg), dtype=np.int64),
        test_2K=pairs[:, test],
        test_neg_KQ=rng.integers(0, n_dst, (test.shape[0], config.num_neg), dtype=np.int64),
    )


def _without(rel: Relation, held_2K: np.ndarray, *, forward: bool, same: bool) -> Relation:
    """``rel`` less the held-out links.

    ``s -> d`` pairs when ``forward``, their reverses ``d -> s`` when the relation leads back,
    both when the types are the same.
    """
    num_dst = int(rel.indptr.shape[0]) - 1
    src_E = np.asarray(rel.indices, dtype=np.int64)
    dst_E = np.repeat(np.arange(num_dst, dtype=np.int64), np.diff(rel.indptr))
    drop: list[np.ndarray] = []
    if forward:
        drop.append(held_2K[0] * num_dst + held_2K[1])
    if same or not forward:
        drop.append(held_2K[1] * num_dst + held_2K[0])
    keep = ~np.isin(src_E * num_dst + dst_E, np.concatenate(drop))
    indptr = np.zeros(num_dst + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst_E[keep], minlength=num_dst), out=indptr[1:])
    return Relation(indptr=indptr, indices=rel.indices[keep], num_src=rel.num_src)
