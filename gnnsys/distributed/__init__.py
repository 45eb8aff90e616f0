"""gnnsys inside a user's own ``torch.distributed`` group (torchrun, Ray Train, ...).

First piece of the distributed API (issue 46): metrics that every rank computes on the nodes it
holds and that combine, by one collective each, into exactly the values ``gnnsys train``
reports (:mod:`gnnsys.distributed.metrics`). The loaders and sharded inference come next.
"""

from __future__ import annotations

from gnnsys.distributed.metrics import (
    accuracy,
    all_reduce_confusion,
    classification_metrics,
    macro_f1,
    roc_auc,
)

__all__ = [
    "accuracy",
    "all_reduce_confusion",
    "classification_metrics",
    "macro_f1",
    "roc_auc",
]
