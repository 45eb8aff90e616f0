"""gnnsys inside a user's own ``torch.distributed`` group (torchrun, Ray Train, ...).

* :class:`DistNeighborLoader`: PyG ``Data``/``HeteroData`` batches of each rank's seeds from a
  partition store, over ``gnnsys train``'s data path (owner reads, halo cache, codecs,
  pipelined producer) and its DDP-safe batch schedule (:mod:`gnnsys.distributed.loader`);
* :class:`DistLinkNeighborLoader`: the same for seed links, with PyG's binary and triplet
  negative sampling (:mod:`gnnsys.distributed.link_loader`);
* :func:`inference`: a user's model over every node, exact layer by layer for ``BasicGNN``
  and ``to_hetero(BasicGNN)`` models, written as ``gnnsys predict`` writes
  (:mod:`gnnsys.distributed.inference`);
* metrics that every rank computes on the nodes it holds and that combine, by one collective
  each, into exactly the values ``gnnsys train`` reports (:mod:`gnnsys.distributed.metrics`).
"""

from __future__ import annotations

from gnnsys.distributed.inference import inference
from gnnsys.distributed.link_loader import DistLinkNeighborLoader
from gnnsys.distributed.loader import DistNeighborLoader
from gnnsys.distributed.metrics import (
    accuracy,
    all_reduce_confusion,
    classification_metrics,
    macro_f1,
    roc_auc,
)

__all__ = [
    "DistLinkNeighborLoader",
    "DistNeighborLoader",
    "accuracy",
    "all_reduce_confusion",
    "classification_metrics",
    "inference",
    "macro_f1",
    "roc_auc",
]
