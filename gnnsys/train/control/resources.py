"""Ray resources each actor of a run asks for."""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass

__all__ = ["Resources", "trainer_cpus"]


@dataclass(frozen=True, slots=True)
class Resources:
    """Ray resources per actor; fractional CPUs let 2P actors share a small machine.

    Attributes:
        worker_cpus: Logical CPUs per trainer actor.
        owner_cpus: Logical CPUs per shard-owner actor.
    """

    worker_cpus: float = 1.0
    owner_cpus: float = 0.5


def trainer_cpus(threads: int | None, parts: int, owner_cpus: float) -> int:
    """Logical CPUs each trainer asks Ray for (it computes on them, less one when prefetching).

    ``threads`` (``--threads``) when given; else this machine's cores over the parts (at least
    1), and, when Ray is already running, no more than its CPUs over the parts less each
    owner's share (so every actor of the run can be scheduled on a joined cluster).
    """
    if threads is not None:
        return threads
    fit = (os.cpu_count() or 1) // parts
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        total = float(ray.cluster_resources().get("CPU", 0.0))
        fit = min(fit, math.floor(total / parts - owner_cpus))
    return max(1, fit)
