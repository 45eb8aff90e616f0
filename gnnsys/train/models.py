"""Model architecture settings and the one place that builds a model from the registry.

Models are single-device (``gnnsys.models``); distribution is applied around them in
``gnnsys.train`` (a flat-gradient gloo allreduce), never inside.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

__all__ = ["ModelSpec", "build_model"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelSpec:
    """Which model and how wide; the layer count follows the sampler's fanouts."""

    name: str = "sage"
    """Registry name in ``gnnsys.models.MODELS``: ``sage``, ``gcn`` or ``gat``."""
    hidden: int = 256
    """Hidden width ``H``."""
    dropout: float = 0.5
    """Dropout between layers (training only)."""

    def __post_init__(self) -> None:
        if self.hidden < 1:
            raise ValueError(f"hidden={self.hidden}; choose hidden >= 1")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout={self.dropout}; choose a value in [0, 1)")


def build_model(spec: ModelSpec, num_features: int, num_classes: int, num_layers: int) -> nn.Module:
    """Build ``spec.name`` with ``num_layers`` layers mapping ``F`` features to ``C`` logits.

    Raises:
        ValueError: Unknown model name.
    """
    from gnnsys.models import MODELS

    if spec.name not in MODELS:
        raise ValueError(f"unknown model {spec.name!r}; choose one of {sorted(MODELS)}")
    cls: Any = MODELS[spec.name]  # every registered model takes (F, H, C, layers, dropout)
    model: nn.Module = cls(num_features, spec.hidden, num_classes, num_layers, spec.dropout)
    return model
