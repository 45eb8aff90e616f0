"""Stage 2, partitioners: ``Graph -> Assignment`` (the owner part of every node), pure.

``PARTITIONERS`` maps a strategy name to its class; each class has a frozen ``Config`` and
``assign(graph, num_parts, *, seed) -> Assignment``. ``partition`` is the one-call shortcut.
"""

from __future__ import annotations

from typing import Any

from gnnsys.partitioners.base import Partitioner
from gnnsys.partitioners.external import KaHIP, MtKaHyPar
from gnnsys.partitioners.halo import halo_of_part, khop_reach
from gnnsys.partitioners.metis import HAS_METIS, Metis
from gnnsys.partitioners.metrics import PartitionMetrics, compute_metrics
from gnnsys.partitioners.per_type import PER_TYPE_METHODS, partition_graph, partition_hetero
from gnnsys.partitioners.per_type_metrics import PerTypePartitionMetrics, compute_per_type_metrics
from gnnsys.partitioners.simple import Hash, Random, Range
from gnnsys.partitioners.streaming import Fennel, Ldg
from gnnsys.types import Assignment, Graph

__all__ = [
    "HAS_METIS",
    "PER_TYPE_METHODS",
    "PARTITIONERS",
    "Fennel",
    "Hash",
    "PerTypePartitionMetrics",
    "KaHIP",
    "Ldg",
    "Metis",
    "MtKaHyPar",
    "PartitionMetrics",
    "Partitioner",
    "Random",
    "Range",
    "compute_per_type_metrics",
    "compute_metrics",
    "halo_of_part",
    "khop_reach",
    "make_partitioner",
    "partition",
    "partition_graph",
    "partition_hetero",
]

PARTITIONERS: dict[str, type] = {
    "random": Random,
    "hash": Hash,
    "range": Range,
    "metis": Metis,
    "ldg": Ldg,
    "fennel": Fennel,
    "kahip": KaHIP,
    "mtkahypar": MtKaHyPar,
}
"""Strategy name -> partitioner class (each with a nested frozen ``Config``)."""


def make_partitioner(method: str, **cfg: Any) -> Partitioner:
    """Instantiate ``PARTITIONERS[method]`` with ``Config(**cfg)``.

    Raises:
        ValueError: Unknown method, or an option its ``Config`` does not have.
    """
    if method not in PARTITIONERS:
        raise ValueError(f"unknown partitioner {method!r}; choose one of {sorted(PARTITIONERS)}")
    cls: Any = PARTITIONERS[method]  # every registered class has a nested Config
    try:
        config = cls.Config(**cfg)
    except TypeError as err:
        raise ValueError(f"bad option for partitioner {method!r}: {err}") from err
    partitioner: Partitioner = cls(config)
    return partitioner


def partition(graph: Graph, method: str, num_parts: int, seed: int = 0, **cfg: Any) -> Assignment:
    """Split ``graph`` into ``num_parts`` with strategy ``method``.

    Example: ``partition(graph, "metis", 4, balance=("nodes", "train"))``.

    Raises:
        ValueError: Unknown method or option, or ``num_parts`` not in ``[1, N]``.
    """
    return make_partitioner(method, **cfg).assign(graph, num_parts, seed=seed)
