"""Shared skeleton of the block models: a stack of layers applied over a list of ``Block``.

Shape legend: ``N`` source nodes of a block, ``M`` its destination nodes (the first ``M`` source
nodes), ``F`` input features, ``H`` hidden dim, ``C`` classes, ``B`` seeds (last block's ``M``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import torch
from torch import Tensor, nn
from torch.nn import functional

from gnnsys.types import Block

__all__ = ["BlockModel", "check_dims"]


def check_dims(in_dim: int, hidden_dim: int, out_dim: int, num_layers: int, dropout: float) -> None:
    """Raise ``ValueError`` naming the first bad constructor argument."""
    for name, value in (("in_dim", in_dim), ("hidden_dim", hidden_dim), ("out_dim", out_dim)):
        if value < 1:
            raise ValueError(f"{name}={value}; it must be >= 1")
    if num_layers < 1:
        raise ValueError(f"num_layers={num_layers}; it must be >= 1")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout={dropout}; choose 0 <= dropout < 1")


def layer_dims(
    in_dim: int, hidden_dim: int, out_dim: int, num_layers: int
) -> list[tuple[int, int]]:
    """``(in, out)`` of every layer: ``in -> hidden -> ... -> out``."""
    dims = [in_dim] + [hidden_dim] * (num_layers - 1) + [out_dim]
    return list(zip(dims[:-1], dims[1:], strict=True))


class BlockModel(nn.Module):
    """Applies ``layers[i]`` to block ``i`` (input layer first), ReLU + dropout between layers.

    Subclasses fill ``self.layers``; each layer is called as ``layer(x_src, block) -> x_dst``.
    """

    uses_in_degree: ClassVar[bool] = False
    """The layers normalise by ``Block.src_in_degree`` (GCN): the runtime then stamps every
    sampled block with whole-graph in-degrees (``gnnsys.sampler.degree``)."""

    def __init__(self, num_layers: int, dropout: float) -> None:
        super().__init__()
        self.num_layers = num_layers
        self.dropout = dropout
        self.layers = nn.ModuleList()

    def forward(self, x_NF: Tensor, blocks: Sequence[Block]) -> Tensor:
        """Run every layer over its block.

        Args:
            x_NF: ``[N, F]`` features of the first block's source nodes.
            blocks: ``num_layers`` blocks, input layer first, seed hop last.

        Returns:
            ``[B, C]`` outputs for the last block's destination nodes (the seeds).

        Raises:
            ValueError: Wrong number of blocks or mismatched node counts.
        """
        if len(blocks) != self.num_layers:
            raise ValueError(f"got {len(blocks)} blocks for a {self.num_layers}-layer model")
        x = x_NF
        for i, block in enumerate(blocks):
            x = self.forward_layer(i, x, block)
        return x

    def forward_layer(self, i: int, x_src: Tensor, block: Block) -> Tensor:
        """Layer ``i`` alone (for layer-wise full-graph inference): ``[N, *] -> [M, *]``.

        Raises:
            ValueError: ``x_src`` does not have ``block.num_src`` rows.
        """
        if x_src.shape[0] != block.num_src:
            raise ValueError(
                f"layer {i}: x_src has {x_src.shape[0]} rows but the block has "
                f"num_src={block.num_src}; pass the features of the block's source nodes"
            )
        return self._activate(i, self.layers[i](x_src, block))

    def activate(self, i: int, out: Tensor) -> Tensor:
        """What follows layer ``i``: ReLU and dropout after every layer but the last."""
        return self._activate(i, out)

    def _activate(self, i: int, out: Tensor) -> Tensor:
        """ReLU and dropout after every layer but the last."""
        if i < self.num_layers - 1:
            out = functional.dropout(torch.relu(out), p=self.dropout, training=self.training)
        return out
