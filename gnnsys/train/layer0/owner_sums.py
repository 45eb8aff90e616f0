"""Layer 1 with owner-side partial aggregation in the runtime (issue 8): plan, fetch, combine.

With ``FetchSpec.aggregate_at`` in (``owner``, ``auto``) and a model whose first layer is linear
in its inputs (SAGE mean/sum, GCN), the trainer asks :class:`FirstLayerAggregator` for layer 0's
inputs instead of fetching every block-0 source row::

    plan = plan_partial(block 0, ...)                  # pure: which edges each owner sums
    x rows  <- features.fetch(n_id[plan.need_row_N])   # destinations, local/resident rows and,
                                                       # for ``auto``, owners where rows are cheaper
    partial <- client.partial_many(plan.requests)      # one call per owner, all in flight
    agg_MF   = combine_partials(plan, x, partial)      # == layer0.aggregate(x_NF, block 0)
    logits   = model.forward_from_first_agg(agg_MF, x[:M], blocks)

A row is *resident* when fetching it costs no traffic: owned by this worker or held by its halo
cache (``resident_mask`` of ``CachedFeatureSource``); edges from resident rows are aggregated
here. Other remote sources past ``num_dst`` are summed by their owner, so their rows never travel.
Attention (GAT) and ``max`` are not linear: such models keep ``requester`` placement and the
rank-0 worker logs one warning per run (:func:`resolve_placement`).

Ledger (``gnnsys.train.remote.ledger``): ``partial_request`` bytes are the arrays sent (group row
pointer, source gids, GCN weights), ``partial_response`` the sums returned (encoded bytes); the
counters ``partial_pairs``, ``partial_sums`` and ``rows_avoided`` count pairs, sums and the
distinct remote rows that were not fetched. Rows that are still fetched count as usual under
``feature_request`` / ``feature_response`` (through the feature source).

Shape legend: ``N`` block-0 source nodes, ``M`` its destinations, ``F`` features, ``G`` partial
sums one owner returns, ``K`` pairs sent to one owner.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import Tensor, nn

from gnnsys.cache.base import FeatureSource
from gnnsys.cache.codecs import Codec
from gnnsys.models import GCNLayer
from gnnsys.train.layer0.base import (
    FirstLayer,
    FirstLayerInput,
    LinearAggregation,
    linear_aggregation,
    linear_first_layer,
)
from gnnsys.train.layer0.fused import FUSED_CODECS, FusedFirstLayer
from gnnsys.train.layer0.plan import PLACEMENTS, PartialPlan, combine_partials, plan_partial
from gnnsys.train.remote.client import OwnerClient
from gnnsys.train.remote.fetch_spec import FetchSpec
from gnnsys.train.remote.ledger import Ledger
from gnnsys.types import SampledSubgraph

__all__ = [
    "PARTIAL_CODECS",
    "build_first_layer",
    "FirstLayerAggregator",
    "FirstLayerInput",
    "LinearAggregation",
    "linear_aggregation",
    "linear_first_layer",
    "resolve_placement",
]

log = logging.getLogger(__name__)

PARTIAL_CODECS = ("bf16", "int8", "int4")
"""Run codecs the owners also encode partial sums with. ``binary`` cannot hold sums, and ``fp16``
could overflow on large sums (its encode raises), so with those the sums travel as float32."""


def resolve_placement(model: nn.Module, placement: str, *, announce: bool = True) -> str:
    """``placement``, or ``requester`` when the model's first layer is not linear.

    Args:
        model: The block model to train.
        placement: ``requester``, ``owner`` or ``auto``.
        announce: Log the fallback as a warning (pass ``rank == 0``: one notice per run).

    Raises:
        ValueError: Unknown placement.
    """
    if placement not in PLACEMENTS:
        raise ValueError(f"aggregate_at={placement!r}; choose one of {PLACEMENTS}")
    if placement == "requester" or linear_first_layer(model) is not None:
        return placement
    if announce:
        layers = getattr(model, "layers", None)
        name = type(layers[0]).__name__ if isinstance(layers, nn.ModuleList) else "?"
        log.warning(
            "aggregate_at=%s: first layer %s of %s is not linear in its inputs (attention or "
            "max); aggregating at the requester instead",
            placement,
            name,
            type(model).__name__,
        )
    return "requester"


class FirstLayerAggregator:
    """Computes layer 0's inputs with owner-side partial sums; see the module docstring.

    Args:
        config: Placement and wire options.
        part: This worker's part.
        part_N: ``[N]`` owner of every gid in the graph.
        num_features: ``F``.
        client: Executor of the owner calls (``partial_many``).
        ledger: Counts ``partial_request`` / ``partial_response`` and the counters.
        codec: The run's feature codec (``None``: float32 rows); sets the row cost ``auto``
            compares with and, for :data:`PARTIAL_CODECS`, how partial sums travel.
    """

    @dataclass(frozen=True, kw_only=True, slots=True)
    class Config:
        """Placement of layer 0's aggregation."""

        placement: str = "owner"
        """``owner`` (every remote-only row summed at its owner) or ``auto`` (per owner and
        batch, whichever of partial sums or rows costs fewer bytes; rows the halo cache would
        admit are always fetched, since they are free afterwards)."""
        compress_partials: bool = True
        """Encode partial sums with the run's codec when it is in :data:`PARTIAL_CODECS`."""

        def __post_init__(self) -> None:
            if self.placement not in ("owner", "auto"):
                raise ValueError(
                    f"placement={self.placement!r}; choose owner or auto (requester needs no "
                    "aggregator: leave it out)"
                )

    def __init__(
        self,
        config: Config,
        *,
        part: int,
        part_N: np.ndarray,
        num_features: int,
        client: OwnerClient,
        ledger: Ledger,
        codec: Codec | None = None,
    ) -> None:
        if num_features < 1:
            raise ValueError(f"num_features={num_features}; pass the feature dim F >= 1")
        self.config, self.part, self.part_N = config, part, np.asarray(part_N)
        self.num_features = num_features
        self.client, self.ledger, self.codec = client, ledger, codec
        use = config.compress_partials and codec is not None and codec.name in PARTIAL_CODECS
        self.partial_codec: Codec | None = codec if use else None

    def row_bytes(self) -> int:
        """Wire bytes of one feature row (the run codec's, else float32)."""
        if self.codec is None:
            return 4 * self.num_features
        return int(self.codec.row_nbytes(self.num_features))

    def sum_bytes(self) -> int:
        """Wire bytes of one partial sum (the partial codec's, else float32)."""
        if self.partial_codec is None:
            return 4 * self.num_features
        return int(self.partial_codec.row_nbytes(self.num_features))

    def plan(self, layer: nn.Module, sub: SampledSubgraph, features: FeatureSource) -> PartialPlan:
        """Decide this batch's split (pure apart from reading the cache's residency).

        Raises:
            TypeError: ``layer`` is not linear in its inputs.
        """
        weight_N = self._src_weight(layer, sub)
        return self._plan(sub, features, weight_N)

    def gather(
        self, layer: nn.Module, sub: SampledSubgraph, features: FeatureSource
    ) -> FirstLayerInput:
        """Layer 0's aggregation and root features for one batch.

        Args:
            layer: The model's first layer (``SAGELayer`` mean/sum or ``GCNLayer``).
            sub: The sampled batch.
            features: The worker's feature source (rows still needed are fetched through it).

        Raises:
            TypeError: ``layer`` is not linear in its inputs.
        """
        weight_N = self._src_weight(layer, sub)
        reduce = self._kind(layer).reduce
        block = sub.blocks[0]
        plan = self._plan(sub, features, weight_N)
        # Only the needed rows are materialised (``R`` of them, destinations first since they
        # are always needed): an [N, F] buffer would cost more than the traffic it saves.
        need_pos_R = torch.nonzero(plan.need_row_N).flatten()
        x_RF = features.fetch(sub.n_id[need_pos_R].long()).float()
        compact_N = torch.full((block.num_src,), -1, dtype=torch.int64)
        compact_N[need_pos_R] = torch.arange(need_pos_R.numel())
        compact = replace(plan, local_col=compact_N[plan.local_col])
        partials = self._partials(plan)
        agg_MF = combine_partials(
            compact,
            block,
            x_RF,
            partials,
            reduce=reduce,
            src_weight_N=None if weight_N is None else weight_N[need_pos_R],
        )
        return FirstLayerInput(agg_MF=agg_MF, x_dst_MF=x_RF[: block.num_dst], plan=plan)

    def _plan(
        self,
        sub: SampledSubgraph,
        features: FeatureSource,
        weight_N: Tensor | None,
    ) -> PartialPlan:
        n_id = sub.n_id.long()
        part_N = torch.from_numpy(self.part_N[n_id.numpy()])
        resident = getattr(features, "resident_mask", None)
        available_N = resident(n_id) if resident is not None else part_N == self.part
        if self.config.placement == "auto":
            available_N = available_N | _cache_would_keep(features, n_id, available_N)
        return plan_partial(
            sub.blocks[0],
            n_id,
            part_N,
            my_part=self.part,
            available_N=available_N,
            placement=self.config.placement,
            row_bytes=self.row_bytes(),
            sum_bytes=self.sum_bytes(),
            src_weight_N=weight_N,
        )

    def _partials(self, plan: PartialPlan) -> dict[int, Tensor]:
        """One ``partial_sums`` call per owner in ``plan`` (all in flight), decoded, counted."""
        self.ledger.count("rows_avoided", plan.rows_avoided)
        if not plan.requests:
            return {}
        wire = {
            r.part: (
                r.group_rowptr.numpy(),
                r.src_gid.numpy(),
                None if r.src_weight is None else r.src_weight.numpy(),
            )
            for r in plan.requests
        }
        for rowptr, gid, weight in wire.values():
            sent = (rowptr, gid) if weight is None else (rowptr, gid, weight)
            self.ledger.record("partial_request", *sent)
        answers = self.client.partial_many(wire, self.partial_codec)
        out: dict[int, Tensor] = {}
        for r in plan.requests:
            enc = answers[r.part]
            self.ledger.record_nbytes("partial_response", enc.nbytes)
            self.ledger.count("partial_pairs", int(r.src_gid.numel()))
            self.ledger.count("partial_sums", enc.num_rows)
            codec = self.partial_codec
            out[r.part] = enc.data.float() if codec is None else codec.decode(enc)
        return out

    def _src_weight(self, layer: nn.Module, sub: SampledSubgraph) -> Tensor | None:
        """GCN's per-source scale of block 0, or ``None`` for a plain sum/mean."""
        return GCNLayer.src_scale(sub.blocks[0]) if self._kind(layer).weighted else None

    @staticmethod
    def _kind(layer: nn.Module) -> LinearAggregation:
        kind = linear_aggregation(layer)
        if kind is None:
            raise TypeError(
                f"{type(layer).__name__} is not linear in its inputs; build the trainer without "
                "a FirstLayerAggregator (resolve_placement falls back to requester)"
            )
        return kind


def _cache_would_keep(features: FeatureSource, n_id: Tensor, available_N: Tensor) -> Tensor:
    """``[N]`` bool: remote rows the worker's halo cache would admit if they were fetched.

    ``auto`` fetches those as rows even when partial sums are cheaper for this batch: a fetched
    row the cache keeps is free in later batches, while a row summed at its owner never reaches
    the cache (greedy per-batch choice lost to ``requester`` on Cora with an adaptive cache,
    1.21x its bytes, before this). Asks the cache's admission policy (pure ``decide``) with the
    counts it has before this batch; without a cache nothing is marked.
    """
    keep_N = torch.zeros_like(available_N)
    cache = getattr(features, "cache", None)
    policy = getattr(cache, "policy", None)
    if cache is None or policy is None or bool(available_N.all()):
        return keep_N
    missing_pos = torch.nonzero(~available_N).flatten()
    plan = policy.decide(n_id[missing_pos], cache.cached_gid, int(cache.capacity_rows))
    keep_N[missing_pos] = torch.isin(n_id[missing_pos], plan.admit_gid)
    return keep_N


def build_first_layer(
    fetch: FetchSpec,
    model: nn.Module,
    *,
    part: int,
    part_N: np.ndarray,
    num_features: int,
    client: OwnerClient,
    ledger: Ledger,
) -> FirstLayer | None:
    """The layer-0 helper a worker's ``Trainer`` gets for ``fetch``, or ``None``.

    ``owner``/``auto``: a :class:`FirstLayerAggregator`. ``requester``: a ``FusedFirstLayer``
    when the codec is int8/int4 and ``fetch.fused_dequant`` is on, else ``None`` (rows are
    fetched as float32). Models whose first layer is not linear get ``requester`` and ``None``
    (rank 0 logs the fallback once). ``fetch.codec`` must already be resolved (not ``auto``).
    """
    placement = resolve_placement(model, fetch.aggregate_at, announce=part == 0)
    if placement == "requester":
        fused = fetch.fused_dequant and fetch.codec in FUSED_CODECS
        if fused and linear_first_layer(model) is not None:
            return FusedFirstLayer(fetch.codec, num_features=num_features)
        return None
    return FirstLayerAggregator(
        FirstLayerAggregator.Config(placement=placement),
        part=part,
        part_N=part_N,
        num_features=num_features,
        client=client,
        ledger=ledger,
        codec=fetch.make(),
    )
