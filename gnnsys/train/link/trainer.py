"""The link-prediction variant of the per-rank loop: positive links in, BCE on scored pairs out.

Same loop as ``gnnsys.train.trainer.Trainer`` (batch schedule, RNG, gradient sync, optimiser,
state); what differs is one batch::

    positives  <- this rank's train links of the target relation (sources it owns) at the
                  batch's positions
    negatives  <- (source, v) with v uniform over the destination type, q per positive, from
                  the batch seed
    seeds      <- distinct endpoints of both, per type (most negatives' v are owned by other
                  ranks)
    embeddings <- typed sampler from those seeds, every type's rows (cache, codec), encoder
    loss       <- BCE-with-logits over [positive scores; negative scores] (labels 1 / 0), summed
                  and divided by 1 + q; the gradient allreduce divides by the step's positives
                  over all ranks (weights by positives: a mean over every rank's pairs)

The negatives depend only on ``(batch seed, positives)``, so partitioned and replicated runs draw
identical batches, as for nodes. ``batch_size`` counts positive links per rank per step.

A homogeneous graph's links are the one relation of its one type (``gnnsys.types.ONE_RELATION``).

Shape legend: ``B`` positive links of a batch, ``q`` negatives per positive, ``U_t`` distinct
endpoints of type ``t``, ``H`` embedding width, ``E`` train links of the rank.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import Tensor
from torch.nn import functional

from gnnsys.models import LinkModel
from gnnsys.train.device import StepInputs
from gnnsys.train.link.config import LinkConfig
from gnnsys.train.pipeline import PreparedBatch, StageClock
from gnnsys.train.schedule import mix_seed
from gnnsys.train.trainer import Trainer
from gnnsys.types import EdgeType

__all__ = ["LinkBatch", "LinkTrainer", "link_batch", "link_loss", "link_step_result"]


@dataclass(frozen=True, slots=True)
class LinkBatch:
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


def link_batch(
    links_2B: Tensor, edge_type: EdgeType, *, num_dst: int, neg_per_pos: int, seed: int
) -> LinkBatch:
    """The pairs of one batch of ``edge_type`` links plus seeded uniform negative destinations.

    The negatives are a function of the batch seed alone, uniform over the destination type.

    Args:
        links_2B: ``[2, B]`` positive links (row 0 = source), type-local ids.
        edge_type: Their relation ``(src, rel, dst)``.
        num_dst: Nodes of the destination type (the range of negative destinations).
        neg_per_pos: ``q``.
        seed: Batch seed.
    """
    src, _, dst = edge_type
    b = int(links_2B.shape[1])
    gen = torch.Generator().manual_seed(mix_seed(seed, 0x4E67))
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
    return LinkBatch(seeds, src_B, rest[:b], rest[b:].view(b, neg_per_pos))


def link_step_result(
    loss: Tensor, score_B: Tensor, neg_Bq: Tensor, clock: StageClock, start: float
) -> tuple[float, int]:
    """A link step's (summed loss, positives above all their negatives); its compute time.

    Reading both back waits for the device, so the time since ``start`` is counted as compute
    with the step's kernels in it.
    """
    above = int((score_B.detach().unsqueeze(1) > neg_Bq.detach()).all(dim=1).sum())
    loss_sum = float(loss.detach())
    clock.add("compute", time.perf_counter() - start)
    return loss_sum, above


def link_loss(
    model: LinkModel, h_src_BH: Tensor, h_dst_BH: Tensor, h_neg_BqH: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """``(loss, score_B, neg_Bq)``: BCE-with-logits over positives (label 1) and negatives (0).

    Summed over pairs and divided by ``1 + q``: the sum over positives of each positive's mean
    pair loss; ``Trainer._sync_grads`` divides by the step's positives over all ranks.
    """
    score_B = model.score(h_src_BH, h_dst_BH)
    neg_Bq = model.score(h_src_BH.unsqueeze(1), h_neg_BqH)
    logits = torch.cat([score_B, neg_Bq.reshape(-1)])
    labels = torch.cat([torch.ones_like(score_B), torch.zeros_like(neg_Bq.reshape(-1))])
    loss = functional.binary_cross_entropy_with_logits(logits, labels, reduction="sum")
    return loss / (1 + neg_Bq.shape[1]), score_B, neg_Bq


class LinkTrainer(Trainer):
    """Trains a ``LinkModel`` on one rank's positive links of one relation (module docstring).

    A batch is a :class:`LinkBatch`; the sampler starts from the seeds of both endpoint
    types; the encoder's outputs of the sources' and destinations' types are scored by the
    decoder; ranks weigh the gradient by positives (:meth:`_grad_weight`; the embedding step's
    divisor follows).

    Args:
        config: Optimisation settings (``batch_size`` = positive links per step per rank).
        link: Negatives per positive.
        edge_type: The target relation.
        train_2E: ``[2, E]`` this rank's train links (sources it owns), type-local ids.
        num_dst: Nodes of the destination type.
        **handles: As for ``Trainer`` (``train_lid`` and ``train_y`` are not taken).
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

    def _item_ids(self) -> Tensor:
        """The links' endpoints, the keys of the epoch's order (``DistLinkNeighborLoader``'s)."""
        return self.train_2E

    def batch(self, pos_B: Tensor, batch_seed: int) -> LinkBatch:
        """The :class:`LinkBatch` of the links at ``pos_B``."""
        return link_batch(
            self.train_2E[:, pos_B], self.edge_type, num_dst=self.num_dst,
            neg_per_pos=self.link.neg_per_pos, seed=batch_seed,
        )  # fmt: skip

    def _sample(self, pos_B: Tensor, batch_seed: int) -> tuple[LinkBatch, Any]:
        """The batch's pairs, and the typed subgraph of their endpoints."""
        batch = self.batch(pos_B, batch_seed)
        sub = self.sampler.sampler.sample_types(batch.seeds, seed=batch_seed, with_edge_index=False)
        return batch, sub

    def _inputs(self, sub: Any) -> StepInputs:
        """``Trainer._inputs``, with the forward pass returning every type's outputs."""
        x_dict, leaves = self.inputs.fetch(sub)
        if self.embeddings is not None:
            self._leaves, self._n_id = leaves, sub.n_id
        return StepInputs((x_dict, sub.blocks), self.model)

    def _forward_backward(self, batch: PreparedBatch, clock: StageClock) -> tuple[float, int]:
        """One batch: loss summed over positives, and positives above all their negatives."""
        forward = self._late_inputs(batch, clock)
        t2 = time.perf_counter()
        pairs = cast(LinkBatch, batch.extra)
        model = cast(LinkModel, self.model)
        src, _, dst = self.edge_type
        with self._own_rng():
            out = cast(dict[str, Tensor], forward())
            h_src = out[src][: pairs.seeds[src].numel()][pairs.src_B]
            h_dst = out[dst][: pairs.seeds[dst].numel()]
            loss, score_B, neg_Bq = link_loss(model, h_src, h_dst[pairs.dst_B], h_dst[pairs.neg_Bq])
            torch.autograd.backward(loss)
        return link_step_result(loss, score_B, neg_Bq, clock, t2)
