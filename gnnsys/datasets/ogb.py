"""``ogb:<name>``: an OGB node-property dataset already on disk, in OGB's raw layout. No download.

Expected tree (``<root>/<name>/``, with ``-`` in the name read as ``_``, as OGB names folders)::

    <root>/ogbn_arxiv/
    ├── raw/edge.csv.gz            # one "src,dst" line per edge, no header (required)
    ├── raw/num-node-list.csv.gz   # one line: N (optional; else inferred)
    ├── raw/node-feat.csv.gz       # N lines of F comma-separated floats (optional)
    ├── raw/node-label.csv.gz      # N lines: one label, NaN = unlabeled; or C 0/1 columns
    └── split/<type>/{train,valid,test}.csv.gz   # node ids, one per line

OGB lists an undirected graph's edges once (``ogbn-products``) and a directed graph's edges as
they are (``ogbn-arxiv``); GNN training on either uses the symmetrized graph, so the loader adds
reverse edges by default (``symmetric=False`` keeps the file's direction). Self-loops are dropped.
Single-column labels become int64 (NaN -> -1); several 0/1 columns (``ogbn-proteins``) become a
bool ``[N, C]`` multi-label matrix. Heterogeneous datasets (``ogbn-mag``) are not supported.

Parsing uses numpy's C CSV reader on the gzip stream, straight to the final dtype (float32
features), so peak memory is about the parsed arrays plus one read buffer.

Shape legend: ``N`` nodes, ``E`` edges, ``F`` features, ``C`` label columns.
"""

from __future__ import annotations

import gzip
import logging
from pathlib import Path
from typing import Literal

import numpy as np

from gnnsys.datasets.base import find_dir, require_file
from gnnsys.types import Graph

__all__ = ["is_ogb_hetero_layout", "load_ogb"]

log = logging.getLogger(__name__)

HOW_TO_GET = (
    "Download it once with the ogb package (e.g. NodePropPredDataset('ogbn-arxiv', root=DIR)) "
    "or from http://snap.stanford.edu/ogb/data/nodeproppred/, unzip it, and pass DIR as --root."
)
SPLIT_FILES = {"train": "train.csv.gz", "val": "valid.csv.gz", "test": "test.csv.gz"}


def _read_csv_gz(path: Path, dtype: type[np.generic], ndmin: Literal[1, 2]) -> np.ndarray:
    with gzip.open(path, "rt") as f:
        out: np.ndarray = np.loadtxt(f, delimiter=",", dtype=dtype, ndmin=ndmin)
    return out


def _labels(path: Path, num_nodes: int) -> np.ndarray:
    raw = _read_csv_gz(path, np.float64, ndmin=2)
    if raw.shape[0] != num_nodes:
        raise ValueError(f"{path} has {raw.shape[0]} rows; expected one per node ({num_nodes})")
    if raw.shape[1] > 1:
        return raw > 0.5
    labels = np.full(num_nodes, -1, dtype=np.int64)
    known = ~np.isnan(raw[:, 0])
    labels[known] = raw[known, 0].astype(np.int64)
    return labels


def _split_dir(folder: Path, split_type: str | None, dataset: str) -> Path | None:
    types = sorted(p.name for p in (folder / "split").glob("*") if p.is_dir())
    if split_type is not None:
        if split_type not in types:
            raise ValueError(f"split_type={split_type!r} not in {folder / 'split'}; found {types}")
        return folder / "split" / split_type
    if len(types) > 1:
        raise ValueError(f"{dataset} has several splits {types}; choose one with split_type=")
    if not types:
        log.warning("%s: no split/ folder under %s; the graph has no masks", dataset, folder)
        return None
    return folder / "split" / types[0]


def _masks(split: Path | None, num_nodes: int, dataset: str) -> dict[str, np.ndarray | None]:
    masks: dict[str, np.ndarray | None] = {f"{k}_mask": None for k in SPLIT_FILES}
    if split is None:
        return masks
    for key, filename in SPLIT_FILES.items():
        gid = _read_csv_gz(require_file(split / filename, dataset, HOW_TO_GET), np.int64, 1)
        mask = np.zeros(num_nodes, dtype=bool)
        mask[gid] = True
        masks[f"{key}_mask"] = mask
    return masks


def _num_nodes(raw: Path, edge_index: np.ndarray) -> int:
    count_file = raw / "num-node-list.csv.gz"
    if count_file.is_file():
        return int(_read_csv_gz(count_file, np.int64, 1)[0])
    return int(edge_index.max(initial=-1)) + 1


def is_ogb_hetero_layout(folder: Path) -> bool:
    """Whether an OGB dataset folder is in OGB's heterogeneous layout (node counts per type)."""
    return (folder / "raw" / "num-node-dict.csv.gz").is_file()


def load_ogb(
    variant: str,
    root: Path | None = None,
    *,
    symmetric: bool = True,
    split_type: str | None = None,
) -> Graph:
    """Load ``ogb:<variant>`` (e.g. ``ogb:ogbn-arxiv``) from ``<root>/<variant with _>/``.

    Args:
        variant: OGB dataset name, ``ogbn-arxiv`` or ``ogbn_arxiv``.
        root: Data root holding the dataset folder.
        symmetric: Add reverse edges (default), else keep the file's direction.
        split_type: Folder under ``split/`` to use when there are several.

    Returns:
        The graph with float32 features if ``node-feat.csv.gz`` exists, labels, and split masks.

    Raises:
        ValueError: Malformed files or an ambiguous/unknown split type.
        DatasetNotFoundError: The folder or ``raw/edge.csv.gz`` is missing.
    """
    name = f"ogb:{variant}"
    folder = find_dir(root, variant.replace("-", "_"), name)
    raw = folder / "raw"
    if is_ogb_hetero_layout(folder):
        raise ValueError(
            f"{name} is heterogeneous ({raw / 'num-node-dict.csv.gz'} is OGB's heterogeneous "
            "layout); load it with gnnsys.datasets.load_hetero (gnnsys train and partition "
            "do so by themselves)"
        )
    edges = _read_csv_gz(require_file(raw / "edge.csv.gz", name, HOW_TO_GET), np.int64, 2)
    if edges.shape[1] != 2:
        raise ValueError(f"{raw / 'edge.csv.gz'} has {edges.shape[1]} columns; expected 2")
    edge_index = np.ascontiguousarray(edges.T)
    del edges
    num_nodes = _num_nodes(raw, edge_index)
    x = None
    if (raw / "node-feat.csv.gz").is_file():
        x = _read_csv_gz(raw / "node-feat.csv.gz", np.float32, 2)
        if x.shape[0] != num_nodes:
            raise ValueError(f"node-feat.csv.gz has {x.shape[0]} rows; expected {num_nodes}")
    y = (
        _labels(raw / "node-label.csv.gz", num_nodes)
        if (raw / "node-label.csv.gz").is_file()
        else None
    )
    masks = _masks(_split_dir(folder, split_type, name), num_nodes, name)
    return Graph.from_edge_index(
        edge_index, num_nodes, symmetric=symmetric, self_loops=False, x=x, y=y, name=name, **masks
    )
