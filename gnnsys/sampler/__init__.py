"""Stage 4, sampler: seed gids -> ``SampledSubgraph`` (hop-sliced blocks, seeds first).

``NeighborSampler`` asks a ``NeighborSource`` for neighbors once per hop; ``CSRNeighborSource``
serves the whole graph or one shard from memory, and ``gnnsys.train.remote.routed`` serves remote
owners. Draws are counter-based (``gnnsys.sampler.draw``), so every source draws identically.
A ``DegreeSource`` (``DegreeTable``) stamps the blocks with whole-graph in-degrees (GCN).
"""

from __future__ import annotations

from gnnsys.sampler.base import NeighborSource, Sampler
from gnnsys.sampler.csr_source import CSRNeighborSource
from gnnsys.sampler.degree import DegreeSource, DegreeTable, with_in_degree
from gnnsys.sampler.draw import batch_seed
from gnnsys.sampler.neighbor import NeighborSampler

__all__ = [
    "CSRNeighborSource",
    "DegreeSource",
    "DegreeTable",
    "NeighborSampler",
    "NeighborSource",
    "Sampler",
    "batch_seed",
    "with_in_degree",
]
