"""Ray resources each actor of a run asks for."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Resources"]


@dataclass(frozen=True, slots=True)
class Resources:
    """Ray resources per actor; fractional CPUs let 2P actors share a small machine.

    Attributes:
        worker_cpus: Logical CPUs per trainer actor.
        owner_cpus: Logical CPUs per shard-owner actor.
    """

    worker_cpus: float = 1.0
    owner_cpus: float = 0.5
