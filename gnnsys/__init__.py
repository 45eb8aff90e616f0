"""gnnsys: distributed GNN training on Ray with cached, compressed halo features.

The public API is the names in ``__all__``; everything else may change without notice.
Importing gnnsys has no side effects: no environment changes, no CUDA init, no ``ray.init``.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from gnnsys.datasets import load as load_dataset
from gnnsys.errors import GnnsysError, PartitionStoreError, WorkerFailedError
from gnnsys.types import Assignment, Block, Graph, PartitionBook, PartitionShard, SampledSubgraph

try:
    __version__ = version("gnnsys")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = [
    "Assignment",
    "Block",
    "GnnsysError",
    "Graph",
    "PartitionBook",
    "PartitionShard",
    "PartitionStoreError",
    "SampledSubgraph",
    "WorkerFailedError",
    "__version__",
    "load_dataset",
]
