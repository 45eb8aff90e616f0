"""The sampler: multi-hop fanout sampling with PyG's node order and hop-sliced blocks.

Two fronts over one engine (``gnnsys.sampler.engine.FanoutEngine``): ``NeighborSampler``, the
one-type case that the ``Data`` loaders use, and ``RelationalSampler``, per relation over typed
nodes, which the runtime, ``DistNeighborLoader`` and the ``HeteroData`` loaders use (a
homogeneous graph is its one type and one relation, and both fronts give it the same batch).

Per hop the sampler sends the hop's *new* nodes (deduplicated) to the ``NeighborSource`` in one
call, so a remote source sends one request per hop per owner. Nodes sampled at an earlier hop are
not sampled again (PyG's semantics): hop ``h`` draws in-edges of the nodes first reached at hop
``h - 1`` (the seeds at hop 0).

Layout of the output (``L`` hops, PyG's ``NeighborLoader`` layout)::

    n_id   = [seeds | new at hop 0 | new at hop 1 | ... ]      num_sampled_nodes per segment
    edges  = [hop 0 edges | hop 1 edges | ... ]                num_sampled_edges per hop

Edges are grouped by destination and destinations appear in ``n_id`` order, so the edges of hops
``0 .. h`` form a CSR over the destinations ``n_id[:sum(num_sampled_nodes[:h+1])]``. The block of
layer ``l`` (input layer first) is therefore a *prefix* of the arrays of the input block: every
block is a zero-copy slice.

Relabelling (one gid -> local-id table per type, kept between batches) and threads
(``Config.num_threads``: a big hop cut into per-thread chunks; the batch never depends on the
count) are the engine's: ``gnnsys.sampler.engine``.

**One engine for both kinds.** ``FanoutEngine`` runs the hops over typed nodes: one table per
node type, one fanout list and source per relation. ``NeighborSampler`` is its one-type case
(``ONE_TYPE``, ``ONE_RELATION``, drawn with the batch seed itself);
``RelationalSampler`` (below) is its typed front (each relation drawn with its
``relation_seed``). Everything above holds per relation and per type.

**Typed batches.** Hop ``h`` draws, for every relation ``(src, rel, dst)``, up to
``fanouts[rel][h]`` in-neighbors of the ``dst`` nodes first reached at hop ``h - 1`` (the seeds
at hop 0); the drawn ``src`` nodes not seen before join their type's node list. As in PyG (pyg-lib's
``hetero_neighbor_sample``), a node is expanded once, at the hop after it is first reached;
``-1`` takes every in-neighbor and ``0`` none. Ids are type-local throughout.

Layout of the output, per node type ``t`` and relation ``r`` (``L`` hops)::

    n_id[t]   = [seeds (input type only) | new at hop 0 | new at hop 1 | ...]
    edges[r]  = [hop 0 | hop 1 | ...], grouped by destination in n_id[dst] order

Hop ``h``'s destinations of ``r`` are the segment ``h`` of ``n_id[dst]``, so the edges of hops
``0 .. s-1`` of ``r`` form a CSR over the first ``sum(num_sampled_nodes[dst][:s])`` nodes of
``dst``: every layer's typed block is a zero-copy prefix of the input layer's, as in
``NeighborSampler``.

**Randomness.** Each relation draws through ``gnnsys.sampler.draw`` with the relation seed
``relation_seed(seed, edge_type)`` (a hash of the batch seed and the edge type's name, not of
its position), so a draw depends only on ``(seed, edge type, hop, dst id, fanout, replace)`` and
the destination's in-edge list: a shard owner draws the same edges as the whole graph. A
homogeneous graph's one relation draws with the batch seed, so this sampler and
``NeighborSampler`` give it the same batch.

Shape legend: ``B`` seeds, ``N`` sampled nodes, ``E`` sampled edges, ``M`` destinations of a hop.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import torch
from torch import Tensor

from gnnsys.prefetch.ordered import OrderedMap
from gnnsys.sampler.base import NeighborSource, prefix_blocks
from gnnsys.sampler.csr_source import CSRNeighborSource
from gnnsys.sampler.degree import DegreeSource, with_in_degree
from gnnsys.sampler.draw import batch_seed
from gnnsys.sampler.engine import FanoutEngine
from gnnsys.sampler.relabel import Piece
from gnnsys.types import ONE_RELATION, ONE_TYPE, Block, EdgeType, SampledSubgraph
from gnnsys.types.relations import HeteroGraph

__all__ = [
    "NeighborSampler",
    "RelationalSampler",
    "RelationalSubgraph",
    "assemble",
    "checked_seeds",
    "csr_sources",
    "relation_seed",
    "seeds_of",
    "relational_output",
]


class NeighborSampler:
    """Implements ``Sampler``: fanout sampling of in-neighbors, hop by hop.

    The one-type case of ``FanoutEngine`` (one node type, one relation, keyed by the batch
    seed); ``RelationalSampler`` is its typed front over the same engine.

    Args:
        config: Fanouts, replacement and threads.
        source: Where neighbors come from (``CSRNeighborSource`` or a remote implementation).
            A source whose class sets ``concurrent_calls = True`` is called once per chunk, from
            several threads at once; any other source gets one call per hop.
        degrees: Whole-graph in-degrees (``gnnsys.sampler.degree``); when given, every block
            carries ``src_in_degree`` (GCN normalises by it, as PyG's ``GCNConv`` on the whole
            graph). One lookup of ``N`` gids per batch; ``None`` leaves it unset.

    Thread-safe: concurrent ``sample`` calls each take their own id table (``N`` int32, made
    on first use and kept for later calls), so several threads can sample different batches
    at once (``sample_batches`` does this, in order).
    """

    @dataclass(frozen=True, kw_only=True, slots=True)
    class Config:
        """Sampling settings."""

        fanouts: tuple[int, ...] = (15, 10)
        """Neighbors drawn per hop, seed hop first; -1 takes every neighbor."""
        replace: bool = False
        """Draw with replacement (exactly ``fanout`` edges for nodes with any in-edge)."""
        num_threads: int | None = None
        """Threads one ``sample`` call uses (the caller's included); ``None`` follows
        ``torch.get_num_threads()`` at call time, so a Ray worker pinned to 1 thread samples on
        1 thread. The result never depends on it."""

        def __post_init__(self) -> None:
            """Reject fanouts of 0 or below -1, an empty tuple, and num_threads below 1."""
            fanouts = tuple(self.fanouts)
            if not fanouts or any(not isinstance(f, int) or f == 0 or f < -1 for f in fanouts):
                raise ValueError(
                    f"fanouts must be a non-empty tuple of ints > 0 or -1, got {self.fanouts!r}"
                )
            object.__setattr__(self, "fanouts", fanouts)
            threads = self.num_threads
            if threads is not None and (not isinstance(threads, int) or threads < 1):
                raise ValueError(f"num_threads must be an int >= 1 or None, got {threads!r}")

    def __init__(
        self, config: Config, *, source: NeighborSource, degrees: DegreeSource | None = None
    ) -> None:
        if not isinstance(config, NeighborSampler.Config):
            raise TypeError(f"config must be NeighborSampler.Config, got {type(config).__name__}")
        self.config = config
        self.source = source
        self.degrees = degrees
        self.engine = FanoutEngine(
            {ONE_RELATION: config.fanouts},
            {ONE_RELATION: source},
            [ONE_TYPE],
            replace=config.replace,
            num_threads=config.num_threads,
            relation_key=None,
        )

    def sample(self, seed_gid: Tensor, *, seed: int) -> SampledSubgraph:
        """Sample the ``len(fanouts)``-hop in-neighborhood of ``seed_gid``.

        Args:
            seed_gid: ``[B]`` distinct int64 (or int32) seed gids.
            seed: Batch seed (e.g. ``batch_seed(run_seed, epoch, batch_index)``).

        Returns:
            ``SampledSubgraph`` with seeds first in ``n_id`` and blocks input layer first.

        Raises:
            ValueError: Empty or repeated seeds, or a source error (a gid it does not hold).
        """
        if seed_gid.dim() != 1 or seed_gid.numel() == 0:
            raise ValueError(
                f"seed_gid must be a non-empty 1-D tensor, got {tuple(seed_gid.shape)}"
            )
        seeds = seed_gid.long().contiguous().numpy()
        if int(seeds.min()) < 0:
            raise ValueError(f"seed_gid has negative gid {int(seeds.min())}; gids are >= 0")
        out = self.engine.run({ONE_TYPE: seeds}, seed)
        num_nodes = out.num_nodes[ONE_TYPE]
        num_edges = out.num_edges[ONE_RELATION]
        sub = SampledSubgraph(
            n_id=out.n_id[ONE_TYPE],
            blocks=prefix_blocks(
                num_nodes,
                num_edges,
                out.rowptr[ONE_RELATION],
                out.col[ONE_RELATION],
                out.e_id[ONE_RELATION],
            ),
            batch_size=num_nodes[0],
            num_sampled_nodes=num_nodes,
            num_sampled_edges=num_edges,
        )
        if self.degrees is None:
            return sub
        return with_in_degree(sub, self.degrees.in_degree(sub.n_id))

    def sample_batches(
        self, requests: Iterable[tuple[Tensor, int]], *, num_workers: int = 2
    ) -> Iterator[SampledSubgraph]:
        """``sample(seed_gid, seed=seed)`` for every request, ``num_workers`` batches at a time.

        Whole batches run concurrently on worker threads (each with its own id table) and come
        back in request order, identical to sequential ``sample`` calls. This is how gnnsys
        uses a second core: one batch is a few milliseconds of numpy work, too little to split
        across threads without hand-offs costing what the split saves (``Config.num_threads``
        splits a batch; use 1 there when ``num_workers > 1``).

        Args:
            requests: ``(seed_gid, seed)`` pairs, read lazily (at most ``2 * num_workers``
                ahead of the consumer).
            num_workers: Worker threads; 1 samples on one background thread.

        Returns:
            An iterator; ``close()`` on it (or dropping it) stops the workers.

        Raises:
            ValueError: ``num_workers < 1``; errors of ``sample`` re-raise at their batch.
        """
        if not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError(f"num_workers must be an int >= 1, got {num_workers!r}")
        return OrderedMap(
            lambda request: self.sample(request[0], seed=request[1]),
            iter(requests),
            num_workers=num_workers,
            capacity=2 * num_workers,
            name="gnnsys-sampler-batch",
        )


def relation_seed(seed: int, edge_type: EdgeType) -> int:
    """The seed of one relation's draws in a batch.

    ``batch_seed`` of the batch seed and a CRC-32 of ``"src__rel__dst"`` (stable across
    processes, unlike ``hash``), so relations sharing a destination draw independently. The one
    relation of a homogeneous graph (``ONE_RELATION``) draws with the batch seed itself, as
    ``NeighborSampler`` does: its one-type case samples the same batch either way.
    """
    if tuple(edge_type) == ONE_RELATION:
        return seed
    return batch_seed(seed, zlib.crc32("__".join(edge_type).encode()), 1)


def csr_sources(graph: HeteroGraph) -> dict[EdgeType, CSRNeighborSource]:
    """One ``CSRNeighborSource`` per relation of ``graph`` (shares its arrays; e_id = CSR pos)."""
    return {et: CSRNeighborSource(r.indptr, r.indices) for et, r in graph.relations.items()}


@dataclass(frozen=True, slots=True, eq=False)
class RelationalSubgraph:
    """Output of ``RelationalSampler`` for one batch of seeds of one node type.

    Attributes:
        n_id: Node type -> ``[N_t]`` int64 type-local ids: seeds first (input type), then
            every hop's new nodes. Every node type of the sampler is present (maybe empty).
        blocks: One dict per layer, input layer first: relation -> ``Block`` whose ``col``
            indexes the first ``num_src`` nodes of the source type and whose rows are the first
            ``num_dst`` nodes of the destination type.
        input_type: The seeds' node type.
        batch_size: ``B``.
        num_sampled_nodes: Node type -> nodes added per hop, seeds first (length ``L + 1``).
        num_sampled_edges: Relation -> edges drawn per hop, seed hop first (length ``L``).
        e_id: Relation -> ``[E]`` int64 edge ids (in the relation) of every hop's edges.
    """

    n_id: dict[str, Tensor]
    blocks: tuple[dict[EdgeType, Block], ...]
    input_type: str
    batch_size: int
    num_sampled_nodes: dict[str, tuple[int, ...]]
    num_sampled_edges: dict[EdgeType, tuple[int, ...]]
    edge_index: dict[EdgeType, Tensor] = field(default_factory=dict)
    """Relation -> ``[2, E]`` int64 local ``(src, dst)`` of every hop's edges, hop by hop."""
    e_id: dict[EdgeType, Tensor] = field(default_factory=dict)
    batch: dict[str, Tensor] | None = None
    """Disjoint sampling (``ExtendedSampler``): node type -> ``[N_t]`` seed position of
    every node's tree; ``None`` otherwise."""


class RelationalSampler:
    """Fanout sampling over typed nodes, one fanout list per relation.

    Args:
        config: Fanouts per relation and replacement.
        sources: Relation -> where its in-neighbors come from (``csr_sources(graph)`` for a
            graph in memory); ids passed and returned are type-local.
        node_types: Every node type, in output order (types no relation reaches are kept,
            empty, as PyG keeps them).
        degrees: Relation -> whole-graph in-degrees of its nodes (``DegreeSource``), for a
            model that normalises by them (GCN): that relation's blocks carry
            ``src_in_degree`` (:func:`with_in_degrees`), as ``NeighborSampler``'s do.

    Raises:
        ValueError: A relation of ``config.fanouts`` without a source or naming an unknown type.

    Thread-safe: concurrent ``sample`` calls each take their own id tables. One call runs on
    the calling thread (``engine.num_threads = 1``): a typed hop is one round per relation,
    each too small for a hand-off to pay (2 threads: 21 ms against 16 ms per 1024-seed batch on
    synthetic:mag 0.1); ``engine.num_threads = T`` splits big hops, with the same batch.
    """

    disjoint = False
    """Trees are never disjoint here (``ExtendedSampler`` has the same attribute)."""

    @dataclass(frozen=True, kw_only=True, slots=True)
    class Config:
        """Sampling settings."""

        fanouts: dict[EdgeType, tuple[int, ...]]
        """Relation -> neighbors drawn per hop, seed hop first; -1 takes all, 0 none. Every
        relation has the same number of hops (PyG's rule)."""
        replace: bool = False
        """Draw with replacement."""

        def __post_init__(self) -> None:
            """Normalise fanouts to tuples; reject unequal hop counts and values below -1."""
            fanouts = {tuple(et): tuple(int(f) for f in fs) for et, fs in self.fanouts.items()}
            hops = {len(fs) for fs in fanouts.values()}
            if len(hops) > 1:
                raise ValueError(
                    f"Number of hops must be the same across all edge types (got {sorted(hops)})"
                )
            if any(f < -1 for fs in fanouts.values() for f in fs):
                raise ValueError(f"fanouts must be >= -1 (-1 = all, 0 = none), got {fanouts}")
            object.__setattr__(self, "fanouts", fanouts)

        @property
        def num_hops(self) -> int:
            """``L``."""
            return len(next(iter(self.fanouts.values()), ()))

    def __init__(
        self,
        config: Config,
        *,
        sources: Mapping[EdgeType, NeighborSource],
        node_types: Sequence[str],
        degrees: Mapping[EdgeType, DegreeSource] | None = None,
    ) -> None:
        self.config = config
        self.degrees = dict(degrees or {})
        self.node_types = list(node_types)
        missing = [et for et in config.fanouts if et not in sources]
        unknown = [et for et in config.fanouts if not {et[0], et[2]} <= set(self.node_types)]
        if missing or unknown:
            raise ValueError(f"relations without a source {missing} or unknown types {unknown}")
        self.edge_types = list(config.fanouts)
        self.sources = dict(sources)
        self.engine = FanoutEngine(
            config.fanouts,
            self.sources,
            self.node_types,
            replace=config.replace,
            num_threads=1,
            relation_key=relation_seed,
        )

    def sample(
        self, seed_lid: Tensor, *, input_type: str, seed: int, with_edge_index: bool = True
    ) -> RelationalSubgraph:
        """Sample the ``L``-hop typed in-neighborhood of ``seed_lid`` (of ``input_type``).

        Args:
            seed_lid: ``[B]`` distinct type-local ids of ``input_type`` nodes.
            input_type: The seeds' node type.
            seed: Batch seed (e.g. ``batch_seed(run_seed, epoch, batch_index)``).
            with_edge_index: Also build ``edge_index`` (an ``O(E)`` pass per relation, for PyG's
                ``HeteroData``); the blocks hold the same edges, so training skips it.

        Raises:
            ValueError: Unknown type, empty or repeated seeds, or a source error.
        """
        return self.sample_types({input_type: seed_lid}, seed=seed, with_edge_index=with_edge_index)

    def sample_types(
        self,
        seed_lids: Mapping[str, Tensor],
        *,
        seed: int,
        seed_time: Mapping[str, Tensor] | None = None,
        with_edge_index: bool = True,
    ) -> RelationalSubgraph:
        """``sample`` from seeds of one or more types (PyG's seed dict).

        A link batch has two: its source and destination types. Each type's seeds come first
        in its ``n_id``; the first type is the output's ``input_type``. ``seed_time`` is
        ``ExtendedSampler.sample_types``'s argument (the same call serves both
        samplers); plain fanouts have no time limit, so it must be ``None``.
        """
        if seed_time is not None:
            raise ValueError(
                "seed_time given to plain fanout sampling; temporal sampling is "
                "ExtendedSampler's (pass time_attr to the loader)"
            )
        seeds = checked_seeds(seed_lids, lambda t, lid: seeds_of(t, lid, self.node_types))
        out = self.engine.run(seeds, seed)
        sub = relational_output(
            out.num_nodes,
            out.num_edges,
            out.rowptr,
            out.col,
            out.e_id,
            out.n_id,
            next(iter(seeds)),
            self.config.num_hops,
            with_edge_index=with_edge_index,
        )
        return with_in_degrees(sub, self.degrees) if self.degrees else sub


def assemble(
    parts: dict[str, list[np.ndarray]],
    hops: dict[EdgeType, list[Piece]],
    input_type: str,
    num_hops: int,
    batch: dict[str, Tensor] | None = None,
    *,
    with_edge_index: bool = True,
) -> RelationalSubgraph:
    """The typed output of per-hop pieces (the layout of the module docstring).

    Args:
        parts: Node type -> ids added per hop, seeds first (``L + 1`` arrays).
        hops: Relation -> one ``Piece`` per hop (``count_M``, ``col_E``, ``e_id_E`` set),
            in the sampler's relation order.
        input_type: The seeds' type.
        num_hops: ``L``.
        batch: Disjoint sampling's tree of every node, or ``None``.
        with_edge_index: Build ``edge_index`` (an ``O(E)`` pass per relation); without it the
            field is empty (the blocks hold the same edges).
    """
    num_nodes = {t: tuple(int(p.shape[0]) for p in ps) for t, ps in parts.items()}
    num_edges = {et: tuple(int(p.src_E.shape[0]) for p in ps) for et, ps in hops.items()}
    rowptr, col, e_id = {}, {}, {}
    none = [np.zeros(0, np.int64)]
    for et, pieces in hops.items():
        count_M = np.concatenate(none + [p.count_M for p in pieces])
        ptr = np.zeros(count_M.shape[0] + 1, dtype=np.int64)
        np.cumsum(count_M, out=ptr[1:])
        rowptr[et] = torch.from_numpy(ptr)
        col[et] = torch.from_numpy(
            np.concatenate(none + [p.col_E.astype(np.int64, copy=False) for p in pieces])
        )
        e_id[et] = torch.from_numpy(np.concatenate(none + [p.e_id_E for p in pieces]))
    n_id = {t: torch.from_numpy(np.concatenate(ps)) for t, ps in parts.items()}
    return relational_output(
        num_nodes,
        num_edges,
        rowptr,
        col,
        e_id,
        n_id,
        input_type,
        num_hops,
        batch,
        with_edge_index=with_edge_index,
    )


def relational_output(
    num_nodes: dict[str, tuple[int, ...]],
    num_edges: dict[EdgeType, tuple[int, ...]],
    rowptr: dict[EdgeType, Tensor],
    col: dict[EdgeType, Tensor],
    e_id: dict[EdgeType, Tensor],
    n_id: dict[str, Tensor],
    input_type: str,
    num_hops: int,
    batch: dict[str, Tensor] | None = None,
    *,
    with_edge_index: bool = True,
) -> RelationalSubgraph:
    """The typed output of every hop's concatenated arrays: one prefix block per layer.

    ``rowptr``/``col``/``e_id`` per relation span every hop (``FanoutEngine``'s ``Sampled``);
    ``with_edge_index`` adds ``[2, E]`` (an ``O(E)`` pass per relation).
    """
    edge_index = {}
    if with_edge_index:
        for et, ptr in rowptr.items():
            count_M = (ptr[1:] - ptr[:-1]).numpy()
            dst_E = np.repeat(np.arange(count_M.shape[0], dtype=np.int64), count_M)
            edge_index[et] = torch.stack([col[et], torch.from_numpy(dst_E)])
    per_relation = {
        et: prefix_blocks(
            num_nodes[et[0]], num_edges[et], rowptr[et], col[et], e_id[et], num_nodes[et[2]]
        )
        for et in rowptr
    }
    blocks = [
        {et: layers[layer] for et, layers in per_relation.items()} for layer in range(num_hops)
    ]
    return RelationalSubgraph(
        n_id=n_id,
        blocks=tuple(blocks),
        input_type=input_type,
        batch_size=num_nodes[input_type][0],
        num_sampled_nodes=num_nodes,
        num_sampled_edges=num_edges,
        edge_index=edge_index,
        e_id=e_id,
        batch=batch,
    )


def with_in_degrees(
    sub: RelationalSubgraph, degrees: Mapping[EdgeType, DegreeSource]
) -> RelationalSubgraph:
    """``sub`` with the blocks of every relation in ``degrees`` carrying ``src_in_degree``.

    A relation's degrees are its sources' whole-graph in-degrees in that relation (GCN's
    normalisation; its sources and destinations are one type, so the destinations' degrees are
    the prefix). Block sources are prefixes of ``n_id``, so each block takes a zero-copy slice.
    """
    blocks = []
    degree = {et: d.in_degree(sub.n_id[et[0]]).long() for et, d in degrees.items()}
    for layer in sub.blocks:
        blocks.append(
            {
                et: replace(b, src_in_degree=degree[et][: b.num_src]) if et in degree else b
                for et, b in layer.items()
            }
        )
    return replace(sub, blocks=tuple(blocks))


def checked_seeds(
    seed_lids: Mapping[str, Tensor], check: Callable[[str, Tensor], np.ndarray]
) -> dict[str, np.ndarray]:
    """Each type's seeds through ``check`` (``seeds_of`` or stricter); refuses no types at all."""
    seeds = {t: check(t, lid) for t, lid in seed_lids.items()}
    if not seeds:
        raise ValueError("seed_lids is empty; pass the seeds of at least one node type")
    return seeds


def seeds_of(node_type: str, seed_lid: Tensor, node_types: Sequence[str]) -> np.ndarray:
    """One type's seeds as int64 numpy, checked (known type, non-empty 1-D, no negatives)."""
    if node_type not in node_types:
        raise ValueError(f"input_type={node_type!r}; choose one of {list(node_types)}")
    if seed_lid.dim() != 1 or seed_lid.numel() == 0:
        raise ValueError(
            f"seed_lid ({node_type}) must be a non-empty 1-D tensor, got {tuple(seed_lid.shape)}"
        )
    seeds: np.ndarray = seed_lid.long().contiguous().numpy()
    if int(seeds.min()) < 0:
        raise ValueError(f"seed_lid ({node_type}) has negative id {int(seeds.min())}")
    return seeds
