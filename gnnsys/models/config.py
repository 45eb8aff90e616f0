"""``ModelConfig``: which model and how wide, and the one place that builds a model from it.

Models are single-device; distribution is applied around them in ``gnnsys.train`` (a
flat-gradient allreduce), never inside.
"""

from __future__ import annotations

from dataclasses import dataclass

from gnnsys.models.base import BlockModel

__all__ = ["ModelConfig", "build_model"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelConfig:
    """Which model and how wide; the layer count follows the sampler's fanouts."""

    name: str = "sage"
    """Built-in name in ``gnnsys.models.registry.REGISTRY`` (``sage``, ``gcn``, ``gat``;
    ``rgcn`` on typed graphs); or a PyG
    ``BasicGNN`` class (``GraphSAGE``, ``GIN``, ...) or ``package.module:factory``
    (``gnnsys.models.pyg_user``) (``--model``)."""
    hidden: int = 256
    """Hidden width ``H`` (``--hidden``)."""
    dropout: float = 0.5
    """Dropout probability after every hidden layer, training only (``--dropout``)."""
    args: tuple[tuple[str, str], ...] = ()
    """A PyG model's keyword arguments as ``(key, text)`` (``--model-arg KEY=VALUE``)."""

    def __post_init__(self) -> None:
        from gnnsys.models.pyg_user import check_user_model, is_user_model
        from gnnsys.models.registry import REGISTRY

        if is_user_model(self.name):
            check_user_model(self.name)
        elif self.name not in REGISTRY:
            raise ValueError(
                f"model name={self.name!r}; choose one of {sorted(REGISTRY)}, a PyG BasicGNN "
                "(GraphSAGE, GCN, GAT, GIN, EdgeCNN) or package.module:factory"
            )
        elif self.args:
            raise ValueError(f"--model-arg is for PyG models; --model {self.name} takes none")
        if self.hidden < 1:
            raise ValueError(f"hidden={self.hidden}; choose hidden >= 1")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout={self.dropout}; choose a value in [0, 1)")

    @property
    def uses_in_degree(self) -> bool:
        """The model normalises by whole-graph in-degrees (GCN; see ``BlockModel``)."""
        from gnnsys.models.registry import REGISTRY

        kind = REGISTRY.get(self.name)  # a PyG model normalises inside its blocks
        return bool(kind is not None and kind.uses_in_degree)

    @property
    def is_pyg(self) -> bool:
        """A PyG ``BasicGNN`` or a user factory (``gnnsys.models.pyg_user``)."""
        from gnnsys.models.pyg_user import is_user_model

        return is_user_model(self.name)


def build_model(
    config: ModelConfig, num_features: int, num_classes: int, num_layers: int
) -> BlockModel:
    """Build ``config.name`` with ``num_layers`` layers mapping ``F`` features to ``C`` logits.

    The single-process ``BlockModel`` of the in-memory reference runs (``REGISTRY[name].block``).

    Raises:
        ValueError: A model without one (``rgcn``, PyG models).
    """
    from gnnsys.models.registry import REGISTRY

    kind = REGISTRY.get(config.name)
    if kind is None or kind.block is None:
        with_block = sorted(n for n, k in REGISTRY.items() if k.block is not None)
        raise ValueError(f"model {config.name!r} has no single-process model; use {with_block}")
    model: BlockModel = kind.block(
        num_features, config.hidden, num_classes, num_layers, config.dropout
    )
    return model
