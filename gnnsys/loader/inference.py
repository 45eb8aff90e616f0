"""Full-neighborhood layer-wise inference, as PyG's examples compute exact validation accuracy.

Layer ``l`` runs for every node before layer ``l + 1`` starts, each batch of destinations seeing
*all* its in-neighbors' layer-``l - 1`` outputs. Cost per layer: one pass over every edge and
``N x H`` of memory for the layer's output, instead of the ``fanout^L`` blow-up of sampling
``L`` hops per node.

Shape legend: ``N`` nodes, ``F`` input features, ``H`` layer output, ``B`` batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from gnnsys.loader.graph_view import GraphView, edge_index_of
from gnnsys.sampler import NeighborSampler

__all__ = ["layerwise_inference"]

Layer = Callable[[Tensor, Tensor], Tensor]


@torch.no_grad()
def layerwise_inference(
    model_layers: Sequence[Layer],
    graph: Any,
    batch_size: int,
    *,
    x: Tensor | None = None,
    activation: Callable[[Tensor], Tensor] | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """Run ``model_layers`` one after the other over the whole graph, with all neighbors.

    Args:
        model_layers: Callables ``layer(x_NF, edge_index) -> [N, H]`` (e.g. ``SAGEConv``s).
        graph: A gnnsys ``Graph`` or a PyG ``Data``.
        batch_size: Destination nodes per batch.
        x: ``[N, F]`` input features; default the graph's ``x``.
        activation: Applied after every layer except the last (e.g. ``torch.relu``).
        device: Where the layers run; inputs move there per batch, outputs come back to CPU.

    Returns:
        ``[N, H_last]`` output of the last layer for every node, on CPU.

    Raises:
        ValueError: ``batch_size < 1``, or no ``x`` given and the graph has none.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size}; choose batch_size >= 1")
    view = GraphView.of(graph)
    x_all = view.attrs()[0].get("x") if x is None else x
    if x_all is None:
        raise ValueError("the graph has no x; pass x=<[N, F] tensor>")
    sampler = NeighborSampler(NeighborSampler.Config(fanouts=(-1,)), source=view.source)
    seeds = torch.split(torch.arange(view.num_nodes, dtype=torch.int64), batch_size)
    for depth, layer in enumerate(model_layers):
        outs = []
        for seed_gid in seeds:
            sub = sampler.sample(seed_gid, seed=0)  # fanout -1 draws nothing at random
            x_in = x_all.index_select(0, sub.n_id).to(device)
            out = layer(x_in, edge_index_of(sub).to(device))[: sub.batch_size]
            if activation is not None and depth < len(model_layers) - 1:
                out = activation(out)
            outs.append(out.cpu())
        x_all = torch.cat(outs)
    return x_all
