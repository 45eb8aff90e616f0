"""Feature transforms applied to a loaded graph before it is partitioned.

``FEATURE_NORMS`` maps a name to a function ``Graph -> Graph`` (``DataConfig.feature_norm``,
``--feature-norm``); ``per_type_feature_norm`` applies the same transform to every feature table of
a ``HeteroGraph`` (each node type's rows on their own). ``row`` is Kipf & Welling's
preprocessing for the Planetoid citation graphs and PyG's ``NormalizeFeatures``: every feature
row divided by its sum (rows summing to 0 stay 0). It is applied once, in the process that
partitions, so the store holds the transformed rows and no worker pays for it; it costs one
float32 copy of ``x``.

Shape legend: ``N`` nodes, ``F`` features.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from gnnsys.types import Graph
from gnnsys.types.relations import HeteroGraph

__all__ = ["FEATURE_NORMS", "normalize_rows", "per_type_feature_norm"]


def _row_sums(x_NF: np.ndarray) -> np.ndarray:
    """``x_NF / max(x_NF.sum(1), 1)`` as float32 (PyG ``NormalizeFeatures``)."""
    x_NF = np.asarray(x_NF, dtype=np.float32)
    sums_N = x_NF.sum(axis=1, keepdims=True, dtype=np.float64)
    out: np.ndarray = (x_NF / np.maximum(sums_N, 1.0)).astype(np.float32)
    return out


def normalize_rows(graph: Graph) -> Graph:
    """``graph`` with ``x_NF / max(x_NF.sum(1), 1)`` (PyG ``NormalizeFeatures``); no x: as is."""
    if graph.x is None:
        return graph
    return replace(graph, x=_row_sums(graph.x))


def per_type_feature_norm(graph: HeteroGraph, name: str) -> HeteroGraph:
    """``graph`` with ``FEATURE_NORMS[name]`` applied to each featured type's rows.

    Raises:
        ValueError: An unknown ``name``.
    """
    if name not in FEATURE_NORMS:
        raise ValueError(f"feature_norm={name!r}; choose one of {sorted(FEATURE_NORMS)}")
    if name == "none":
        return graph
    nodes = {
        t: s if s.x is None else replace(s, x=_TABLE_NORMS[name](s.x))
        for t, s in graph.nodes.items()
    }
    return replace(graph, nodes=nodes)


def _identity(graph: Graph) -> Graph:
    return graph


FEATURE_NORMS: dict[str, Callable[[Graph], Graph]] = {"none": _identity, "row": normalize_rows}
"""Feature normalisation name -> transform."""

_TABLE_NORMS: dict[str, Callable[[np.ndarray], np.ndarray]] = {"row": _row_sums}
"""The same transforms on one feature table (``per_type_feature_norm``)."""
