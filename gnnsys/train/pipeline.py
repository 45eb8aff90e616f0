"""The pipelined training step: batches ``i+1 .. i+K`` are prepared while batch ``i`` computes.

A step has stages with typed records between them: *seeds -> sample -> fetch -> transfer ->
compute -> sync*. The first three never depend on the weights (a batch's seeds and sampler
seed are functions of the run seed and the batch's coordinates; feature rows, cache admission
and owner partial sums depend only on the order of the fetches), so a :class:`Prefetcher` runs
sampling on one thread and fetching (with the transfer) on another, each in batch order, up to
``depth`` batches ahead of the next stage: batch ``i+2`` is sampled while ``i+1`` is fetched
and ``i`` computes, so an owner's latency in one stage does not hold up the other. Each stage
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

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

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
    """A stage's exception, carried down the queues to the compute loop."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


_DONE = object()


class Prefetcher(Generic[T]):
    """Yields item ``i`` for ``i`` in ``range(count)``, prepared up to ``depth`` ahead.

    Item ``i`` is ``then[-1](...then[0](first(i)))``: a chain of stages. With ``depth > 0``
    each stage runs on a thread of its own, joined to the next by a queue of ``depth`` items,
    so a batch can be fetched while the next one is sampled and the one before computes. Every
    stage handles the items in order, one at a time, so what a stage computes (and any state it
    keeps, such as a cache) is the same as at ``depth == 0``, where the chain runs inline.

    Use as a context manager so the threads are joined whatever happens in the loop::

        with Prefetcher(sample, count, depth, then=(fetch,)) as batches:
            for batch in batches:
                ...

    Args:
        first: Makes item ``i`` (the first stage).
        count: Items to make.
        depth: Items each queue holds ahead of its consumer (0: none, made on demand).
        then: Later stages, each taking the previous stage's item.
        name: Prefix of the threads' names, for tracebacks and ``py-spy``.
        join_s: Seconds ``close`` waits for a stage still inside its work.
    """

    def __init__(
        self,
        first: Callable[[int], Any],
        count: int,
        depth: int,
        *,
        then: Sequence[Callable[[Any], Any]] = (),
        name: str = "gnnsys-prefetch",
        join_s: float = 30.0,
    ) -> None:
        if depth < 0:
            raise ValueError(f"prefetch depth {depth}; choose 0 (synchronous) or more")
        self.first, self.then, self.count, self.depth = first, tuple(then), count, depth
        self.join_s = join_s
        self.stall = 0.0
        self._next = 0
        self._stop = threading.Event()
        stages = 1 + len(self.then)
        self._queues: list[queue.Queue[Any]] = [
            queue.Queue(maxsize=max(depth, 1)) for _ in range(stages)
        ]
        self._threads: list[threading.Thread] = []
        if depth > 0 and count > 0:
            targets = [self._source, *(self._relay(k) for k in range(1, stages))]
            self._threads = [
                threading.Thread(target=fn, name=f"{name}-{k}", daemon=True)
                for k, fn in enumerate(targets)
            ]
            self._feeders = tuple(self._threads)  # kept after close(): the relays read it
            for thread in self._threads:
                thread.start()

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
            if not self._threads:
                item = self.first(self._next)
                for stage in self.then:
                    item = stage(item)
                return cast(T, item)
            item = self._take(self._queues[-1], self._threads[-1])
        finally:
            self.stall += time.perf_counter() - start
            self._next += 1
        if isinstance(item, _Failed):
            self._next = self.count  # nothing follows a failed batch
            raise item.error
        if item is _DONE:
            self._next = self.count
            raise RuntimeError(f"the prefetch threads stopped before item {self._next - 1}")
        return cast(T, item)

    def _take(self, source: queue.Queue[Any], feeder: threading.Thread) -> Any:
        """The next item of ``source``; a feeder that died without a word is an error here."""
        while True:
            try:
                return source.get(timeout=1.0)
            except queue.Empty:
                if not feeder.is_alive() and source.empty():
                    return _Failed(RuntimeError(f"{feeder.name} ended without an item"))

    def _source(self) -> None:
        """The first stage's thread: items ``0 .. count - 1``."""
        out = self._queues[0]
        try:
            for i in range(self.count):
                if self._stop.is_set() or not self._put(out, self.first(i)):
                    return
        except BaseException as err:  # noqa: BLE001 - re-raised by the consumer, traceback kept
            self._put(out, _Failed(err))
            return
        self._put(out, _DONE)

    def _relay(self, k: int) -> Callable[[], None]:
        """The thread body of stage ``k`` (>= 1): previous queue -> stage -> next queue."""
        stage, source, out = self.then[k - 1], self._queues[k - 1], self._queues[k]

        def run() -> None:
            feeder = self._feeders[k - 1]
            while not self._stop.is_set():
                item = self._take(source, feeder)
                if isinstance(item, _Failed) or item is _DONE:
                    self._put(out, item)  # passed on: the consumer raises or stops
                    return
                try:
                    item = stage(item)
                except BaseException as err:  # noqa: BLE001 - re-raised by the consumer
                    self._put(out, _Failed(err))
                    return
                if not self._put(out, item):
                    return

        return run

    def _put(self, out: queue.Queue[Any], item: Any) -> bool:
        """Queue ``item`` unless told to stop; False when stopped."""
        while not self._stop.is_set():
            try:
                out.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def close(self) -> None:
        """Stop every stage after its current item, free the queues and join the threads."""
        self._stop.set()
        threads, self._threads = self._threads, []
        deadline = time.monotonic() + self.join_s
        for thread in threads:
            while thread.is_alive() and time.monotonic() < deadline:
                self._drain()
                thread.join(timeout=0.05)
        self._drain()
        for thread in threads:
            if thread.is_alive():
                log.warning(
                    "prefetch thread %s still inside a batch after %.0f s; left to end on its own",
                    thread.name,
                    self.join_s,
                )

    def _drain(self) -> None:
        for q in self._queues:
            while True:
                try:
                    q.get_nowait()
                except queue.Empty:
                    break
