"""KaHIP and Mt-KaHyPar, when installed (the ``bench`` extra: ``pip install 'gnnsys[bench]'``).

Both take the same symmetric, loop-free CSR that METIS gets (``metis.metis_csr``). They are
imported lazily, so gnnsys works without them; calling one that is missing raises an
``ImportError`` naming the extra.

Shape legend: ``N`` nodes, ``E`` edges, ``P`` parts.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

import numpy as np

from gnnsys.partitioners.base import check_num_parts, make_assignment
from gnnsys.partitioners.metis import metis_csr
from gnnsys.types import Assignment, Graph

HAS_KAHIP = importlib.util.find_spec("kahip") is not None
HAS_MTKAHYPAR = importlib.util.find_spec("mtkahypar") is not None

KAHIP_MODES = ("fast", "eco", "strong", "fastsocial", "ecosocial", "strongsocial")
MTKAHYPAR_PRESETS = ("deterministic", "default", "quality")

_MT_STATE: dict[str, Any] = {}  # the Mt-KaHyPar Initializer may be created once per process


def _missing(package: str) -> ImportError:
    return ImportError(
        f"the {package} partitioner needs the optional package {package!r}; install the bench "
        f"extra: pip install 'gnnsys[bench]' (or pip install {package})"
    )


class KaHIP:
    """KaHIP's KaFFPa multilevel partitioner (edge-cut objective, node balance)."""

    name = "kahip"

    @dataclass(frozen=True, kw_only=True, slots=True)
    class Config:
        """KaFFPa options."""

        mode: str = "fastsocial"
        """Preset: one of ``KAHIP_MODES``; the ``*social`` ones suit power-law graphs."""
        imbalance: float = 0.03
        """Allowed node imbalance: max part size <= (1 + imbalance) * mean."""

        def __post_init__(self) -> None:
            if self.mode not in KAHIP_MODES:
                raise ValueError(f"mode={self.mode!r}; choose one of {KAHIP_MODES}")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or KaHIP.Config()

    def assign(self, graph: Graph, num_parts: int, *, seed: int = 0) -> Assignment:
        """See ``Partitioner.assign``. Raises ``ImportError`` when kahip is missing."""
        check_num_parts(graph, num_parts)
        if not HAS_KAHIP:
            raise _missing("kahip")
        import kahip

        xadj, adjncy = metis_csr(graph)
        ones = np.ones(graph.num_nodes, dtype=np.int32)
        _, blocks = kahip.kaffpa(
            ones,
            xadj.astype(np.int32),
            np.ones(adjncy.shape[0], dtype=np.int32),
            adjncy.astype(np.int32),
            num_parts,
            self.config.imbalance,
            True,
            int(seed) % (2**31),
            getattr(kahip, self.config.mode.upper()),
        )
        params = {"mode": self.config.mode, "imbalance": self.config.imbalance}
        return make_assignment(np.asarray(blocks), num_parts, self.name, seed, params)


class MtKaHyPar:
    """Mt-KaHyPar's multilevel graph partitioner, cut objective (deterministic preset)."""

    name = "mtkahypar"

    @dataclass(frozen=True, kw_only=True, slots=True)
    class Config:
        """Mt-KaHyPar options."""

        preset: str = "deterministic"
        """One of ``MTKAHYPAR_PRESETS``; only ``deterministic`` repeats for a fixed seed."""
        imbalance: float = 0.03
        """Allowed node imbalance (Mt-KaHyPar's epsilon)."""
        threads: int = 2
        """Worker threads; fixed at the first call in a process."""

        def __post_init__(self) -> None:
            if self.preset not in MTKAHYPAR_PRESETS:
                raise ValueError(f"preset={self.preset!r}; choose one of {MTKAHYPAR_PRESETS}")

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or MtKaHyPar.Config()

    def assign(self, graph: Graph, num_parts: int, *, seed: int = 0) -> Assignment:
        """See ``Partitioner.assign``. Raises ``ImportError`` when mtkahypar is missing."""
        check_num_parts(graph, num_parts)
        if not HAS_MTKAHYPAR:
            raise _missing("mtkahypar")
        import mtkahypar

        if "init" not in _MT_STATE:
            _MT_STATE["init"] = mtkahypar.initialize(self.config.threads, False)
        init = _MT_STATE["init"]
        ctx = init.context_from_preset(getattr(mtkahypar.PresetType, self.config.preset.upper()))
        ctx.set_partitioning_parameters(num_parts, self.config.imbalance, mtkahypar.Objective.CUT)
        ctx.logging = False
        mtkahypar.set_seed(int(seed) % (2**31))
        xadj, adjncy = metis_csr(graph)
        dst_E = np.repeat(np.arange(graph.num_nodes, dtype=np.int64), np.diff(xadj))
        upper = adjncy > dst_E  # each undirected edge once
        edges = np.stack([dst_E[upper], adjncy[upper]], axis=1)
        if edges.shape[0] == 0:
            part_N = np.arange(graph.num_nodes) * num_parts // graph.num_nodes
        else:
            mt_graph = init.create_graph(ctx, graph.num_nodes, edges.shape[0], edges)
            part_N = np.asarray(mt_graph.partition(ctx).get_partition())
        params = {"preset": self.config.preset, "imbalance": self.config.imbalance}
        return make_assignment(part_N, num_parts, self.name, seed, params)
