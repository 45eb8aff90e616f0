"""GCN over blocks (single device; distribution happens in ``gnnsys.train``)."""

from __future__ import annotations

from gnnsys.models.base import BlockModel, check_dims, layer_dims
from gnnsys.models.layers import GCNLayer

__all__ = ["GCN"]


class GCN(BlockModel):
    """Stack of ``GCNLayer`` with ReLU and dropout between layers.

    Args:
        in_dim: Input feature dim ``F``.
        hidden_dim: Hidden dim ``H``.
        out_dim: Output dim ``C`` (classes).
        num_layers: Layers (= blocks per batch).
        dropout: Dropout probability after each hidden layer.

    Raises:
        ValueError: A non-positive dim or layer count, or dropout outside ``[0, 1)``.
    """

    uses_in_degree = True

    def __init__(
        self, in_dim: int, hidden_dim: int, out_dim: int, num_layers: int = 2, dropout: float = 0.5
    ) -> None:
        check_dims(in_dim, hidden_dim, out_dim, num_layers, dropout)
        super().__init__(num_layers, dropout)
        for d_in, d_out in layer_dims(in_dim, hidden_dim, out_dim, num_layers):
            self.layers.append(GCNLayer(d_in, d_out))
