"""Feature transforms applied to a loaded ``Graph`` before it is partitioned.

``FEATURE_NORMS`` maps a name to a function ``Graph -> Graph`` (``DataConfig.feature_norm``,
``--feature-norm``). ``row`` is Kipf & Welling's preprocessing for the Planetoid citation graphs
and PyG's ``NormalizeFeatures``: every feature row divided by its sum (rows summing to 0 stay
0). It is applied once, in the process that partitions, so the store holds the transformed rows
and no worker pays for it; it costs one float32 copy of ``x``.

Shape legend: ``N`` nodes, ``F`` features.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from gnnsys.types import Graph

__all__ = ["FEATURE_NORMS", "normalize_rows"]


def normalize_rows(graph: Graph) -> Graph:
    """``graph`` with ``x_NF / max(x_NF.sum(1), 1)`` (PyG ``NormalizeFeatures``); no x: as is."""
    if graph.x is None:
        return graph
    x_NF = np.asarray(graph.x, dtype=np.float32)
    sums_N = x_NF.sum(axis=1, keepdims=True, dtype=np.float64)
    scaled = (x_NF / np.maximum(sums_N, 1.0)).astype(np.float32)
    return replace(graph, x=scaled)


def _identity(graph: Graph) -> Graph:
    return graph


FEATURE_NORMS: dict[str, Callable[[Graph], Graph]] = {"none": _identity, "row": normalize_rows}
"""Feature normalisation name -> transform."""
