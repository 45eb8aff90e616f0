"""``deezer:hu``: the Deezer Hungary friendship graph with multi-label genre targets.

Files (``<root>/deezer_hu/``, benedekrozemberczki/datasets ``deezer/HU/``): ``HU_edges.csv``
(``node_1,node_2``, each undirected edge once) and ``HU_genres.json`` (``{"<id>": [genre names]}``).
47,538 nodes, 445,774 directed edges after symmetrizing; ``y`` is ``[N, 84]`` bool, one column per
genre in sorted name order.

The release has **no node features**. Substitutes (``features=``):

- ``"degree"`` (default): ``F = 17`` structural columns, a one-hot of the degree bucket
  ``min(floor(log2(1 + degree)), 15)`` (16 columns) plus ``log1p(degree) / log1p(max degree)``.
  Deterministic; carries no label information beyond what structure implies.
- ``"random"``: seeded ``N(0, 1)`` float32 ``[N, num_features]`` (``num_features`` 64, ``seed``),
  i.e. learnable-embedding-like inputs with no signal of their own.
- ``"none"``: ``x = None``.

No public split exists: a seeded random 60/20/20 % ``train``/``val``/``test`` split (``seed`` 0).

Shape legend: ``N`` nodes, ``F`` features, ``C`` genres.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from gnnsys.datasets.base import find_dir, lists_to_coo, read_edge_csv, require_file
from gnnsys.datasets.splits import fraction_split
from gnnsys.types import Graph

__all__ = ["DEGREE_BUCKETS", "degree_features", "load_deezer"]

DEGREE_BUCKETS = 16
"""One-hot degree buckets of the ``degree`` feature substitute (log2 scale, last one open)."""
FEATURE_KINDS = ("degree", "random", "none")
HOW_TO_GET = (
    "Copy HU_edges.csv and HU_genres.json from https://github.com/benedekrozemberczki/datasets "
    "(deezer/HU/, commit 02cb7bc) into <root>/deezer_hu/."
)


def degree_features(degree_N: np.ndarray) -> np.ndarray:
    """``[N, 17]`` float32: one-hot log2 degree bucket (16 columns) and scaled ``log1p(degree)``.

    Args:
        degree_N: ``[N]`` integer degree of every node.

    Returns:
        The feature matrix; rows of equal degree are equal.
    """
    num_nodes = int(degree_N.shape[0])
    x = np.zeros((num_nodes, DEGREE_BUCKETS + 1), dtype=np.float32)
    bucket = np.minimum(np.floor(np.log2(1.0 + degree_N)), DEGREE_BUCKETS - 1).astype(np.int64)
    x[np.arange(num_nodes), bucket] = 1.0
    log_degree = np.log1p(degree_N.astype(np.float64))
    x[:, DEGREE_BUCKETS] = log_degree / max(float(log_degree.max(initial=0.0)), 1e-12)
    return x


def _genres(path: Path, num_nodes: int) -> np.ndarray:
    """``[N, C]`` bool multi-hot genre matrix, columns in sorted genre-name order."""
    with path.open(encoding="utf-8") as f:
        lists = json.load(f)
    row_K, names = lists_to_coo(lists)
    vocab, col_K = np.unique(np.asarray(names, dtype=str), return_inverse=True)
    y = np.zeros((max(num_nodes, int(row_K.max(initial=-1)) + 1), vocab.shape[0]), dtype=bool)
    y[row_K, col_K] = True
    return y


def load_deezer(
    variant: str,
    root: Path | None = None,
    *,
    features: str = "degree",
    num_features: int = 64,
    seed: int = 0,
    train: float = 0.6,
    val: float = 0.2,
    test: float = 0.2,
) -> Graph:
    """Load ``deezer:hu``.

    Args:
        variant: ``hu``.
        root: Data root holding ``deezer_hu/``.
        features: Feature substitute: ``degree``, ``random`` or ``none`` (module docstring).
        num_features: Columns of the ``random`` substitute.
        seed: Seed of the split and of the ``random`` features.
        train: Fraction of nodes in the train mask.
        val: Fraction in the validation mask.
        test: Fraction in the test mask.

    Returns:
        A symmetric, self-loop-free graph with ``[N, 84]`` bool multi-label ``y``.

    Raises:
        ValueError: Unknown variant or feature kind, bad fractions or malformed files.
        DatasetNotFoundError: The files are missing.
    """
    if variant != "hu":
        raise ValueError(f"unknown deezer dataset {variant!r}; choose 'hu'")
    if features not in FEATURE_KINDS:
        raise ValueError(f"features={features!r}; choose one of {FEATURE_KINDS}")
    name = "deezer:hu"
    folder = find_dir(root, "deezer_hu", name)
    edge_index = read_edge_csv(require_file(folder / "HU_edges.csv", name, HOW_TO_GET))
    num_edge_nodes = int(edge_index.max(initial=-1)) + 1
    y = _genres(require_file(folder / "HU_genres.json", name, HOW_TO_GET), num_edge_nodes)
    num_nodes = int(y.shape[0])
    graph = Graph.from_edge_index(edge_index, num_nodes, symmetric=True, self_loops=False)
    rng = np.random.default_rng(seed)
    masks = fraction_split(num_nodes, rng, train, val, test)
    x = None
    if features == "degree":
        x = degree_features(graph.in_degree)
    elif features == "random":
        x = rng.standard_normal((num_nodes, num_features), dtype=np.float32)
    return Graph(
        indptr=graph.indptr,
        indices=graph.indices,
        num_nodes=num_nodes,
        x=x,
        y=y,
        train_mask=masks[0],
        val_mask=masks[1],
        test_mask=masks[2],
        name=name,
    )
