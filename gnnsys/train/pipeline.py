"""The pipelined training step: batches ``i+1 .. i+K`` are prepared while batch ``i`` computes.

A step has stages with typed records between them: *seeds -> sample -> fetch -> transfer ->
compute -> sync*. The first three never depend on the weights (a batch's seeds and sampler
seed are functions of the run seed and the batch's coordinates; feature rows, cache admission
and owner partial sums depend only on the order of the fetches), so a :class:`Prefetcher` runs
them on a producer thread, in batch order, up to ``depth`` batches ahead of the compute loop.
Where owner calls leave the process, sampling and fetching (with the transfer) run on a thread
each: batch ``i+2`` is sampled while ``i+1`` is fetched and ``i`` computes, so an owner's
latency in one stage does not hold up the other. Where they stay in the process (local reads,
the in-process executor) both stages are CPU-bound and one thread runs them in turn, which
contends less with the compute loop (``gnnsys.train.worker.stage_threads``). Each stage
sees the batches in the same order as the synchronous step, so the weights, losses, ledger and
cache counters are bit-identical at every depth: only the time at which a batch is prepared
moves. ``depth == 0`` runs every stage inline, the synchronous step.

Contract:

* **Bounded.** At most ``depth`` batches wait between two stages (plus the one each stage is
  working on), so prefetching costs a few batches of memory, not an epoch's.
* **Errors travel.** An exception in a stage is re-raised by the compute loop at the batch it
  failed on, with the stage's traceback (the same exception object).
* **Shutdown joins.** :meth:`Prefetcher.close` (also on leaving the ``with`` block, error or not)
  tells every stage to stop after its current batch, drains the queues so none blocks on a
  full one, and joins the threads. A stage stuck in an owner call leaves when that call's
  deadline fires; ``close`` waits ``join_s`` for it and logs if it is still running.
* **No deadlock with collectives.** The stages only sample and fetch (owner calls with
  deadlines); the collectives (gradient allreduce) stay on the compute loop, so a rank that
  raises leaves its peers' allreduce to its own timeout, as without prefetching.

The compute loop's *stall* is the time it waited for its next batch: at ``depth == 0`` that is
the whole sample and fetch time, with prefetching only what the stages had not yet hidden.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from gnnsys.prefetch import Prefetcher
from gnnsys.train.device import StepInputs

__all__ = ["STAGES", "PreparedBatch", "Prefetcher", "StageClock"]


STAGES = ("sample", "fetch", "transfer", "compute", "sync")
"""Stages of a training step, in order; each is timed on the thread that runs it."""


@dataclass(slots=True, eq=False)
class PreparedBatch:
    """One batch after the weight-free stages (what the producer hands the compute loop).

    Attributes:
        index: The batch's position in the epoch.
        pos_B: ``[B]`` positions of its items in the rank's train items (may be empty).
        batch_seed: Its sampler seed (``batch_seed_for``).
        sub: The sampled subgraph (``None`` for an empty batch).
        inputs: The forward pass over the fetched inputs (on the step's device after the
            transfer stage), or ``None`` when the inputs depend on the weights and are fetched
            by the compute loop (learnable embeddings).
        extra: What a trainer variant adds (a link batch's pairs and negatives).
        seconds: Time of the stages it went through (``sample``, ``fetch``, ``transfer``).
    """

    index: int
    pos_B: Tensor
    batch_seed: int
    sub: Any = None
    inputs: StepInputs | None = None
    extra: Any = None
    seconds: dict[str, float] = field(default_factory=dict)


class StageClock:
    """Busy seconds per stage plus the compute loop's stall and its wall time, for one epoch."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys((*STAGES, "stall"), 0.0)
        self._start = time.perf_counter()

    def add(self, stage: str, seconds: float) -> None:
        """Count ``seconds`` of busy time in ``stage``."""
        self.seconds[stage] += seconds

    def absorb(self, batch: PreparedBatch) -> None:
        """Count the producer-side stage times a prepared batch carries."""
        for stage, value in batch.seconds.items():
            self.seconds[stage] += value

    def finish(self) -> dict[str, float]:
        """The epoch's split: stages, ``stall``, ``loop`` (wall) and ``overlap`` (stages / wall).

        ``overlap`` above 1 means stages ran at the same time (prefetching hid some of them);
        at ``depth == 0`` it is at most 1.
        """
        wall = time.perf_counter() - self._start
        busy = sum(self.seconds[s] for s in STAGES)
        return {**self.seconds, "loop": wall, "overlap": busy / wall if wall > 0 else 0.0}
