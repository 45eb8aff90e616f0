"""``musae:facebook``: the Facebook Large Page-Page network of MUSAE (raw release).

Files (``<root>/musae_facebook/``, benedekrozemberczki/datasets ``facebook_large/``):
``facebook_edges.csv`` (``id_1,id_2``, each undirected edge once, 179 self-loops),
``facebook_target.csv`` (``id,facebook_id,page_name,page_type``; names may hold quoted commas)
and ``facebook_features.json`` (``{"<id>": [feature ids]}``, a multi-hot bag of 4,714 ids).

The graph is symmetrized with self-loops dropped: 22,470 nodes, 341,646 directed edges. ``x`` is
the dense 0/1 float32 ``[N, 4714]`` multi-hot matrix (424 MB). Labels are the 4 page types in
sorted order (company, government, politician, tvshow). No public split exists: the loader draws
a seeded random ``train``/``val``/``test`` split of 60/20/20 % (``seed`` 0).

Shape legend: ``N`` nodes, ``F`` features, ``K`` nonzero features.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from gnnsys.datasets.base import find_dir, lists_to_coo, read_edge_csv, require_file
from gnnsys.datasets.splits import fraction_split
from gnnsys.types import Graph

__all__ = ["load_musae"]

HOW_TO_GET = (
    "Copy facebook_edges.csv, facebook_target.csv and facebook_features.json from "
    "https://github.com/benedekrozemberczki/datasets (facebook_large/, commit 02cb7bc) into "
    "<root>/musae_facebook/."
)


def _labels(path: Path) -> tuple[np.ndarray, list[str]]:
    """``[N]`` int64 page-type ids in node-id order, and the sorted type names."""
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], rows[1:]
    if header[0] != "id" or header[-1] != "page_type":
        raise ValueError(f"{path} has header {header}; expected id,...,page_type")
    gid = np.fromiter((int(r[0]) for r in body), dtype=np.int64, count=len(body))
    names, codes = np.unique(np.array([r[-1] for r in body]), return_inverse=True)
    y = np.full(len(body), -1, dtype=np.int64)
    y[gid] = codes
    return y, [str(n) for n in names]


def _features(path: Path, num_nodes: int) -> np.ndarray:
    """``[N, F]`` float32 0/1 multi-hot matrix, ``F = max feature id + 1``."""
    with path.open(encoding="utf-8") as f:
        bags = json.load(f)
    row_K, values = lists_to_coo(bags)
    col_K = np.asarray(values, dtype=np.int64)
    x = np.zeros((num_nodes, int(col_K.max(initial=-1)) + 1), dtype=np.float32)
    x[row_K, col_K] = 1.0
    return x


def load_musae(
    variant: str,
    root: Path | None = None,
    *,
    seed: int = 0,
    train: float = 0.6,
    val: float = 0.2,
    test: float = 0.2,
) -> Graph:
    """Load ``musae:facebook``.

    Args:
        variant: ``facebook``.
        root: Data root holding ``musae_facebook/``.
        seed: Seed of the random split.
        train: Fraction of nodes in the train mask.
        val: Fraction in the validation mask.
        test: Fraction in the test mask.

    Returns:
        A symmetric, self-loop-free graph, 0/1 float32 features and int64 labels.

    Raises:
        ValueError: Unknown variant, bad fractions or malformed files.
        DatasetNotFoundError: The files are missing.
    """
    if variant != "facebook":
        raise ValueError(f"unknown musae dataset {variant!r}; choose 'facebook'")
    name = "musae:facebook"
    folder = find_dir(root, "musae_facebook", name)
    y, _ = _labels(require_file(folder / "facebook_target.csv", name, HOW_TO_GET))
    num_nodes = int(y.shape[0])
    edge_index = read_edge_csv(require_file(folder / "facebook_edges.csv", name, HOW_TO_GET))
    x = _features(require_file(folder / "facebook_features.json", name, HOW_TO_GET), num_nodes)
    masks = fraction_split(num_nodes, np.random.default_rng(seed), train, val, test)
    return Graph.from_edge_index(
        edge_index,
        num_nodes,
        symmetric=True,
        self_loops=False,
        x=x,
        y=y,
        train_mask=masks[0],
        val_mask=masks[1],
        test_mask=masks[2],
        name=name,
    )
