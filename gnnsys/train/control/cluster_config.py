"""``ClusterConfig``: how many workers a run has and where they run (the worker group's setting)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ClusterConfig"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterConfig:
    """How many workers and where they run."""

    parts: int = 2
    """``P``: partitions = trainers = shard owners."""
    topology: str = "auto"
    """``partitioned`` | ``replicated`` | ``auto`` (memory estimate; the choice is logged)."""
    address: str | None = None
    """Ray address to join (``ray start --head`` prints it); ``None`` starts Ray locally."""
    threads: int | None = None
    """CPUs each trainer asks Ray for and computes on, less one when it prefetches
    (``--threads``); ``None``: the machine's cores over ``parts`` with Ray (at least 1); with
    the in-process executor, the process's torch threads (default 1)."""
    owner_reads: str = "auto"
    """How a trainer reads other parts' rows and neighbour lists: ``remote`` (a call to their
    owner actor), ``local`` (the owner's code over its mapped shard files, in the trainer's
    process: same answers and ledger, none of a call's copies; every trainer needs the store's
    files on its node, e.g. one machine or shared storage), or ``auto`` (default): ``local``
    when gnnsys starts its own Ray instance (one machine: every file is on the node, as
    DistDGL reads a machine's own partitions through shared memory), ``remote`` when it joins
    a cluster (``address``)."""

    device: str = "auto"
    """Where each trainer computes (``--device``): ``cpu``, ``cuda`` (one GPU per trainer
    through Ray's GPU resources, shared when there are fewer GPUs than parts; NCCL between
    ranks with a GPU each, gloo otherwise) or ``auto`` (default): ``cuda`` where the run sees a
    GPU, else ``cpu``. Checkpoints are device-independent (``gnnsys.train.device``)."""

    def reads(self) -> str:
        """``owner_reads`` with ``auto`` resolved (see the field)."""
        if self.owner_reads != "auto":
            return self.owner_reads
        return "remote" if self.address is not None else "local"

    def __post_init__(self) -> None:
        if self.owner_reads not in ("auto", "remote", "local"):
            raise ValueError(f"owner_reads={self.owner_reads!r}; choose auto, remote or local")
        if self.device not in ("cpu", "cuda", "auto"):
            raise ValueError(f"device={self.device!r}; choose cpu, cuda or auto (--device)")
        if self.parts < 1:
            raise ValueError(f"parts={self.parts}; choose parts >= 1")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads={self.threads}; choose threads >= 1 (or leave it unset)")
        if self.topology not in ("auto", "partitioned", "replicated"):
            raise ValueError(f"topology={self.topology!r}; choose auto, partitioned or replicated")
