"""The heterogeneous trainer of one rank: ``Trainer``'s loop over typed batches.

``HeteroTrainer`` is a ``gnnsys.train.trainer.Trainer`` (same batch schedule, seeds, dropout
RNG handling, flat-gradient allreduce of the dense weights, replay) whose batches are
``HeteroSampledSubgraph`` of the input type's train nodes and whose inputs are one row table per
node type: feature rows (own rows from the shard, halo rows through that type's cache and codec)
or learnable embedding rows (``embedding.py``). After the dense allreduce each step exchanges
the embedding gradients (:meth:`HeteroTrainer._exchange`) and every owner takes its sparse step.

No Ray here: the sampler's per-relation sources, the per-type row sources and the
:class:`GatherSync` are injected.

Shape legend: ``B`` seeds, ``N_t`` sampled nodes of type ``t``, ``D`` embedding width.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, Protocol, cast

import torch
from torch import Tensor, nn

from gnnsys.cache import CacheCounters, SplitRows
from gnnsys.datasets.hetero import EdgeType
from gnnsys.models import GCNLayer, LinkModel
from gnnsys.models.sparse_embedding import SparseGrad, coalesce
from gnnsys.sampler.hetero import HeteroNeighborSampler, HeteroSampledSubgraph
from gnnsys.train.device import StepInputs
from gnnsys.train.hetero.embedding import OwnedEmbeddings
from gnnsys.train.layer0.fused import decoded_roots, fused_sum
from gnnsys.train.layer0.owner_sums import FirstLayerAggregator
from gnnsys.train.link.config import LinkConfig
from gnnsys.train.link.trainer import link_loss, link_step_result
from gnnsys.train.pipeline import PreparedBatch, StageClock
from gnnsys.train.remote.features import RoutedFeatureSource
from gnnsys.train.remote.ledger import TypedLedger
from gnnsys.train.trainer import Trainer, _mix
from gnnsys.types import Block, PartitionBook

__all__ = [
    "BoundSampler",
    "GatherSync",
    "HeteroLinkTrainer",
    "HeteroTrainer",
    "TypedInputs",
    "TypedLinkBatch",
    "typed_link_batch",
]


@dataclass(frozen=True, slots=True, eq=False)
class FusedType:
    """A fused type's layer-0 rows, fetched and still encoded (``TypedInputs.prepare_first``).

    Attributes:
        rows: The type's sampled rows: owned ones float, halo ones encoded.
        num_dst: Its destinations in block 0 (the first ``num_dst`` rows).
        relations: Block 0's relations out of the type, with their blocks.
    """

    rows: SplitRows
    num_dst: int
    relations: list[tuple[EdgeType, Block]]


class GatherSync(Protocol):
    """The dense allreduce plus a variable-length ``all_gather`` (gloo, or threads)."""

    def allreduce_mean_(self, flat: Tensor) -> None:
        """Average ``flat`` over ranks, in place (a collective)."""
        ...

    def all_gather(self, flat: Tensor) -> list[Tensor]:
        """Every rank's 1-D ``flat`` (lengths may differ), in rank order (a collective)."""
        ...


class BoundSampler:
    """A ``HeteroNeighborSampler`` with the seed type bound: ``sample(seed_lid, seed=)``."""

    def __init__(self, sampler: HeteroNeighborSampler, input_type: str) -> None:
        self.sampler, self.input_type = sampler, input_type

    def sample(self, seed_lid: Tensor, *, seed: int) -> HeteroSampledSubgraph:
        """``HeteroNeighborSampler.sample`` of ``seed_lid`` of the bound type."""
        return self.sampler.sample(
            seed_lid, input_type=self.input_type, seed=seed, with_edge_index=False
        )  # the runtime reads the blocks only


class TypedInputs:
    """Row tables of a typed batch: features of featured types, embeddings of the others.

    Args:
        features: Featured type -> its routed feature source (own rows, cache, codec).
        embeddings: Featureless type -> routed source of its embedding rows (never cached:
            the rows change every step).
        fused: Featured types whose halo rows layer 0 sums from their codes (int8/int4 with a
            model whose layer 0 allows it: :meth:`fetch_first`).
        owner_sums: Featured type -> the aggregator whose owners sum that type's remote rows
            for layer 0 (``--aggregate-at owner|auto``: :meth:`fetch_first`).
        weighted: Layer 0 is GCN's: each relation sums its sources scaled by
            ``GCNLayer.src_scale`` of its block (whole-graph in-degrees), not their mean.
    """

    def __init__(
        self,
        features: dict[str, RoutedFeatureSource],
        embeddings: dict[str, RoutedFeatureSource],
        fused: frozenset[str] = frozenset(),
        owner_sums: dict[str, FirstLayerAggregator] | None = None,
        *,
        weighted: bool = False,
    ) -> None:
        self.features, self.embeddings, self.fused = features, embeddings, fused
        self.owner_sums = owner_sums or {}
        self.weighted = weighted

    def fetch(self, sub: HeteroSampledSubgraph) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        """``(x_dict, leaves)``: every type's rows in ``n_id`` order; embedding rows as leaves.

        A type's ``n_id`` never repeats a node, so each source takes its distinct-request path.
        """
        x_dict: dict[str, Tensor] = {}
        leaves: dict[str, Tensor] = {}
        for node_type, n_id in sub.n_id.items():
            if node_type in self.features:
                x_dict[node_type] = self.features[node_type].fetch_distinct(n_id)
            elif node_type in self.embeddings:
                leaf = self.embeddings[node_type].fetch_distinct(n_id).requires_grad_()
                x_dict[node_type] = leaves[node_type] = leaf
        return x_dict, leaves

    def fetch_first(
        self, sub: HeteroSampledSubgraph
    ) -> tuple[dict[str, Tensor], dict[str, Tensor], dict[EdgeType, Tensor]]:
        """``(x_dict, leaves, agg)``: :meth:`fetch`, with layer 0's reductions done for some types.

        :meth:`prepare_first` then :meth:`finish_first`, both here (on the host).
        """
        x_dict, leaves, agg, pending = self.prepare_first(sub)
        self.finish_first(x_dict, agg, pending)
        return x_dict, leaves, agg

    def prepare_first(self, sub: HeteroSampledSubgraph) -> tuple[
        dict[str, Tensor], dict[str, Tensor], dict[EdgeType, Tensor], dict[str, FusedType]
    ]:  # fmt: skip
        """``(x_dict, leaves, agg, pending)``: the fetch stage's half of :meth:`fetch_first`.

        A fused type's rows are fetched split (``fetch_split``: the same messages, cache
        lookups and ledger as :meth:`fetch`) and left in ``pending``, still encoded, for
        :meth:`finish_first` to sum on the step's device. An owner-summed type's relations get
        their means from its owners' partial sums here (:meth:`_owner_summed`).
        """
        special = self.fused | set(self.owner_sums)
        if not special:
            return (*self.fetch(sub), {}, {})
        rest = replace(sub, n_id={t: n for t, n in sub.n_id.items() if t not in special})
        x_dict, leaves = self.fetch(rest)
        agg: dict[EdgeType, Tensor] = {}
        pending: dict[str, FusedType] = {}
        first = sub.blocks[0]
        for t in special & set(sub.n_id):
            num_dst = next((b.num_dst for et, b in first.items() if et[2] == t), 0)
            out = [(et, b) for et, b in first.items() if et[0] == t]
            if t in self.owner_sums:
                x_dict[t] = self._owner_summed(t, sub.n_id[t], num_dst, out, agg)
                continue
            pending[t] = FusedType(self.features[t].fetch_split(sub.n_id[t]), num_dst, out)
        return x_dict, leaves, agg, pending

    def finish_first(
        self, x_dict: dict[str, Tensor], agg: dict[EdgeType, Tensor], pending: dict[str, FusedType]
    ) -> None:
        """Sum ``pending``'s rows into ``agg`` and decode their roots into ``x_dict``.

        Each relation gets its mean (GCN: its scaled sum) from the fused dequantizing sum
        (``gnnsys.train.layer0.fused``) on the rows' device; only destination rows are decoded.
        """
        for t, fused in pending.items():
            rows, width = fused.rows, int(fused.rows.local_LF.shape[1])
            codec = self.features[t].codec
            x_dict[t] = decoded_roots(fused.num_dst, rows, codec, num_features=width)
            for et, block in fused.relations:
                if self.weighted:
                    weight_N = GCNLayer.src_scale(block).float()
                    agg[et] = fused_sum(block, rows, weight_N, num_features=width)
                    continue
                deg_M = block.rowptr.diff().clamp(min=1).to(torch.float32)[:, None]
                agg[et] = fused_sum(block, rows, None, num_features=width) / deg_M

    def _owner_summed(
        self,
        node_type: str,
        n_id: Tensor,
        num_dst: int,
        out: list[tuple[EdgeType, Block]],
        agg: dict[EdgeType, Tensor],
    ) -> Tensor:
        """Layer-0 means of the relations ``out`` of ``node_type``, from owner partial sums.

        The means go into ``agg`` (one request per owner for all of them); returns the type's
        destination rows (fetched with the plan's rows when it has a relation to itself). GCN's
        scaled sums take one request per owner and relation (each relation its own scales).
        """
        own = [i for i, (et, _) in enumerate(out) if et[2] == node_type]
        roots = out[own[0]][1].num_dst if own else 0
        if out and self.weighted:  # GCN: every relation leads from the type to itself
            sums, x_dst = self.owner_sums[node_type].weighted_sums([b for _, b in out], n_id)
            agg.update({et: s for (et, _), s in zip(out, sums, strict=True)})
        elif out:
            means, x_dst = self.owner_sums[node_type].relations_agg(
                [b for _, b in out], n_id, root_rows=roots
            )
            agg.update({et: mean for (et, _), mean in zip(out, means, strict=True)})
        if not own:  # no relation from the type to itself: its roots are fetched
            x_dst = self.features[node_type].fetch_distinct(n_id[:num_dst])
        return x_dst

    def counters(self) -> CacheCounters | None:
        """The feature caches' counters summed (``None`` when no type keeps a cache)."""
        found = [c for c in (s.counters() for s in self.features.values()) if c is not None]
        return sum(found[1:], found[0]) if found else None

    def warm_up(self) -> None:
        """Prefetch every cache's warm-start rows (before epoch 0)."""
        for source in self.features.values():
            source.warm_up()


class HeteroTrainer(Trainer):
    """``Trainer`` over typed batches with owner-held embeddings; see the module docstring.

    Args:
        config: Optimisation settings (``lr`` also drives the embeddings' SparseAdam).
        model: ``HeteroSAGE`` or ``RGCN``.
        sampler: The typed sampler with the seed type bound.
        inputs: Per-type row sources.
        train_lid: ``[S]`` type-local ids of this rank's train nodes of the seed type.
        train_y: ``[S]`` their labels.
        books: Per-type owners (to route embedding gradients).
        embeddings: This rank's embedding rows (``None``: every type has features).
        ledger: Counts each type's ``embedding_grad`` bytes.
        rank: This rank.
        world_size: ``P``.
        sync: Allreduce and all_gather (``None`` only when ``world_size == 1``).
        rng_lock: As for ``Trainer``.
    """

    def __init__(
        self,
        config: Trainer.Config,
        *,
        model: nn.Module,
        sampler: BoundSampler,
        inputs: TypedInputs,
        train_lid: Tensor,
        train_y: Tensor,
        books: dict[str, PartitionBook],
        embeddings: OwnedEmbeddings | None,
        ledger: TypedLedger,
        rank: int,
        world_size: int,
        sync: GatherSync | None,
        rng_lock: Any = None,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__(
            config,
            model=model,
            sampler=cast(Any, sampler),
            features=cast(Any, inputs),
            train_gid=train_lid,
            train_y=train_y,
            rank=rank,
            sync=sync,
            rng_lock=rng_lock,
            device=device,
        )
        self.inputs, self.books, self.embeddings = inputs, books, embeddings
        self.typed_ledger, self.world_size, self.gather = ledger, world_size, sync
        self.input_type = sampler.input_type
        self._leaves: dict[str, Tensor] = {}
        self._n_id: dict[str, Tensor] = {}

    def _inputs_need_weights(self) -> bool:
        """Embedding rows change every step: with them, the compute loop fetches the inputs."""
        return self.embeddings is not None

    def _inputs(self, sub: Any) -> StepInputs:
        """Fetch every type's rows, with the forward pass (the seed type's logits).

        Fused types' rows travel encoded; the forward pass sums them on the step's device.
        """
        x_dict, leaves, agg, pending = self.inputs.prepare_first(sub)
        if self.embeddings is not None:  # the compute loop's thread (see _inputs_need_weights)
            self._leaves, self._n_id = leaves, sub.n_id
        model, seed_type, inputs = cast(Any, self.model), self.input_type, self.inputs
        if not (agg or pending):
            return StepInputs((x_dict, sub.blocks), lambda x, blocks: model(x, blocks)[seed_type])

        def run(x: dict[str, Tensor], blocks: Any, a: dict[EdgeType, Tensor], p: Any) -> Tensor:
            x, a = dict(x), dict(a)  # the moved records stay as they came
            inputs.finish_first(x, a, p)
            return cast(Tensor, model.forward_from_first_agg(x, blocks, a)[seed_type])

        return StepInputs((x_dict, sub.blocks, agg, pending), run)

    def _step(self, batch: PreparedBatch, clock: StageClock) -> tuple[float, int]:
        """``Trainer._step``, then the embedding exchange and sparse step (timed as sync)."""
        self._leaves, self._n_id = {}, {}
        out = super()._step(batch, clock)
        start = time.perf_counter()
        if self.embeddings is not None:  # the dense step's divisor: the step's seeds, all ranks
            seeds = max(1, round(self.step_weight * self.world_size))
            self.embeddings.apply(self._exchange(), seeds)
        clock.add("sync", time.perf_counter() - start)
        self._leaves, self._n_id = {}, {}
        return out

    def steps_done(self) -> int:
        """Steps applied so far (the step count embedding requests carry)."""
        return 0 if self.embeddings is None else self.embeddings.steps

    def _split_grads(self) -> tuple[dict[str, SparseGrad], list[Tensor], list[Tensor]]:
        """Own rows' gradients per type, and the other rows' ids and gradients to send."""
        assert self.embeddings is not None  # only called with embeddings
        dim = self.embeddings.dim
        own: dict[str, SparseGrad] = {}
        ids_out: list[Tensor] = []
        vals_out: list[Tensor] = []
        for node_type in self.embeddings.types:
            leaf = self._leaves.get(node_type)
            ids = self._n_id.get(node_type, torch.zeros(0, dtype=torch.long))
            grad = None if leaf is None else leaf.grad
            if grad is None:  # type not sampled, or not reached by the seeds' outputs
                ids, grad = torch.zeros(0, dtype=torch.long), torch.zeros(0, dim)
            mine = torch.from_numpy(self.books[node_type].part_N[ids.numpy()] == self.rank)
            own[node_type] = coalesce(ids[mine], grad[mine])
            ids_out.append(ids[~mine])
            vals_out.append(grad[~mine])
            if self.world_size > 1:
                self.typed_ledger.of(node_type).record("embedding_grad", ids[~mine], grad[~mine])
        return own, ids_out, vals_out

    def _exchange(self) -> dict[str, list[SparseGrad]]:
        """Every rank's contributions to this rank's rows, per type, in rank order."""
        assert self.embeddings is not None
        own, ids_out, vals_out = self._split_grads()
        types = self.embeddings.types
        if self.world_size == 1 or self.gather is None:
            return {t: [own[t]] for t in types}
        header = torch.tensor([int(i.numel()) for i in ids_out], dtype=torch.long)
        all_ids = self.gather.all_gather(torch.cat([header, *ids_out]))
        all_vals = self.gather.all_gather(torch.cat([v.reshape(-1) for v in vals_out]))
        out: dict[str, list[SparseGrad]] = {t: [] for t in types}
        for r in range(self.world_size):
            if r == self.rank:
                for t in types:
                    out[t].append(own[t])
                continue
            counts = all_ids[r][: len(types)].tolist()
            ids_r = torch.split(all_ids[r][len(types) :], counts)
            vals_r = torch.split(all_vals[r].view(-1, self.embeddings.dim), counts)
            for t, ids, vals in zip(types, ids_r, vals_r, strict=True):
                mine = torch.from_numpy(self.books[t].part_N[ids.numpy()] == self.rank)
                out[t].append(coalesce(ids[mine], vals[mine]))
        return out

    def state(self) -> dict[str, Any]:
        """``Trainer.state`` plus this rank's embedding rows under ``rng["owned"]``.

        The checkpoint keeps one per-rank dict (``Checkpoint.rng_by_rank``); a rank's owned
        embedding tables and their sparse optimizer states are per-rank state like its RNG.
        """
        out = super().state()
        if self.embeddings is not None:
            out["rng"] = {**out["rng"], "owned": self.embeddings.state()}
        return out

    def load_state(
        self, model_state: dict[str, Any], optimizer_state: dict[str, Any], rng: dict[str, Any]
    ) -> None:
        """Restore :meth:`state` (embeddings included)."""
        rng = dict(rng)
        owned = rng.pop("owned", None)
        if self.embeddings is not None:
            if owned is None:
                raise ValueError("checkpoint has no embedding rows; resume a heterogeneous run")
            self.embeddings.load(owned)
        super().load_state(model_state, optimizer_state, rng)


@dataclass(frozen=True, slots=True)
class TypedLinkBatch:
    """One batch of scored pairs of a typed relation ``src -> dst``, as seed positions.

    Attributes:
        seeds: Node type -> ``[U_t]`` distinct type-local seed ids (ascending): the sources'
            type holds the positive links' sources, the destinations' type their
            destinations and the negatives (one entry when the types are the same).
        src_B: ``[B]`` positions of the sources in ``seeds[src]``.
        dst_B: ``[B]`` positions of the destinations in ``seeds[dst]``.
        neg_Bq: ``[B, q]`` positions of each positive's negative destinations in ``seeds[dst]``.
    """

    seeds: dict[str, Tensor]
    src_B: Tensor
    dst_B: Tensor
    neg_Bq: Tensor


def typed_link_batch(
    links_2B: Tensor, edge_type: EdgeType, *, num_dst: int, neg_per_pos: int, seed: int
) -> TypedLinkBatch:
    """The pairs of one batch of ``edge_type`` links plus seeded uniform negative destinations.

    The negatives are drawn as ``gnnsys.train.link.trainer.link_batch`` draws them (a function
    of the batch seed alone), uniform over the destination type.
    """
    src, _, dst = edge_type
    b = int(links_2B.shape[1])
    gen = torch.Generator().manual_seed(_mix(seed, 0x4E67))
    neg = torch.randint(0, num_dst, (b * neg_per_pos,), generator=gen, dtype=torch.int64)
    if src == dst:
        nodes = torch.cat([links_2B[0], links_2B[1], neg])
        ids, inverse = torch.unique(nodes, sorted=True, return_inverse=True)
        src_B, rest = inverse[:b], inverse[b:]
        seeds = {src: ids}
    else:
        src_ids, src_B = torch.unique(links_2B[0], sorted=True, return_inverse=True)
        dst_ids, rest = torch.unique(
            torch.cat([links_2B[1], neg]), sorted=True, return_inverse=True
        )
        seeds = {src: src_ids, dst: dst_ids}
    return TypedLinkBatch(seeds, src_B, rest[:b], rest[b:].view(b, neg_per_pos))


class HeteroLinkTrainer(HeteroTrainer):
    """Link prediction on one relation of a typed graph: ``LinkTrainer``'s loss, typed batches.

    A batch is a :class:`TypedLinkBatch`; the sampler starts from the seeds of both endpoint
    types; the encoder's outputs of the sources' and destinations' types are scored by the
    decoder; BCE-with-logits over ``[positives; negatives]``, summed and divided by ``1 + q``;
    ranks weigh the gradient by positives (``LinkTrainer``'s rules, and the embedding step's
    divisor follows).

    Args:
        config: Optimisation settings (``batch_size`` = positive links per step per rank).
        link: Negatives per positive.
        edge_type: The target relation.
        train_2E: ``[2, E]`` this rank's train links (sources it owns), type-local ids.
        num_dst: Nodes of the destination type.
        **handles: As for ``HeteroTrainer`` (``train_lid`` and ``train_y`` are not taken).
    """

    def __init__(
        self,
        config: Trainer.Config,
        link: LinkConfig,
        *,
        edge_type: EdgeType,
        train_2E: Tensor,
        num_dst: int,
        **handles: Any,
    ) -> None:
        none = torch.zeros(0, dtype=torch.int64)
        super().__init__(config, train_lid=none, train_y=none, **handles)
        self.link, self.edge_type = link, edge_type
        self.train_2E, self.num_dst = train_2E.long(), int(num_dst)

    def _num_items(self) -> int:
        return int(self.train_2E.shape[1])

    def batch(self, pos_B: Tensor, batch_seed: int) -> TypedLinkBatch:
        """The :class:`TypedLinkBatch` of the links at ``pos_B``."""
        return typed_link_batch(
            self.train_2E[:, pos_B], self.edge_type, num_dst=self.num_dst,
            neg_per_pos=self.link.neg_per_pos, seed=batch_seed,
        )  # fmt: skip

    def _sample(self, pos_B: Tensor, batch_seed: int) -> tuple[TypedLinkBatch, Any]:
        """The batch's pairs, and the typed subgraph of their endpoints."""
        batch = self.batch(pos_B, batch_seed)
        sampler = cast(BoundSampler, self.sampler).sampler
        return batch, sampler.sample_types(batch.seeds, seed=batch_seed, with_edge_index=False)

    def _inputs(self, sub: Any) -> StepInputs:
        """``HeteroTrainer._inputs``, with the forward pass returning every type's outputs."""
        x_dict, leaves = self.inputs.fetch(sub)
        if self.embeddings is not None:
            self._leaves, self._n_id = leaves, sub.n_id
        return StepInputs((x_dict, sub.blocks), self.model)

    def _forward_backward(self, batch: PreparedBatch, clock: StageClock) -> tuple[float, int]:
        """One batch: loss summed over positives, and positives above all their negatives."""
        forward = self._late_inputs(batch, clock)
        t2 = time.perf_counter()
        pairs = cast(TypedLinkBatch, batch.extra)
        model = cast(LinkModel, self.model)
        src, _, dst = self.edge_type
        with self._own_rng():
            out = cast(dict[str, Tensor], forward())
            h_src = out[src][: pairs.seeds[src].numel()][pairs.src_B]
            h_dst = out[dst][: pairs.seeds[dst].numel()]
            loss, score_B, neg_Bq = link_loss(model, h_src, h_dst[pairs.dst_B], h_dst[pairs.neg_Bq])
            torch.autograd.backward(loss)
        return link_step_result(loss, score_B, neg_Bq, clock, t2)
