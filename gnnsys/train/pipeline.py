"""The training step's producer: batches ``i+1 .. i+K`` are prepared while batch ``i`` computes.

A step has stages with typed records between them: *seeds -> sample -> fetch -> transfer ->
compute -> sync*. The first three never depend on the weights (a batch's seeds and sampler
seed are functions of the run seed and the batch's coordinates; feature rows, cache admission
and owner partial sums depend only on the order of the fetches), so a :class:`Prefetcher` runs
them on one producer thread, in batch order, up to ``depth`` batches ahead of the compute loop.
The weights, losses, ledger and cache counters are therefore bit-identical at every depth:
only the time at which a batch is prepared moves. ``depth == 0`` prepares each batch inline,
the synchronous step.

Contract:

* **Bounded.** At most ``depth`` prepared batches wait in the queue (plus the one the producer
  is preparing), so prefetching costs at most ``depth + 1`` batches of memory.
* **Errors travel.** An exception in the producer is re-raised by the compute loop at the batch
  it failed on, with the producer's traceback (the same exception object).
* **Shutdown joins.** :meth:`Prefetcher.close` (also on leaving the ``with`` block, error or not)
  tells the producer to stop after its current batch, drains the queue so it cannot block on a
  full one, and joins it. A producer stuck in an owner call leaves when that call's deadline
  fires; ``close`` waits ``join_s`` for it and logs if it is still running.
* **No deadlock with collectives.** The producer only samples and fetches (owner calls with
  deadlines); the collectives (gradient allreduce) stay on the compute loop, so a rank that
  raises leaves its peers' allreduce to its own timeout, as without prefetching.

The compute loop's *stall* is the time it waited for its next batch: at ``depth == 0`` that is
the whole sample and fetch time, with prefetching only what the producer had not yet hidden.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from torch import Tensor

__all__ = ["STAGES", "PreparedBatch", "Prefetcher", "StageClock"]

log = logging.getLogger(__name__)

STAGES = ("sample", "fetch", "transfer", "compute", "sync")
"""Stages of a training step, in order; each is timed on the thread that runs it."""

T = TypeVar("T")


@dataclass(slots=True, eq=False)
class PreparedBatch:
    """One batch after the weight-free stages (what the producer hands the compute loop).

    Attributes:
        index: The batch's position in the epoch.
        pos_B: ``[B]`` positions of its items in the rank's train items (may be empty).
        batch_seed: Its sampler seed (``batch_seed_for``).
        sub: The sampled subgraph (``None`` for an empty batch).
        forward: The forward pass over the fetched inputs, or ``None`` when the inputs depend
            on the weights and are fetched by the compute loop (learnable embeddings).
        extra: What a trainer variant adds (a link batch's pairs and negatives).
        seconds: Time of the stages it went through (``sample``, ``fetch``, ``transfer``).
    """

    index: int
    pos_B: Tensor
    batch_seed: int
    sub: Any = None
    forward: Callable[[], Tensor] | None = None
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


class _Failed:
    """The producer's exception, carried through the queue to the compute loop."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


_DONE = object()


class Prefetcher(Generic[T]):
    """Yields ``prepare(i)`` for ``i`` in ``range(count)``, prepared up to ``depth`` ahead.

    Use as a context manager so the producer is joined whatever happens in the loop::

        with Prefetcher(prepare, count, depth) as batches:
            for batch in batches:
                ...

    Args:
        prepare: Makes item ``i``; runs on the producer thread (inline at ``depth == 0``).
        count: Items to make.
        depth: Items prepared ahead of the consumer (0: none, prepared on demand).
        name: Thread name, for tracebacks and ``py-spy``.
        join_s: Seconds ``close`` waits for a producer still inside ``prepare``.
    """

    def __init__(
        self,
        prepare: Callable[[int], T],
        count: int,
        depth: int,
        *,
        name: str = "gnnsys-prefetch",
        join_s: float = 30.0,
    ) -> None:
        if depth < 0:
            raise ValueError(f"prefetch depth {depth}; choose 0 (synchronous) or more")
        self.prepare, self.count, self.depth, self.join_s = prepare, count, depth, join_s
        self.stall = 0.0
        self._next = 0
        self._stop = threading.Event()
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max(depth, 1))
        self._thread: threading.Thread | None = None
        if depth > 0 and count > 0:
            self._thread = threading.Thread(target=self._produce, name=name, daemon=True)
            self._thread.start()

    def __enter__(self) -> Prefetcher[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[T]:
        return self

    def __next__(self) -> T:
        if self._next >= self.count:
            raise StopIteration
        start = time.perf_counter()
        try:
            if self._thread is None:
                return self.prepare(self._next)
            item = self._take()
        finally:
            self.stall += time.perf_counter() - start
            self._next += 1
        if isinstance(item, _Failed):
            self._next = self.count  # nothing follows a failed batch
            raise item.error
        return item  # type: ignore[no-any-return]

    def _take(self) -> Any:
        """The next queued item; a producer that died without a word is an error here."""
        assert self._thread is not None
        while True:
            try:
                item = self._queue.get(timeout=1.0)
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    return _Failed(RuntimeError("the prefetch thread ended without a batch"))
                continue
            if item is _DONE:
                return _Failed(RuntimeError(f"the prefetch thread stopped at {self._next}"))
            return item

    def _produce(self) -> None:
        try:
            for i in range(self.count):
                if self._stop.is_set():
                    return
                if not self._put(self.prepare(i)):
                    return
        except BaseException as err:  # noqa: BLE001 - re-raised by the consumer, traceback kept
            self._put(_Failed(err))
            return
        self._put(_DONE)

    def _put(self, item: Any) -> bool:
        """Queue ``item`` unless told to stop; False when stopped."""
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def close(self) -> None:
        """Stop the producer after its current item, free the queue and join it."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is None:
            return
        deadline = time.monotonic() + self.join_s
        while thread.is_alive() and time.monotonic() < deadline:
            self._drain()
            thread.join(timeout=0.05)
        self._drain()
        if thread.is_alive():
            log.warning(
                "prefetch thread %s still inside a batch after %.0f s; left to end on its own",
                thread.name,
                self.join_s,
            )

    def _drain(self) -> None:
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                return
