"""Whole-graph references in one process: what tests and benchmarks compare the runtime with.

:func:`full_block` is every in-edge of a graph as one block and :func:`full_graph_logits` the
layer-wise inference of a ``BlockModel`` over it: the single-process exact outputs that the
sharded evaluation (``gnnsys.train.eval.sharded.ShardEvaluator``) must equal. Each costs one
``[N, H]`` activation per layer; the runtime never calls them.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import torch
from torch import Tensor, nn

from gnnsys.models import BlockModel
from gnnsys.types import Block

__all__ = ["full_block", "full_graph_logits"]


def full_block(indptr: np.ndarray, indices: np.ndarray, num_nodes: int) -> Block:
    """Every in-edge of a whole graph as one block (destinations = sources = all nodes).

    Carries the in-degrees, so GCN normalises as on a rank's shard block (and as PyG's
    ``GCNConv`` does on the full graph).
    """
    rowptr = torch.from_numpy(np.asarray(indptr, dtype=np.int64))
    return Block(
        num_src=num_nodes,
        num_dst=num_nodes,
        rowptr=rowptr,
        col=torch.from_numpy(np.asarray(indices, dtype=np.int64)),
        e_id=torch.arange(int(indptr[-1]), dtype=torch.int64),
        src_in_degree=rowptr[1:] - rowptr[:-1],
    )


@torch.no_grad()
def full_graph_logits(model: nn.Module, block: Block, x_NF: Tensor) -> Tensor:
    """Layer-wise inference over one whole-graph block: the single-process reference.

    Costs one ``[N, H]`` activation per layer; used by tests and small-graph tools, never by
    the runtime (which evaluates sharded, ``gnnsys.train.eval.sharded.ShardEvaluator``).
    """
    model.eval()
    layered = cast(BlockModel, model)
    h = x_NF
    for layer in range(layered.num_layers):
        h = layered.forward_layer(layer, h, block)
    return h
