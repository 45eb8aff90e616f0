"""The link-prediction variant of the per-rank loop: positive links in, BCE on scored pairs out.

Same loop as ``gnnsys.train.trainer.Trainer`` (batch schedule, RNG, gradient sync, optimiser,
state); what differs is one batch::

    positives  <- this rank's train links (sources it owns) at the batch's positions
    negatives  <- (source, v) with v uniform over all N nodes, q per positive, from the batch seed
    seeds      <- distinct endpoints of both (most negatives' v are owned by other ranks)
    embeddings <- sampler over the routed neighbor source, routed features (cache + codec), encoder
    loss       <- BCE-with-logits over [positive scores; negative scores] (labels 1 / 0), summed
                  and divided by 1 + q; the gradient allreduce divides by the step's positives
                  over all ranks (weights by positives: a mean over every rank's pairs)

The negatives depend only on ``(batch seed, positives)``, so partitioned and replicated runs draw
identical batches, as for nodes. ``batch_size`` counts positive links per rank per step.

Shape legend: ``B`` positive links of a batch, ``q`` negatives per positive, ``U`` distinct
endpoints, ``H`` embedding width, ``E`` train links of the rank.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import Tensor, nn
from torch.nn import functional

from gnnsys.models import LinkModel
from gnnsys.train.link.config import LinkConfig
from gnnsys.train.pipeline import PreparedBatch, StageClock
from gnnsys.train.trainer import Trainer, _mix
from gnnsys.types import SampledSubgraph

__all__ = ["LinkBatch", "LinkTrainer", "link_batch", "link_loss", "link_step_result"]


@dataclass(frozen=True, slots=True)
class LinkBatch:
    """One batch of scored pairs, as positions into its distinct endpoints ``seed_gid``.

    Attributes:
        seed_gid: ``[U]`` int64 distinct endpoint gids (ascending): the sampler's seeds.
        src_B: ``[B]`` positions of the positive links' sources in ``seed_gid``.
        dst_B: ``[B]`` positions of their destinations.
        neg_Bq: ``[B, q]`` positions of each positive's negative destinations.
    """

    seed_gid: Tensor
    src_B: Tensor
    dst_B: Tensor
    neg_Bq: Tensor


def link_batch(links_2B: Tensor, *, num_nodes: int, neg_per_pos: int, seed: int) -> LinkBatch:
    """The pairs of one batch: its positive links plus seeded uniform negatives.

    Args:
        links_2B: ``[2, B]`` positive links (row 0 = source).
        num_nodes: ``N``; negative destinations are uniform over ``[0, N)``.
        neg_per_pos: ``q``.
        seed: Batch seed (negatives are a function of it alone).
    """
    b = int(links_2B.shape[1])
    gen = torch.Generator().manual_seed(_mix(seed, 0x4E67))
    neg = torch.randint(0, num_nodes, (b * neg_per_pos,), generator=gen, dtype=torch.int64)
    nodes = torch.cat([links_2B[0], links_2B[1], neg])
    seed_gid, inverse = torch.unique(nodes, sorted=True, return_inverse=True)
    return LinkBatch(
        seed_gid=seed_gid,
        src_B=inverse[:b],
        dst_B=inverse[b : 2 * b],
        neg_Bq=inverse[2 * b :].view(b, neg_per_pos),
    )


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
    """Trains a ``LinkModel`` on one rank's positive links; see the module docstring.

    Args:
        config: Optimisation settings (``batch_size`` = positive links per step per rank).
        link: Negatives per positive.
        model: Encoder plus decoder.
        train_2E: ``[2, E]`` this rank's train links (sources it owns).
        num_nodes: ``N`` of the graph (range of negative destinations).
        **handles: ``sampler``, ``features``, ``rank``, ``sync``, ``rng_lock``,
            ``first_layer`` as for ``Trainer``.
    """

    def __init__(
        self,
        config: Trainer.Config,
        link: LinkConfig,
        *,
        model: LinkModel,
        train_2E: Tensor,
        num_nodes: int,
        **handles: Any,
    ) -> None:
        none = torch.zeros(0, dtype=torch.int64)  # the node-task seeds: unused here
        super().__init__(config, model=model, train_gid=none, train_y=none, **handles)
        if train_2E.dim() != 2 or train_2E.shape[0] != 2:
            raise ValueError(f"train_2E has shape {tuple(train_2E.shape)}; expected [2, E]")
        self.link, self.train_2E, self.num_nodes = link, train_2E.long(), int(num_nodes)

    def encoder(self) -> nn.Module:
        """The link model's encoder (runs over the blocks)."""
        return cast(LinkModel, self.model).encoder

    def _num_items(self) -> int:
        """Train items of this rank: its positive links."""
        return int(self.train_2E.shape[1])

    def batch(self, pos_B: Tensor, batch_seed: int) -> LinkBatch:
        """The :class:`LinkBatch` of the links at ``pos_B``."""
        return link_batch(
            self.train_2E[:, pos_B],
            num_nodes=self.num_nodes,
            neg_per_pos=self.link.neg_per_pos,
            seed=batch_seed,
        )

    def _seed_gid(self, pos_B: Tensor, batch_seed: int) -> Tensor:
        return self.batch(pos_B, batch_seed).seed_gid

    def _sample(self, pos_B: Tensor, batch_seed: int) -> tuple[LinkBatch, SampledSubgraph]:
        """The batch's pairs and negatives, and the subgraph of their endpoints."""
        batch = self.batch(pos_B, batch_seed)
        return batch, self.sampler.sample(batch.seed_gid, seed=batch_seed)

    def _forward_backward(self, batch: PreparedBatch, clock: StageClock) -> tuple[float, int]:
        """One batch: loss summed over positives, and positives above all their negatives."""
        forward = self._late_inputs(batch, clock)
        t2 = time.perf_counter()
        pairs = cast(LinkBatch, batch.extra)
        model = cast(LinkModel, self.model)
        with self._own_rng():
            h_UH = forward()[: batch.sub.batch_size]
            h_src = h_UH[pairs.src_B]
            loss, score_B, neg_Bq = link_loss(model, h_src, h_UH[pairs.dst_B], h_UH[pairs.neg_Bq])
            torch.autograd.backward(loss)
        return link_step_result(loss, score_B, neg_Bq, clock, t2)

    def _grad_weight(self, pos_B: Tensor) -> float:
        """The batch's positive links: ranks weigh by positives, not 1/P each.

        Links are owned by their source, so ranks own unequal numbers and every rank runs the
        same batch count: smaller ranks take smaller batches. Weighting each rank by
        its positives makes the step's gradient the mean over all the step's positives (at P = 1
        it is the plain mean), so P parts equal one part in expectation.
        """
        return float(pos_B.numel())
