"""Seeded synthetic graphs: never download, same seed -> identical arrays.

``sbm``: a degree-corrected stochastic block model with class-correlated Gaussian features; the
embedded default graph of the README's main job. ``rmat``: an R-MAT power-law graph with planted
communities, built in chunks up to ogbn-products size (``gnnsys.datasets.rmat``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gnnsys.datasets.rmat import rmat
from gnnsys.datasets.splits import fraction_split
from gnnsys.types import Graph, coo_to_csr


def split_masks(
    num_nodes: int, rng: np.random.Generator, train: float, val: float, test: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Disjoint random train/val/test masks with the given fractions of ``num_nodes``."""
    return fraction_split(num_nodes, rng, train, val, test)


def sbm(
    num_nodes: int = 100_000,
    num_classes: int = 8,
    avg_degree: float = 16.0,
    homophily: float = 0.8,
    degree_sigma: float = 1.0,
    num_features: int = 64,
    feature_signal: float = 0.25,
    train: float = 0.1,
    val: float = 0.05,
    test: float = 0.1,
    seed: int = 0,
) -> Graph:
    """Degree-corrected SBM with Gaussian class features.

    Each node draws a lognormal degree weight (``degree_sigma`` sets the heterogeneity). Each edge
    picks its source by weight; with probability ``homophily`` its target is drawn by weight from
    the source's class, else from the whole graph. Features are ``feature_signal * mu[class] +
    N(0, I)``, so a feature-only model is weak and neighbourhood aggregation helps.

    Returns:
        An undirected (symmetric), self-loop-free graph with float32 features.
    """
    if num_nodes < num_classes or num_classes < 2:
        raise ValueError(f"need num_nodes >= num_classes >= 2, got {num_nodes}, {num_classes}")
    if not 0.0 <= homophily <= 1.0:
        raise ValueError(f"homophily={homophily}; choose a value in [0, 1]")
    rng = np.random.default_rng(seed)
    y = rng.integers(0, num_classes, num_nodes).astype(np.int64)
    weight = rng.lognormal(0.0, degree_sigma, num_nodes)
    num_undirected = int(num_nodes * avg_degree / 2)

    order = np.argsort(y, kind="stable")  # nodes grouped by class
    cdf = np.cumsum(weight[order])
    class_end = np.cumsum(np.bincount(y, minlength=num_classes))
    class_lo = np.concatenate([[0.0], cdf[class_end[:-1] - 1]])
    class_hi = cdf[class_end - 1]

    src = order[np.searchsorted(cdf, rng.random(num_undirected) * cdf[-1], side="right")]
    same = rng.random(num_undirected) < homophily
    c = y[src]
    u = np.where(
        same,
        class_lo[c] + rng.random(num_undirected) * (class_hi[c] - class_lo[c]),
        rng.random(num_undirected) * cdf[-1],
    )
    dst = order[np.minimum(np.searchsorted(cdf, u, side="right"), num_nodes - 1)]
    indptr, indices = coo_to_csr(src, dst, num_nodes, symmetric=True, self_loops=False)

    mu = rng.standard_normal((num_classes, num_features)).astype(np.float32)
    x = rng.standard_normal((num_nodes, num_features), dtype=np.float32)
    x += feature_signal * mu[y]
    train_mask, val_mask, test_mask = split_masks(num_nodes, rng, train, val, test)
    return Graph(
        indptr=indptr,
        indices=indices,
        num_nodes=num_nodes,
        x=x,
        y=y,
        train_mask=train_mask,
        val_mask=val_mask,
        test_mask=test_mask,
        name="synthetic:sbm",
        num_classes_hint=num_classes,
    )


GENERATORS: dict[str, Callable[..., Graph]] = {"sbm": sbm, "rmat": rmat}
"""Synthetic generators by variant name (``synthetic:<name>``)."""


def load_synthetic(variant: str, root: Path | None = None, **params: Any) -> Graph:
    """Registry entry for ``synthetic:<variant>``; ``root`` is ignored (nothing is read)."""
    del root
    if variant not in GENERATORS:
        raise ValueError(f"unknown synthetic graph {variant!r}; choose one of {sorted(GENERATORS)}")
    return GENERATORS[variant](**params)
