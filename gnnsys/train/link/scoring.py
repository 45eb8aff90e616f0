"""Sharded exact link evaluation: each rank ranks its own held-out links against their negatives.

After the layer-wise evaluation (``gnnsys.train.eval.evaluate``) every rank holds the exact
full-neighbourhood embeddings of the nodes it owns (the encoder's last table, message passing
over training links only). Then, per rank::

    links   <- its val/test links (sources it owns) and their fixed negatives (the store's)
    rows    <- embeddings of every destination and negative it does not own, one request per
               peer (``ShardEvaluator.rows_of``; encoded with ``--eval-codec``, counted)
    ranks   <- decoder scores of positive vs its Q negatives, in chunks of ``score_chunk`` links,
               OGB's rank (``metrics.link_ranks``: ties count half)
    sums    <- sum of 1/rank, hits@K per K, count -> the driver adds them (exact MRR, Hits@K)

Peers serve the last table while others score, so no rank drops it here (the next
evaluation's layer 0 does). With ``Q`` negatives uniform over ``N`` nodes a rank's request
covers most of the graph: evaluation moves about ``N * H * 4`` bytes per rank, once.

Shape legend: ``K`` held-out links of a rank, ``Q`` negatives per link, ``U`` distinct
endpoints needed, ``H`` embedding width, ``c`` links per chunk.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor

from gnnsys.models import LinkModel
from gnnsys.store import ShardLinks
from gnnsys.train.eval.evaluate import RankEval
from gnnsys.train.metrics import link_ranks, link_sums

__all__ = ["HELD_OUT", "score_links", "split_ranks"]

HELD_OUT = ("val", "test")
"""Splits with held-out links (train links have no fixed negatives)."""


def split_ranks(
    model: LinkModel,
    h_src_KH: Tensor,
    h_dst_KH: Tensor,
    h_neg_KQH: Tensor | None,
    *,
    lookup: tuple[Tensor, Tensor] | None = None,
    chunk: int = 256,
) -> np.ndarray:
    """``[K]`` OGB ranks of ``K`` positives against their ``Q`` negatives, ``chunk`` at a time.

    Args:
        model: Supplies the decoder.
        h_src_KH: Source embeddings.
        h_dst_KH: Destination embeddings.
        h_neg_KQH: Negative embeddings, or ``None`` with ``lookup``.
        lookup: ``(table_UH, neg_KQ)``: negatives as rows of a table (gathered per chunk, so
            ``[K, Q, H]`` never exists at once).
        chunk: Links per chunk.
    """
    out = np.empty(int(h_src_KH.shape[0]), dtype=np.float64)
    with torch.no_grad():
        for lo in range(0, int(h_src_KH.shape[0]), chunk):
            src = h_src_KH[lo : lo + chunk]
            if lookup is not None:
                neg = lookup[0][lookup[1][lo : lo + chunk]]
            else:
                assert h_neg_KQH is not None  # one of the two is given
                neg = h_neg_KQH[lo : lo + chunk]
            pos = model.score(src, h_dst_KH[lo : lo + chunk])
            negs = model.score(src.unsqueeze(1), neg)
            out[lo : lo + chunk] = link_ranks(pos.double().numpy(), negs.double().numpy())
    return out


class _Scored(Protocol):
    """What link scoring reads of the evaluator (``ShardEvaluator``)."""

    @property
    def num_layers(self) -> int: ...

    def owned_table(self, layer: int, node_type: str | None) -> Tensor: ...

    def book_of(self, node_type: str | None) -> Any: ...

    def rows_of(self, layer: int, node_type: str | None, ids: np.ndarray) -> Tensor: ...

    def link_report(
        self,
        sums: dict[str, np.ndarray],
        *,
        with_logits: bool = False,
        node_type: str | None = None,
    ) -> RankEval: ...


def score_links(
    evaluator: _Scored,
    links: ShardLinks,
    model: LinkModel,
    splits: tuple[str, ...],
    *,
    chunk: int,
    edge_type: tuple[str, str, str] | None = None,
    with_logits: bool = False,
) -> RankEval:
    """This rank's link sums of ``splits`` (val/test) after the last evaluation layer.

    Sources are this rank's own nodes (of ``edge_type``'s source type on a typed graph);
    destinations and negatives are rows of the last table (of the destination type), from
    their owners when other ranks own them.
    """
    src, dst = (None, None) if edge_type is None else (edge_type[0], edge_type[2])
    table = evaluator.num_layers
    held = [s for s in HELD_OUT if s in splits]
    pairs = {s: links.held_out(s) for s in held}
    parts = [np.concatenate([p[0][1], p[1].reshape(-1)]) for p in pairs.values()]
    need_U = np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)
    rows_UH = evaluator.rows_of(table, dst, need_U)  # every peer's rows in one request each
    own = evaluator.owned_table(table, src)
    book = evaluator.book_of(src)
    sums = {}
    for split, (links_2K, neg_KQ) in pairs.items():
        lid = np.asarray(book.lid_N[links_2K[0]], dtype=np.int64)
        ranks = split_ranks(
            model,
            own[torch.from_numpy(lid)],
            rows_UH[torch.from_numpy(np.searchsorted(need_U, links_2K[1]))],
            None,
            lookup=(rows_UH, torch.from_numpy(np.searchsorted(need_U, neg_KQ))),
            chunk=chunk,
        )
        sums[split] = link_sums(ranks)
    return evaluator.link_report(sums, with_logits=with_logits, node_type=src)
