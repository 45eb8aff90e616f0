"""``Prefetcher``: a chain of in-order stages on threads, up to ``depth`` items ahead.

Item ``i`` of ``range(count)`` goes through ``first`` and then every later stage. With
``depth > 0`` each stage runs on a thread of its own, joined to the next by a queue of ``depth``
items; every stage after the first takes the items one at a time, in order, so a stage that
keeps state (a cache) sees exactly the synchronous order. A pure first stage (sampling: a batch
is a function of its seeds and seed) may run on ``workers`` threads at once (``OrderedMap``),
its results still in order. ``depth == 0`` runs the chain inline, item by item.

The training step (``gnnsys.train.pipeline``: sample, then fetch), the loaders'
``num_workers`` and the cache's presample pass form their batches through it. An exception in
any stage is re-raised by the consumer at that item with the stage's traceback; ``close`` (also
on leaving a ``with`` block) stops and joins every thread. The consumer's ``stall`` is the time
it waited for its next item.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Generic, TypeVar, cast

from gnnsys.prefetch.ordered import OrderedMap

__all__ = ["Prefetcher"]

log = logging.getLogger(__name__)

T = TypeVar("T")


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
        workers: Threads of the first stage (``> 1`` only for a pure ``first``: items may be
            made out of order, they are delivered in order).
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
        workers: int = 1,
        name: str = "gnnsys-prefetch",
        join_s: float = 30.0,
    ) -> None:
        if depth < 0:
            raise ValueError(f"prefetch depth {depth}; choose 0 (synchronous) or more")
        if workers < 1:
            raise ValueError(f"workers={workers}; the first stage needs at least one thread")
        self.workers, self.name = workers, name
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
        """The first stage's thread: items ``0 .. count - 1`` (made by ``workers`` threads)."""
        out = self._queues[0]
        made: Iterable[Any] = map(self.first, range(self.count))
        if self.workers > 1:
            made = OrderedMap(
                self.first,
                iter(range(self.count)),
                num_workers=self.workers,
                capacity=max(self.depth, self.workers),
                name=f"{self.name}-w",
            )
        try:
            for item in made:
                if self._stop.is_set() or not self._put(out, item):
                    return
        except BaseException as err:  # noqa: BLE001 - re-raised by the consumer, traceback kept
            self._put(out, _Failed(err))
            return
        finally:
            if isinstance(made, OrderedMap):
                made.close()
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
