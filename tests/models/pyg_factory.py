"""Factories for ``gnnsys train --model tests.models.pyg_factory:NAME`` (the PyG-model tests)."""

from __future__ import annotations

from typing import Any


def gin(**kwargs: Any) -> Any:
    """A PyG ``GIN`` with trainable epsilon (what a user's factory returns)."""
    from torch_geometric.nn.models import GIN

    return GIN(train_eps=True, **kwargs)


def linear(**kwargs: Any) -> Any:
    """Not a ``BasicGNN``: ``gnnsys train`` refuses it, naming the loop that takes it."""
    import torch

    return torch.nn.Linear(kwargs["in_channels"], kwargs["out_channels"])
