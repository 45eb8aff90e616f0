"""``OrderedMap``: ``map(fn, items)`` on worker threads, results in input order, bounded.

The sampler and the loader use it to prepare whole batches on several threads: each batch is
a few milliseconds of numpy work that releases the GIL inside every array operation, so
batches on two threads run on two cores, while a single batch is too short to split without
the hand-offs eating the gain.

Flow control: at most ``capacity`` items are taken from ``items`` and not yet consumed (running
or finished), so memory stays bounded when the consumer is slower. Items are pulled from the
input iterator under a lock (iterators are not thread-safe) and lazily, so an endless iterator
is fine.

Shutdown: ``close()`` (also called on the first error, at exhaustion and when the iterator is
garbage collected) stops the workers; a worker inside ``fn`` finishes that item first, so
``close`` waits at most one item's time. The workers reference only the shared ``_State``, never
the iterator, so dropping the iterator does collect it and stop them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

__all__ = ["OrderedMap"]

_T = TypeVar("_T")
_R = TypeVar("_R")


class _State(Generic[_T, _R]):
    """What the workers share with the consumer (guarded by ``cond``)."""

    def __init__(self, fn: Callable[[_T], _R], items: Iterator[_T], capacity: int) -> None:
        self.fn, self.items, self.capacity = fn, items, capacity
        self.cond = threading.Condition()
        self.taken = 0  # items pulled from ``items``
        self.consumed = 0  # results handed to the consumer
        self.results: dict[int, tuple[bool, _R | BaseException]] = {}
        self.exhausted = False  # ``items`` raised StopIteration (or an error)
        self.closed = False

    def take(self) -> tuple[int, _T] | None:
        """The next item and its index, once there is room; ``None`` when the work is over."""
        with self.cond:
            while not (self.closed or self.exhausted) and (
                self.taken - self.consumed >= self.capacity
            ):
                self.cond.wait()
            if self.closed or self.exhausted:
                return None
            index = self.taken
            try:
                item = next(self.items)
            except StopIteration:
                self.exhausted = True
                self.cond.notify_all()
                return None
            except BaseException as error:  # the input failed: the consumer re-raises it
                self.exhausted = True
                self.taken += 1
                self.results[index] = (False, error)
                self.cond.notify_all()
                return None
            self.taken += 1
            return index, item

    def work(self) -> None:
        """A worker's loop: take an item, run ``fn`` outside the lock, post the result."""
        while (job := self.take()) is not None:
            index, item = job
            try:
                result: tuple[bool, _R | BaseException] = (True, self.fn(item))
            except BaseException as error:  # thread boundary: the consumer re-raises it
                result = (False, error)
            with self.cond:
                self.results[index] = result
                self.cond.notify_all()


class OrderedMap(Iterator[_R]):
    """Iterator over ``fn(item)`` for every item, in order, computed by ``num_workers`` threads.

    Args:
        fn: Function of one item; an exception is re-raised by ``__next__`` at its position,
            after which the iterator is closed.
        items: Input iterator (pulled lazily, one item at a time, under a lock).
        num_workers: Worker threads (daemon threads named ``{name}-{i}``).
        capacity: Items taken but not yet consumed, at most (``>= num_workers``).
        name: Thread name prefix.

    Raises:
        ValueError: ``num_workers < 1`` or ``capacity < num_workers``.
    """

    def __init__(
        self,
        fn: Callable[[_T], _R],
        items: Iterator[_T],
        *,
        num_workers: int,
        capacity: int,
        name: str,
    ) -> None:
        if num_workers < 1 or capacity < num_workers:
            raise ValueError(
                f"need num_workers >= 1 and capacity >= num_workers, got {num_workers}, {capacity}"
            )
        self._state: _State[_T, _R] = _State(fn, items, capacity)
        self._threads = [
            threading.Thread(target=self._state.work, daemon=True, name=f"{name}-{i}")
            for i in range(num_workers)
        ]
        for thread in self._threads:
            thread.start()

    def __next__(self) -> _R:
        state = self._state
        error: BaseException | None = None
        with state.cond:
            while True:
                if state.consumed in state.results:
                    ok, value = state.results.pop(state.consumed)
                    state.consumed += 1
                    state.cond.notify_all()  # room for one more item
                    if ok:
                        return value  # type: ignore[return-value]  # ok: value is fn's result
                    assert isinstance(value, BaseException)
                    error = value
                    break
                if state.closed or (state.exhausted and state.consumed >= state.taken):
                    break
                state.cond.wait()
        self.close()  # an item failed, the input ran out, or closed: join the workers
        if error is not None:
            raise error
        raise StopIteration

    def close(self) -> None:
        """Stop the workers and wait for them (at most one ``fn`` call each)."""
        state = self._state
        with state.cond:
            state.closed = True
            state.results.clear()
            state.cond.notify_all()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join()

    def __del__(self) -> None:
        if hasattr(self, "_state"):  # __init__ may have raised (bad sizes) before setting it
            self.close()
