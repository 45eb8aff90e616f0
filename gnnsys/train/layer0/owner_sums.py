"""Layer 0 with owner-side partial aggregation in the runtime (issue 8): plan, fetch, combine.

With ``FirstLayerConfig.placement`` ``owner`` or ``auto`` and a model whose first layer is linear
in its inputs (SAGE mean, GCN), ``PerTypeInputs`` asks each featured type's
:class:`FirstLayerAggregator` for that type's layer-0 reductions instead of fetching every
block-0 source row of the type::

    plan = plan_partial(the type's block-0 relations, ...)  # pure: which edges each owner sums
    x rows  <- features.fetch(n_id[plan.need_row_N])  # destinations, local/resident rows and,
                                                      # for ``auto``, owners where rows are cheaper
    partial <- client.partial_many(plan.requests)     # one call per owner, all in flight
    agg_MF   = combine_partials(plan, x, partial)     # == the relations' means (GCN: sums)
    logits   = model.forward_from_first_agg(x_dict, blocks, agg)

SAGE's relations out of one type are stacked into one plan (:meth:`relations_agg`: one request
per owner for all of them); GCN's each scale their sources by their own degrees
(:meth:`weighted_sums`: one request per owner and relation). A row is *resident* when fetching
it costs no traffic: owned by this worker or held by its halo cache
(``RoutedFeatureSource.resident_mask``); edges from resident rows are aggregated here. Other
remote sources past the destinations are summed by their owner, so their rows never travel.

Ledger (``gnnsys.train.remote.ledger``): ``partial_request`` bytes are the arrays sent (group row
pointer, source ids, GCN weights), ``partial_response`` the sums returned (encoded bytes); the
counters ``partial_pairs``, ``partial_sums`` and ``rows_avoided`` count pairs, sums and the
distinct remote rows that were not fetched. Rows that are still fetched count as usual under
``feature_request`` / ``feature_response`` (through the feature source).

Shape legend: ``N`` block-0 source nodes of the type, ``M`` destinations, ``F`` features, ``G``
partial sums one owner returns, ``K`` pairs sent to one owner.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch
from torch import Tensor

from gnnsys.cache import HaloFeatureSource
from gnnsys.cache.codecs import Codec, FP32Codec
from gnnsys.models import GCNLayer
from gnnsys.train.layer0.base import FirstLayerConfig, Placement
from gnnsys.train.layer0.plan import PartialPlan, combine_partials, plan_partial
from gnnsys.train.remote.client import OwnerClient
from gnnsys.train.remote.ledger import Ledger
from gnnsys.types import Block

__all__ = ["FirstLayerAggregator"]

FP32 = FP32Codec()


class FirstLayerAggregator:
    """Computes layer 0's inputs with owner-side partial sums; see the module docstring.

    Args:
        config: Placement (``owner`` or ``auto``: ``requester`` needs no aggregator) and whether
            partial sums travel compressed.
        part: This worker's part.
        part_N: ``[N_t]`` owner of every node of the type.
        num_features: ``F``.
        client: Executor of the owner calls (``partial_many``).
        ledger: Counts ``partial_request`` / ``partial_response`` and the counters.
        codec: The run's feature codec; sets the row cost ``auto`` compares with and, when its
            ``partial_sums`` is true, how partial sums travel (else as float32).
        features: The type's feature source (rows still needed are fetched through it).
        node_type: Whose rows it aggregates (owners are asked for that type's sums).

    Raises:
        ValueError: ``requester`` placement, or ``num_features < 1``.
    """

    def __init__(
        self,
        config: FirstLayerConfig,
        *,
        part: int,
        part_N: np.ndarray,
        num_features: int,
        client: OwnerClient,
        ledger: Ledger,
        codec: Codec,
        features: HaloFeatureSource,
        node_type: str,
    ) -> None:
        if config.placement == Placement.REQUESTER:
            raise ValueError(
                "placement='requester' needs no FirstLayerAggregator; fetch the rows "
                "(PerTypeInputs without owner_sums)"
            )
        if num_features < 1:
            raise ValueError(f"num_features={num_features}; pass the feature dim F >= 1")
        self.config, self.part, self.part_N = config, part, np.asarray(part_N)
        self.num_features, self.features = num_features, features
        self.client, self.ledger, self.codec = client, ledger, codec
        self.node_type = node_type
        use = config.compress_partials and codec.partial_sums
        self.partial_codec: Codec = codec if use else FP32

    def row_bytes(self) -> int:
        """Wire bytes of one feature row in the run codec."""
        return int(self.codec.row_nbytes(self.num_features))

    def sum_bytes(self) -> int:
        """Wire bytes of one partial sum in the partial codec."""
        return int(self.partial_codec.row_nbytes(self.num_features))

    def relations_agg(
        self, blocks: list[Block], n_id: Tensor, *, root_rows: int
    ) -> tuple[list[Tensor], Tensor]:
        """Layer-0 means of a typed type's relations, all over its sources ``n_id``.

        The relations' blocks are stacked into one (their destinations one after the other,
        the sources shared), so each owner gets one request per batch for every relation out
        of the type and every row is fetched once. ``root_rows``: the destinations of the
        type's relation to itself, which are its first sources (0 without one).

        Returns:
            ``(means, roots)``: one ``[M_r, F]`` mean per block, and the ``root_rows`` rows.
        """
        counts = [b.rowptr.diff() for b in blocks]
        rowptr = torch.zeros(sum(int(c.numel()) for c in counts) + 1, dtype=torch.int64)
        torch.cumsum(torch.cat(counts), 0, out=rowptr[1:])
        stacked = Block(
            num_src=blocks[0].num_src,
            num_dst=int(rowptr.numel()) - 1,
            rowptr=rowptr,
            col=torch.cat([b.col for b in blocks]),
            e_id=torch.cat([b.e_id for b in blocks]),
        )
        agg_MF, x_RF, _ = self._aggregate(stacked, n_id, None, reduce="mean", root_rows=root_rows)
        return list(torch.split(agg_MF, [b.num_dst for b in blocks])), x_RF[:root_rows]

    def weighted_sums(self, blocks: list[Block], n_id: Tensor) -> tuple[list[Tensor], Tensor]:
        """GCN's layer-0 sums of a typed type's relations to itself, over its sources ``n_id``.

        Each relation's sources are scaled by its own ``GCNLayer.src_scale`` (its whole-graph
        in-degrees), so each is planned and asked for on its own.

        Returns:
            ``(sums, roots)``: one ``[M_r, F]`` scaled sum per block, and the first block's
            destination rows.
        """
        sums, roots = [], None
        for block in blocks:
            weight_N = GCNLayer.src_scale(block)
            agg_MF, x_RF, _ = self._aggregate(block, n_id, weight_N, reduce="sum", root_rows=None)
            sums.append(agg_MF)
            roots = x_RF[: block.num_dst] if roots is None else roots
        assert roots is not None  # the caller passes at least one relation
        return sums, roots

    def _aggregate(
        self,
        block: Block,
        n_id: Tensor,
        weight_N: Tensor | None,
        *,
        reduce: str,
        root_rows: int | None,
    ) -> tuple[Tensor, Tensor, PartialPlan]:
        """Plan, fetch the needed rows, ask the owners, combine (``R`` rows held)."""
        plan = self.plan_block(block, n_id, weight_N, root_rows)
        # Only the needed rows are materialised (``R`` of them, destinations first when they
        # are sources too): an [N, F] buffer would cost more than the traffic it saves.
        need_pos_R = torch.nonzero(plan.need_row_N).flatten()
        # on the host, where the owners' sums are combined (rows held on a device come back)
        x_RF = self.features.fetch(n_id[need_pos_R].long()).float().cpu()
        compact_N = torch.full((block.num_src,), -1, dtype=torch.int64)
        compact_N[need_pos_R] = torch.arange(need_pos_R.numel())
        compact = replace(plan, local_col=compact_N[plan.local_col])
        agg_MF = combine_partials(
            compact,
            block,
            x_RF,
            self._partials(plan),
            reduce=reduce,
            src_weight_N=None if weight_N is None else weight_N[need_pos_R],
        )
        return agg_MF, x_RF, plan

    def plan_block(
        self, block: Block, n_id: Tensor, weight_N: Tensor | None, root_rows: int | None
    ) -> PartialPlan:
        """One block's split (pure apart from reading the cache's residency and admission).

        ``weight_N``: GCN's source scales (``None``: a plain sum or mean). ``root_rows``: the
        destinations' rows the caller needs besides the sums (``None``: all ``num_dst``).
        """
        n_id = n_id.long()
        part_N = torch.from_numpy(self.part_N[n_id.numpy()])
        available_N = self.features.resident_mask(n_id)
        if self.config.placement == Placement.AUTO:
            available_N = available_N | _cache_would_keep(self.features, n_id, available_N)
        return plan_partial(
            block,
            n_id,
            part_N,
            my_part=self.part,
            available_N=available_N,
            placement=self.config.placement,
            row_bytes=self.row_bytes(),
            sum_bytes=self.sum_bytes(),
            src_weight_N=weight_N,
            root_rows=root_rows,
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
        answers = self.client.partial_many(wire, self.partial_codec, self.node_type)
        out: dict[int, Tensor] = {}
        for r in plan.requests:
            enc = answers[r.part]
            self.ledger.record_nbytes("partial_response", enc.nbytes)
            self.ledger.count("partial_pairs", int(r.src_gid.numel()))
            self.ledger.count("partial_sums", enc.num_rows)
            out[r.part] = self.partial_codec.decode(enc)
        return out


def _cache_would_keep(features: HaloFeatureSource, n_id: Tensor, available_N: Tensor) -> Tensor:
    """``[N]`` bool: remote rows the worker's halo cache would admit if they were fetched.

    ``auto`` fetches those as rows even when partial sums are cheaper for this batch: a fetched
    row the cache keeps is free in later batches, while a row summed at its owner never reaches
    the cache (greedy per-batch choice lost to ``requester`` on Cora with an adaptive cache,
    1.21x its bytes, before this). Asks the cache's admission policy (pure ``decide``) with the
    counts it has before this batch; a cache of capacity 0 marks nothing.
    """
    keep_N = torch.zeros_like(available_N)
    if bool(available_N.all()):
        return keep_N
    missing_pos = torch.nonzero(~available_N).flatten()
    keep_N[missing_pos] = features.would_admit(n_id[missing_pos])
    return keep_N
