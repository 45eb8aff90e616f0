"""Stage 1, datasets: ``load(name) -> Graph`` from a registry of dataset families.

Heterogeneous graphs (``synthetic:mag``, ``ogb:ogbn-mag``) load with ``load_hetero(name) ->
HeteroGraph`` from their own registry (``gnnsys.types.relations`` describes the record).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gnnsys.datasets.base import DatasetSource, find_dir, reading
from gnnsys.datasets.deezer import load_deezer
from gnnsys.datasets.link_split import LinkSplit, LinkSplitConfig, edge_split
from gnnsys.datasets.mag import load_synthetic_hetero
from gnnsys.datasets.musae import load_musae
from gnnsys.datasets.npz import load_npz
from gnnsys.datasets.ogb import is_ogb_hetero_layout, load_ogb
from gnnsys.datasets.ogb_hetero import load_ogb_hetero
from gnnsys.datasets.ogb_link import load_ogb_link
from gnnsys.datasets.planetoid import load_planetoid
from gnnsys.datasets.synthetic import load_synthetic
from gnnsys.errors import DatasetNotFoundError
from gnnsys.types import Graph
from gnnsys.types.relations import HeteroGraph


def _load_parquet(variant: str, root: Path | None = None, **params: Any) -> Graph:
    """``parquet:DIR`` (``gnnsys.datasets.parquet``), imported on use: pyarrow loads slowly."""
    from gnnsys.datasets.parquet import load_parquet

    return load_parquet(variant, root, **params)


__all__ = [
    "DATASETS",
    "HETERO_DATASETS",
    "HETERO_NAMES",
    "is_heterogeneous",
    "KNOWN_NAMES",
    "LinkSplit",
    "LinkSplitConfig",
    "load",
    "load_hetero",
    "load_link_split",
]

DATASETS: dict[str, DatasetSource] = {
    "synthetic": load_synthetic,
    "planetoid": load_planetoid,
    "npz": load_npz,
    "musae": load_musae,
    "deezer": load_deezer,
    "ogb": load_ogb,
    "parquet": _load_parquet,
}
"""Family name (before the ``:``) -> loader."""

KNOWN_NAMES: dict[str, str] = {
    "synthetic:sbm": "degree-corrected SBM, 100k nodes, 64 Gaussian features (embedded default)",
    "synthetic:rmat": "R-MAT power law (a,b,c=.57,.19,.19), planted communities; up to 2.4M nodes",
    "planetoid:cora": "Cora, Planetoid files + public split (2708 nodes, 1433 features, 7 classes)",
    "planetoid:citeseer": "CiteSeer, Planetoid files + public split (3327 nodes, 6 classes)",
    "planetoid:pubmed": "PubMed, Planetoid files; features only for 1060 of 19717 nodes here",
    "npz:cora": "Cora, gnn-benchmark .npz, seeded 20-per-class/500/1000 split",
    "npz:citeseer": "CiteSeer, gnn-benchmark .npz (3312 nodes), seeded split",
    "npz:cora_ml": "Cora-ML, PPNP .npz (2995 nodes, 2879 features), seeded split",
    "musae:facebook": "Facebook page-page (22470 nodes, 4714 binary features, 4 classes)",
    "deezer:hu": "Deezer HU (47538 nodes, 84 genres multi-label, degree features substitute)",
    "parquet:DIR": "Parquet tables in DIR: edges/ (src, dst), nodes/ (id, x, y, split), "
    "gnnsys.json; `gnnsys export` writes one",
}
"""Dataset names `gnnsys datasets` lists, with a one-line description each."""

HETERO_DATASETS: dict[str, Callable[..., HeteroGraph]] = {
    "synthetic": load_synthetic_hetero,
    "ogb": load_ogb_hetero,
}
"""Family name -> loader of heterogeneous graphs (``load_hetero``)."""

HETERO_NAMES: dict[str, str] = {
    "synthetic:mag": "ogbn-mag-shaped: 4 node types, 4 relations, paper features/venues; scale=",
    "ogb:ogbn-mag": "ogbn-mag from OGB's raw files (736k papers, 1.1M authors, 21M edges)",
}
"""Heterogeneous dataset names, with a one-line description each."""


def is_heterogeneous(name: str, root: str | os.PathLike[str] | None = None) -> bool:
    """Whether dataset ``name`` is heterogeneous, decided from its files where it has files.

    ``HETERO_NAMES`` are; an ``ogb:`` dataset is when its folder holds OGB's heterogeneous
    layout (``raw/num-node-dict.csv.gz``), whatever its name; any other name is homogeneous
    (a missing dataset too: loading it says where it looked).
    """
    if name.replace("_", "-") in HETERO_NAMES:
        return True
    family, _, variant = name.partition(":")
    if family != "ogb" or not variant:
        return False
    try:
        folder = find_dir(root, variant.replace("-", "_"), name)  # the folder load_ogb reads
    except DatasetNotFoundError:
        return False
    return is_ogb_hetero_layout(folder)


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
        DatasetFileError: A file is truncated, corrupt, empty or of another format.
    """
    family, _, variant = name.partition(":")
    if name.replace("_", "-") in HETERO_NAMES:
        raise ValueError(f"{name!r} is heterogeneous; load it with gnnsys.datasets.load_hetero")
    if family not in DATASETS or not variant:
        raise ValueError(
            f"unknown dataset {name!r}; use family:variant with a family in {sorted(DATASETS)} "
            "(run `gnnsys datasets` for the list)"
        )
    with reading(f"dataset {name!r}"):
        return DATASETS[family](variant, None if root is None else Path(root), **params)


def load_hetero(
    name: str, root: str | os.PathLike[str] | None = None, **params: Any
) -> HeteroGraph:
    """Load a heterogeneous dataset, e.g. ``load_hetero("synthetic:mag", scale=0.1)``.

    Args:
        name: ``family:variant``, one of ``HETERO_NAMES``.
        root: Data directory laid out like ``shared/datasets`` (for ``ogb:``).
        **params: Family-specific options (``scale``, ``seed``, ``reverse``, ...).

    Raises:
        ValueError: Unknown family or variant.
        DatasetNotFoundError: Files missing; the message says where it looked.
        DatasetFileError: A file is truncated, corrupt, empty or of another format.
    """
    family, _, variant = name.partition(":")
    if family not in HETERO_DATASETS or not variant:
        raise ValueError(
            f"unknown heterogeneous dataset {name!r}; choose one of {sorted(HETERO_NAMES)}"
        )
    with reading(f"dataset {name!r}"):
        return HETERO_DATASETS[family](variant, None if root is None else Path(root), **params)


def load_link_split(
    name: str,
    root: str | os.PathLike[str] | None = None,
    *,
    config: LinkSplitConfig,
    **params: Any,
) -> LinkSplit:
    """A link-prediction split of dataset ``name`` (``gnnsys.datasets.link_split``).

    ``ogb:ogbl-*`` datasets bring their own split (``gnnsys.datasets.ogb_link``); any other
    dataset is loaded with :func:`load` and split by ``edge_split(graph, config)``.

    Raises:
        ValueError: Unknown dataset, or a split that leaves no training link.
        DatasetNotFoundError: Files missing.
        DatasetFileError: A file is truncated, corrupt or of another format.
    """
    family, _, variant = name.partition(":")
    if family == "ogb" and variant.replace("_", "-").startswith("ogbl-"):
        with reading(f"dataset {name!r}"):
            return load_ogb_link(variant, None if root is None else Path(root), config)
    return edge_split(load(name, root=root, **params), config)
