"""``ExtendedSampler``: PyG's optional sampling modes (disjoint, weighted, temporal), by node type.

``NeighborSampler`` / ``RelationalSampler`` (both fronts of ``FanoutEngine``) are the fast
path for plain fanouts (the distributed runtime's); this sampler adds PyG's other modes, over
whole-graph ``CSRNeighborSource`` s keyed by relation. A homogeneous graph is its one-type case
(``ExtendedSampler.over_graph``, ``sample_graph``: the ``SampledSubgraph`` layout, seeds first,
one segment per hop, edges grouped by destination in ``n_id`` order, blocks as prefixes); a
typed graph gets ``gnnsys.sampler.neighbor``'s layout (per type, seeds first and one segment per
hop; per relation, edges grouped by destination; typed blocks as prefixes):

* **disjoint**: every seed grows its own tree over all node types; a node reached from two
  seeds appears twice, and ``batch`` names each node's seed position.
* **weighted** (``edge_weight``, per relation): without replacement, the ``k`` edges with the
  smallest Efraimidis-Spirakis keys ``-log(u) / w`` (edges of weight 0 are never drawn); with
  replacement, ``k`` inverse-CDF draws over the weights. Relations without weights draw
  uniformly.
* **temporal** (``node_time`` per node type, or ``edge_time`` per relation): a neighbor of a
  tree whose seed has time ``t`` is a candidate only if its node time (or the edge's time) is
  ``<= t``; ``temporal_strategy='uniform'`` draws uniformly among the candidates, ``'last'``
  takes the ``k`` most recent. As in pyg-lib, a node type (relation) without times is never
  filtered; temporal sampling is always disjoint.

As in PyG, a node with at most ``k`` candidates (without replacement) takes all of them, and a
node is expanded once per tree, at the hop where it is first reached.

**Randomness.** Each relation draws through ``gnnsys.sampler.candidates.CandidateDraw`` with
the key ``draw_key(relation_seed(seed, edge_type), hop, fanout, replace)``, so relations sharing
a destination draw independently and a batch depends only on its seed; the one-type sampler of
``over_graph`` keys its one relation by the batch seed itself. Within a hop, a type's new nodes
are numbered by first appearance over the relations in ``edge_types`` order, as in
``RelationalSampler``. Cost per hop and relation: ``CandidateDraw``'s (``O(k)`` per frontier
node on its prefix path, which needs time-sorted rows when temporal: ``candidates.time_sorted``,
which the loaders apply; else ``O(degree)``).

Shape legend: ``B`` seeds, ``F`` frontier nodes of one type, ``E`` drawn edges of one relation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from gnnsys.sampler.candidates import (
    CandidateDraw,
    KeyIds,
    by_position,
    check_strategy,
    seed_times,
)
from gnnsys.sampler.csr_source import CSRNeighborSource
from gnnsys.sampler.draw import draw_key
from gnnsys.sampler.neighbor import (
    RelationalSampler,
    RelationalSubgraph,
    checked_seeds,
    relation_seed,
    seeds_of,
)
from gnnsys.sampler.neighbor import assemble as assemble_hetero
from gnnsys.sampler.relabel import Piece
from gnnsys.types import ONE_RELATION, ONE_TYPE, EdgeType, SampledSubgraph

__all__ = ["ExtendedSampler"]


class ExtendedSampler:
    """Disjoint, weighted and temporal fanout sampling over typed nodes (module docstring).

    Args:
        config: Fanouts per relation, replacement, disjointness, temporal strategy.
        sources: Relation -> whole-graph ``CSRNeighborSource`` (rows = type-local dst ids).
        num_nodes: Node type -> ``N_t``, in output order (every type, even unreached ones).
        edge_weight: Relation -> ``[E]`` weights by edge id (missing relations: uniform).
        node_time: Node type -> ``[N_t]`` timestamps (node-level temporal sampling).
        edge_time: Relation -> ``[E]`` timestamps by edge id (edge-level temporal sampling).
        relation_key: ``(batch seed, relation) -> the relation's draw seed`` (as in
            ``FanoutEngine``); ``None`` draws with the batch seed itself (``over_graph``).

    Raises:
        ValueError: Unknown relations or types, per-shard sources, both kinds of time, wrong
            lengths, negative weights.

    Thread-safe: ``sample`` keeps its state on the stack.
    """

    @dataclass(frozen=True, kw_only=True, slots=True)
    class Config(RelationalSampler.Config):
        """``RelationalSampler``'s settings (fanouts, replacement) and the extended ones."""

        disjoint: bool = False
        """Every seed grows its own tree (forced on by temporal sampling, as in PyG)."""
        temporal_strategy: str = "uniform"
        """``'uniform'`` among the temporal candidates, or ``'last'``: the most recent."""

        def __post_init__(self) -> None:
            """Check fanouts as the plain config does; reject unknown strategies."""
            RelationalSampler.Config.__post_init__(self)
            check_strategy(self.temporal_strategy)

    def __init__(
        self,
        config: Config,
        *,
        sources: Mapping[EdgeType, CSRNeighborSource],
        num_nodes: Mapping[str, int],
        edge_weight: Mapping[EdgeType, Tensor] | None = None,
        node_time: Mapping[str, Tensor] | None = None,
        edge_time: Mapping[EdgeType, Tensor] | None = None,
        relation_key: Callable[[int, EdgeType], int] | None = relation_seed,
    ) -> None:
        if node_time and edge_time:
            raise ValueError("pass node_time or edge_time, not both (PyG's time_attr is one)")
        self.config = config
        self.num_nodes = {t: int(n) for t, n in num_nodes.items()}
        self.edge_types = list(config.fanouts)
        missing = [et for et in self.edge_types if et not in sources]
        unknown = [et for et in self.edge_types if not {et[0], et[2]} <= set(self.num_nodes)]
        if missing or unknown:
            raise ValueError(f"relations without a source {missing} or unknown types {unknown}")
        extra = [et for et in [*(edge_weight or {}), *(edge_time or {})] if et not in sources]
        if extra:
            raise ValueError(f"edge_weight/edge_time name relations the graph lacks: {extra}")
        self.node_time = {t: self._node_time(t, v) for t, v in (node_time or {}).items()}
        self.temporal = bool(node_time) or bool(edge_time)
        self.disjoint = config.disjoint or self.temporal
        self._indptr = {et: sources[et].indptr.numpy() for et in self.edge_types}
        self._indices = {et: sources[et].indices.numpy() for et in self.edge_types}
        self._e_id = {et: _e_id(et, sources[et]) for et in self.edge_types}
        self._draws = {
            et: self._relation_draw(et, _get(edge_weight, et), _get(edge_time, et))
            for et in self.edge_types
        }
        self.relation_key = relation_key  # None: over_graph's one relation, at the batch seed

    @classmethod
    def over_graph(
        cls,
        fanouts: Sequence[int],
        *,
        source: CSRNeighborSource,
        replace: bool = False,
        disjoint: bool = False,
        temporal_strategy: str = "uniform",
        edge_weight: Tensor | None = None,
        node_time: Tensor | None = None,
        edge_time: Tensor | None = None,
    ) -> ExtendedSampler:
        """The sampler of a homogeneous graph: one node type, one relation (``sample_graph``).

        Args:
            fanouts: Neighbors drawn per hop, seed hop first; -1 takes every candidate. May be
                empty (zero hops: the batch is its seeds, as PyG's ``num_neighbors=[]``).
            source: The whole graph's ``CSRNeighborSource`` (rows = gids).
            replace: Draw with replacement (``Config.replace``).
            disjoint: Every seed grows its own tree (``Config.disjoint``).
            temporal_strategy: ``'uniform'`` or ``'last'`` (``Config.temporal_strategy``).
            edge_weight: ``[E]`` non-negative weights by edge id, or ``None`` (uniform).
            node_time: ``[N]`` node timestamps (node-level temporal sampling), or ``None``.
            edge_time: ``[E]`` edge timestamps by edge id (edge-level), or ``None``.

        Raises:
            ValueError: Fanouts of 0 or below -1, and every error of the constructor.
        """
        hops = tuple(fanouts)
        if any(not isinstance(f, int) or f == 0 or f < -1 for f in hops):
            raise ValueError(f"fanouts must be a tuple of ints > 0 or -1, got {fanouts!r}")
        config = cls.Config(
            fanouts={ONE_RELATION: hops}, replace=replace, disjoint=disjoint,
            temporal_strategy=temporal_strategy,
        )  # fmt: skip
        sampler = cls(
            config, sources={ONE_RELATION: source}, num_nodes={ONE_TYPE: source.num_rows},
            edge_weight=None if edge_weight is None else {ONE_RELATION: edge_weight},
            node_time=None if node_time is None else {ONE_TYPE: node_time},
            edge_time=None if edge_time is None else {ONE_RELATION: edge_time},
            relation_key=None,
        )  # fmt: skip
        return sampler

    def sample_graph(
        self, seed_gid: Tensor, *, seed: int, seed_time: Tensor | None = None
    ) -> SampledSubgraph:
        """``sample`` on a one-type sampler (``over_graph``), as a ``SampledSubgraph``.

        Raises:
            ValueError: The sampler has more than one node type or relation, and every error
                of ``sample``.
        """
        if len(self.num_nodes) != 1 or len(self.edge_types) != 1:
            raise ValueError(
                f"sample_graph needs one node type and one relation, this sampler has "
                f"{list(self.num_nodes)} and {self.edge_types}; call sample(..., input_type=)"
            )
        (node_type,), (edge_type,) = self.num_nodes, self.edge_types
        times = None if seed_time is None else {node_type: seed_time}
        sub = self._sample({node_type: seed_gid}, seed, times, with_edge_index=False)
        return SampledSubgraph(
            n_id=sub.n_id[node_type],
            blocks=tuple(blocks[edge_type] for blocks in sub.blocks),
            batch_size=sub.batch_size,
            num_sampled_nodes=sub.num_sampled_nodes[node_type],
            num_sampled_edges=sub.num_sampled_edges[edge_type],
            batch=None if sub.batch is None else sub.batch[node_type],
        )

    def _relation_draw(
        self, edge_type: EdgeType, weight: Tensor | None, edge_time: Tensor | None
    ) -> CandidateDraw:
        e_id, num_edges = self._e_id[edge_type], int(self._indices[edge_type].shape[0])
        return CandidateDraw(
            indptr=self._indptr[edge_type],
            indices=self._indices[edge_type],
            weight_C=by_position(f"edge_weight[{edge_type}]", weight, e_id, num_edges),
            edge_time_C=by_position(f"edge_time[{edge_type}]", edge_time, e_id, num_edges),
            src_time_N=self.node_time.get(edge_type[0]),
            strategy=self.config.temporal_strategy,
            replace=self.config.replace,
        )

    def _node_time(self, node_type: str, values: Tensor) -> np.ndarray:
        if node_type not in self.num_nodes:
            raise ValueError(f"node_time names type {node_type!r}, not in {list(self.num_nodes)}")
        if values.dim() != 1 or int(values.shape[0]) != self.num_nodes[node_type]:
            raise ValueError(
                f"node_time[{node_type!r}] has shape {tuple(values.shape)}; the type has "
                f"{self.num_nodes[node_type]} nodes"
            )
        out: np.ndarray = values.detach().cpu().numpy()
        return out

    def sample(
        self,
        seed_lid: Tensor,
        *,
        input_type: str,
        seed: int,
        seed_time: Tensor | None = None,
    ) -> RelationalSubgraph:
        """Sample the ``L``-hop typed in-neighborhood of ``seed_lid`` (of ``input_type``).

        Args:
            seed_lid: ``[B]`` type-local ids of ``input_type`` (distinct unless disjoint).
            input_type: The seeds' node type.
            seed: Batch seed; it fixes every draw.
            seed_time: ``[B]`` time of each seed (temporal); ``None`` takes the seeds' node
                time.

        Raises:
            ValueError: Unknown type; empty, repeated (not disjoint) or out-of-range seeds;
                temporal sampling without a time for the seeds.
        """
        times = None if seed_time is None else {input_type: seed_time}
        return self.sample_types({input_type: seed_lid}, seed=seed, seed_time=times)

    def sample_types(
        self,
        seed_lids: Mapping[str, Tensor],
        *,
        seed: int,
        seed_time: Mapping[str, Tensor] | None = None,
    ) -> RelationalSubgraph:
        """``sample`` from seeds of one or more types (PyG's seed and seed-time dicts).

        Seed ``i`` of every type roots tree ``i`` (pyg-lib's rule: a link's source and
        destination share a tree), so the types' seed times must agree on shared trees.
        The first type is the output's ``input_type``.
        """
        return self._sample(seed_lids, seed, seed_time, with_edge_index=True)

    def _sample(
        self,
        seed_lids: Mapping[str, Tensor],
        seed: int,
        seed_time: Mapping[str, Tensor] | None,
        *,
        with_edge_index: bool,
    ) -> RelationalSubgraph:
        seeds = checked_seeds(seed_lids, self._seeds_of)
        time_B = self._tree_times(seeds, seed_time or {})
        return self._sample_hops(seeds, next(iter(seeds)), time_B, seed, with_edge_index)

    def _seeds_of(self, node_type: str, seed_lid: Tensor) -> np.ndarray:
        """One type's seeds, checked: ``seeds_of``, the range and (not disjoint) no repeats."""
        seeds = seeds_of(node_type, seed_lid, list(self.num_nodes))
        if int(seeds.max()) >= self.num_nodes[node_type]:
            raise ValueError(f"seed_lid has ids outside [0, {self.num_nodes[node_type]})")
        if not self.disjoint and np.unique(seeds).size != seeds.size:
            raise ValueError("seed_lid has repeated ids; pass each seed once or use disjoint")
        return seeds

    def _tree_times(
        self, seeds: dict[str, np.ndarray], seed_time: Mapping[str, Tensor]
    ) -> np.ndarray | None:
        """Each tree's time limit: the given seed times, else the seeds' node times."""
        if not self.temporal:
            return None
        times = {}
        for node_type, lid in seeds.items():
            if node_type in seed_time:
                times[node_type] = seed_times(seed_time[node_type], lid.size)
            elif node_type in self.node_time:
                times[node_type] = self.node_time[node_type][lid]
            else:
                raise ValueError(
                    f"temporal sampling needs a time per seed: the seeds' node type "
                    f"{node_type!r} has no node time; pass input_time (NeighborLoader) or "
                    "edge_label_time (LinkNeighborLoader)"
                )
        longest: np.ndarray = max(times.values(), key=len)
        if any(not np.array_equal(t, longest[: t.size]) for t in times.values()):
            raise ValueError(
                "seeds of different types give the same tree different times; pass seed_time"
            )
        return longest

    def _sample_hops(
        self,
        seeds: dict[str, np.ndarray],
        input_type: str,
        time_B: np.ndarray | None,
        seed: int,
        with_edge_index: bool,
    ) -> RelationalSubgraph:
        empty = np.zeros(0, dtype=np.int64)
        frontier = {t: (empty, empty) for t in self.num_nodes}
        for node_type, lid in seeds.items():  # each seed roots its tree
            frontier[node_type] = (lid, np.arange(lid.shape[0], dtype=np.int64))
        ids = {t: KeyIds(self._keys(t, frontier[t][0], frontier[t][1])) for t in self.num_nodes}
        parts = {t: [frontier[t][0]] for t in self.num_nodes}
        trees = {t: [frontier[t][1]] for t in self.num_nodes}
        hops: dict[EdgeType, list[Piece]] = {et: [] for et in self.edge_types}
        for hop in range(self.config.num_hops):
            drawn = {et: self._draw(et, hop, seed, frontier[et[2]], time_B) for et in hops}
            for node_type in self.num_nodes:
                rels = [drawn[et] for et in self.edge_types if et[0] == node_type]
                frontier[node_type] = self._number(ids[node_type], node_type, rels)
                parts[node_type].append(frontier[node_type][0])
                trees[node_type].append(frontier[node_type][1])
            for et in self.edge_types:
                hops[et].append(drawn[et][0])
        batch = None
        if self.disjoint:
            batch = {t: torch.from_numpy(np.concatenate(ts)) for t, ts in trees.items()}
        return assemble_hetero(
            parts, hops, input_type, self.config.num_hops, batch, with_edge_index=with_edge_index
        )

    def _draw(
        self,
        edge_type: EdgeType,
        hop: int,
        seed: int,
        frontier: tuple[np.ndarray, np.ndarray],
        time_B: np.ndarray | None,
    ) -> tuple[Piece, np.ndarray]:
        """``(piece without col_E, [E] tree of each edge)`` of one relation and hop.

        ``frontier`` is the ``(ids, trees)`` of the destination type's nodes new at ``hop - 1``.
        """
        gid_F, tree_F = frontier
        fanout = self.config.fanouts[edge_type][hop]
        if fanout == 0 or gid_F.size == 0:
            none = np.zeros(0, dtype=np.int64)
            return Piece(np.zeros(gid_F.shape[0], dtype=np.int64), none, none), none
        relation = seed if self.relation_key is None else self.relation_key(seed, edge_type)
        key = draw_key(relation, hop, fanout, self.config.replace)
        count_F, pos_E = self._draws[edge_type].draw(gid_F, tree_F, time_B, fanout, key)
        src_E = self._indices[edge_type].take(pos_E).astype(np.int64, copy=False)
        e_id = self._e_id[edge_type]
        e_id_E = pos_E if e_id is None else e_id.take(pos_E)
        return Piece(count_F, src_E, e_id_E.astype(np.int64, copy=False)), np.repeat(
            tree_F, count_F
        )

    def _number(
        self, ids: KeyIds, node_type: str, drawn: list[tuple[Piece, np.ndarray]]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Number one type's drawn sources (each piece's ``col_E``); its new ``(ids, trees)``."""
        keys = [self._keys(node_type, piece.src_E, tree_E) for piece, tree_E in drawn]
        col_E, new_keys = ids.number(keys[0] if len(keys) == 1 else np.concatenate(keys or [_NONE]))
        offset = 0
        for piece, _ in drawn:
            piece.col_E = col_E[offset : offset + piece.src_E.shape[0]]
            offset += piece.src_E.shape[0]
        return self._split_keys(node_type, new_keys)

    def _keys(self, node_type: str, gid: np.ndarray, tree: np.ndarray) -> np.ndarray:
        """One int64 key per (tree, id) when disjoint, else the id."""
        return tree * self.num_nodes[node_type] + gid if self.disjoint else gid

    def _split_keys(self, node_type: str, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.disjoint:
            num = self.num_nodes[node_type]
            return keys % num, keys // num
        return keys, np.zeros_like(keys)


_NONE = np.zeros(0, dtype=np.int64)


def _e_id(edge_type: EdgeType, source: CSRNeighborSource) -> np.ndarray | None:
    if source.row_of_gid is not None:
        raise ValueError(f"{edge_type}: needs a whole-graph CSRNeighborSource (rows = ids)")
    return None if source.e_id is None else source.e_id.numpy()


def _get(values: Mapping[EdgeType, Tensor] | None, edge_type: EdgeType) -> Tensor | None:
    return None if values is None else values.get(edge_type)
