"""Stage 1, datasets: ``load(name) -> Graph`` from a registry of dataset families."""

from __future__ import annotations

import os
from typing import Any

from gnnsys.datasets.base import DatasetSource
from gnnsys.datasets.synthetic import load_synthetic
from gnnsys.types import Graph

__all__ = ["DATASETS", "KNOWN_NAMES", "load"]

DATASETS: dict[str, DatasetSource] = {"synthetic": load_synthetic}
"""Family name (before the ``:``) -> loader."""

KNOWN_NAMES: dict[str, str] = {
    "synthetic:sbm": "degree-corrected SBM, 100k nodes, 64 Gaussian features (embedded default)",
}
"""Dataset names `gnnsys datasets` lists, with a one-line description each."""


def load(name: str, root: str | os.PathLike[str] | None = None, **params: Any) -> Graph:
    """Load a dataset by name, e.g. ``load("planetoid:cora", root="../shared/datasets")``.

    Args:
        name: ``family:variant``; ``gnnsys datasets`` lists them.
        root: Data directory laid out like ``shared/datasets``; default ``$GNNSYS_DATA``, then
            ``../shared/datasets``.
        **params: Family-specific options (e.g. ``num_nodes`` and ``seed`` for synthetic graphs).

    Raises:
        ValueError: Unknown family or variant.
        DatasetNotFoundError: Files missing; the message says where it looked.
    """
    family, _, variant = name.partition(":")
    if family not in DATASETS or not variant:
        raise ValueError(
            f"unknown dataset {name!r}; use family:variant with a family in {sorted(DATASETS)} "
            "(run `gnnsys datasets` for the list)"
        )
    from pathlib import Path

    return DATASETS[family](variant, None if root is None else Path(root), **params)
