"""``DataConfig``: which graph a run trains on and how its partition store comes about.

Either an existing store (``--store``), or a dataset (``gnnsys.datasets.load`` name and options)
partitioned with a strategy of ``gnnsys.partitioners.PARTITIONERS`` into a new store before any
worker starts (``gnnsys.train.control.prepare.prepare_store`` does the I/O).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gnnsys.datasets.link_split import LinkSplitConfig

__all__ = ["DataConfig"]


@dataclass(frozen=True, kw_only=True, slots=True)
class DataConfig:
    """Which graph to train on and how to split it."""

    dataset: str = "synthetic:sbm"
    """Dataset name for ``gnnsys.datasets.load`` (ignored when ``store`` is given)."""
    root: str | None = None
    """Data directory of the dataset (default: ``$GNNSYS_DATA``, then ``../shared/datasets``)."""
    store: str | None = None
    """An existing partition store (``gnnsys partition``), whose parts must equal ``parts``;
    ``None``: partition the dataset into ``RUN_DIR/store``."""
    partitioner: str = "metis"
    """Strategy in ``gnnsys.partitioners.PARTITIONERS`` used when partitioning here."""
    dataset_params: tuple[tuple[str, Any], ...] = ()
    """Extra ``load`` options as pairs, e.g. ``(("num_nodes", 1000),)`` for synthetic graphs."""
    link_split: LinkSplitConfig | None = None
    """Hold out links for link prediction (``--task link``): the store is written with the
    training graph and each part's links (``gnnsys.store.links``); ``None`` for node tasks."""
    feature_norm: str = "none"
    """Feature transform in ``gnnsys.datasets.transforms.FEATURE_NORMS`` applied before
    partitioning (``--feature-norm``): ``none``, or ``row`` (each row divided by its sum, Kipf's
    Planetoid preprocessing, PyG ``NormalizeFeatures``). A given ``store`` is used as written."""

    def __post_init__(self) -> None:
        from gnnsys.datasets.transforms import FEATURE_NORMS

        if self.feature_norm not in FEATURE_NORMS:
            raise ValueError(
                f"feature_norm={self.feature_norm!r}; choose one of {sorted(FEATURE_NORMS)}"
            )
        if self.store is not None and self.feature_norm != "none":
            raise ValueError(
                f"feature_norm={self.feature_norm!r} with store={self.store!r}: a given store "
                "keeps the features it was written with; drop --feature-norm or re-partition"
            )
