"""How many torch threads a training process computes with: the CPUs Ray gave it.

The driver asks Ray for each trainer's CPUs (``--threads``, or the machine's cores over the
parts: ``gnnsys.train.control.resources.trainer_cpus``); a trainer actor then runs torch's
intra-op pool on the CPUs it was assigned (one of them left to its prefetching stages when it
prefetches), so one worker on a 2-core machine uses both cores and ``P`` workers on ``C`` cores
do not oversubscribe them. A shard owner is assigned half a CPU and runs one thread: its work
(row gathers for its peers) is memory-bound and runs while its own trainer waits or prefetches.
Outside a Ray actor (the in-process executor, tests) nothing here changes the process: the
caller decides.
"""

from __future__ import annotations

import math
import sys

import torch

__all__ = ["actor_cpus", "use_actor_threads"]


def actor_cpus() -> float | None:
    """Logical CPUs Ray assigned to this actor, or ``None`` outside a Ray actor."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    context = ray.get_runtime_context()
    if context.get_actor_id() is None:  # the driver, or a plain task
        return None
    return float(context.get_assigned_resources().get("CPU", 1.0))


def use_actor_threads(reserve: int = 0) -> int | None:
    """Inside a Ray actor: torch intra-op threads = its assigned CPUs less ``reserve`` (>= 1).

    A trainer that prefetches reserves one CPU for its stage threads (sampling and fetching run
    beside the compute, mostly in single-threaded numpy): with every assigned CPU in torch's
    pool as well, the threads oversubscribe the cores and the step slows down. Outside a Ray
    actor the process is left as it is and ``None`` is returned.
    """
    cpus = actor_cpus()
    if cpus is None:
        return None
    threads = max(1, math.floor(cpus + 1e-9) - reserve)
    torch.set_num_threads(threads)
    return threads
