"""What the sample and fetch stages hand the step: a typed batch and its row tables.

A batch is a ``RelationalSubgraph`` (a homogeneous graph's is the one-type case,
``gnnsys.types.ONE_TYPE``) drawn by the :class:`BoundSampler`; :class:`PerTypeInputs` turns it into
one row table per node type: feature rows (own rows from the shard, halo rows through that
type's cache and codec) or learnable embedding rows (``gnnsys.train.embedding``), and does layer
0's reductions where the owners sum them or the rows stay encoded until summed.

Shape legend: ``N_t`` sampled nodes of type ``t``, ``F`` features.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor

from gnnsys.cache import CacheCounters, SplitRows
from gnnsys.models import GCNLayer
from gnnsys.sampler.neighbor import RelationalSampler, RelationalSubgraph
from gnnsys.train.layer0.fused import decoded_roots, fused_sum
from gnnsys.train.layer0.owner_sums import FirstLayerAggregator
from gnnsys.train.remote.features import RoutedFeatureSource
from gnnsys.types import Block, EdgeType

__all__ = ["BoundSampler", "FusedType", "PerTypeInputs"]


@dataclass(frozen=True, slots=True, eq=False)
class FusedType:
    """A fused type's layer-0 rows, fetched and still encoded (``PerTypeInputs.prepare_first``).

    Attributes:
        rows: The type's sampled rows: owned ones float, halo ones encoded.
        num_dst: Its destinations in block 0 (the first ``num_dst`` rows).
        relations: Block 0's relations out of the type, with their blocks.
    """

    rows: SplitRows
    num_dst: int
    relations: list[tuple[EdgeType, Block]]


class BoundSampler:
    """A ``RelationalSampler`` with the seed type bound: ``sample(seed_lid, seed=)``."""

    def __init__(self, sampler: RelationalSampler, input_type: str) -> None:
        self.sampler, self.input_type = sampler, input_type

    def sample(self, seed_lid: Tensor, *, seed: int) -> RelationalSubgraph:
        """``RelationalSampler.sample`` of ``seed_lid`` of the bound type."""
        return self.sampler.sample(
            seed_lid, input_type=self.input_type, seed=seed, with_edge_index=False
        )  # the runtime reads the blocks only


class PerTypeInputs:
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

    def fetch(self, sub: RelationalSubgraph) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
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
        self, sub: RelationalSubgraph
    ) -> tuple[dict[str, Tensor], dict[str, Tensor], dict[EdgeType, Tensor]]:
        """``(x_dict, leaves, agg)``: :meth:`fetch`, with layer 0's reductions done for some types.

        :meth:`prepare_first` then :meth:`finish_first`, both here (on the host).
        """
        x_dict, leaves, agg, pending = self.prepare_first(sub)
        self.finish_first(x_dict, agg, pending)
        return x_dict, leaves, agg

    def prepare_first(self, sub: RelationalSubgraph) -> tuple[
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
