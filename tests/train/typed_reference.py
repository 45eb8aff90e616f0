"""The single-process reference of typed exact evaluation: every node's outputs at once.

``ShardEvaluator`` (``gnnsys.train.eval.sharded``) must equal it to float rounding.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

from gnnsys.types import (
    Block,
    EdgeType,  # noqa: E402  (placeholder)
)


@torch.no_grad()
def full_typed_outputs(
    layers: nn.ModuleList,
    relations: dict[EdgeType, tuple[np.ndarray, np.ndarray]],
    x_dict: dict[str, Tensor],
) -> dict[str, Tensor]:
    """Every node's outputs in one process: the layers over whole relations (the reference).

    Args:
        layers: The model's layers (ReLU between them, no dropout: evaluation).
        relations: Edge type -> ``(indptr [N_dst + 1], indices [E])`` in-edge CSR.
        x_dict: Node type -> ``[N_t, F_t]`` layer-0 rows of every node.
    """
    blocks = {
        et: Block(
            num_src=int(x_dict[et[0]].shape[0]),
            num_dst=int(indptr.shape[0]) - 1,
            rowptr=torch.from_numpy(np.asarray(indptr, dtype=np.int64)),
            col=torch.from_numpy(np.asarray(indices, dtype=np.int64)),
            e_id=torch.arange(int(indices.shape[0])),
            # GCN's whole-graph in-degrees (a relation from a type to itself; others ignore it)
            src_in_degree=torch.from_numpy(np.diff(indptr)) if et[0] == et[2] else None,
        )
        for et, (indptr, indices) in relations.items()
    }
    layers.eval()  # evaluation: no attention dropout (GAT)
    for i, layer in enumerate(layers):
        x_dict = layer(x_dict, blocks)
        if i < len(layers) - 1:
            x_dict = {t: h.relu() for t, h in x_dict.items()}
    return x_dict
