"""OrderedMap: results in input order, bounded look-ahead, errors at their position, clean stop."""

from __future__ import annotations

import gc
import random
import threading
import time
from collections.abc import Iterator

import pytest

from gnnsys.prefetch.ordered import OrderedMap


def _alive(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(name) and t.is_alive()]


def _slow_square(x: int) -> int:
    time.sleep(random.random() * 0.002)  # finish out of order
    return x * x


@pytest.mark.parametrize("num_workers", [1, 2, 4])
def test_results_come_in_input_order(num_workers: int) -> None:
    got = list(
        OrderedMap(
            _slow_square, iter(range(60)), num_workers=num_workers, capacity=8, name="t-order"
        )
    )
    assert got == [x * x for x in range(60)]
    assert not _alive("t-order")


def test_empty_input() -> None:
    assert list(OrderedMap(_slow_square, iter([]), num_workers=2, capacity=2, name="t-empty")) == []
    assert not _alive("t-empty")


def test_never_more_than_capacity_ahead() -> None:
    pulled = 0

    def items() -> Iterator[int]:
        nonlocal pulled
        for x in range(100):
            pulled += 1
            yield x

    it = OrderedMap(_slow_square, items(), num_workers=3, capacity=5, name="t-cap")
    assert next(it) == 0
    time.sleep(0.05)  # let the workers run as far ahead as they may
    assert pulled == 1 + 5  # one consumed, five in flight or done
    it.close()
    assert not _alive("t-cap")


def test_error_is_raised_at_its_position_and_stops_the_workers() -> None:
    def fn(x: int) -> int:
        if x == 7:
            raise KeyError("item 7")
        return x

    it = OrderedMap(fn, iter(range(50)), num_workers=2, capacity=4, name="t-err")
    assert [next(it) for _ in range(7)] == list(range(7))
    with pytest.raises(KeyError, match="item 7"):
        next(it)
    assert not _alive("t-err")
    with pytest.raises(StopIteration):
        next(it)


def test_error_in_the_input_iterator_is_raised() -> None:
    def items() -> Iterator[int]:
        yield 1
        raise OSError("input broke")

    it = OrderedMap(_slow_square, items(), num_workers=2, capacity=2, name="t-input")
    assert next(it) == 1
    with pytest.raises(OSError, match="input broke"):
        next(it)


def test_dropping_the_iterator_stops_the_workers() -> None:
    it = OrderedMap(_slow_square, iter(range(10**6)), num_workers=2, capacity=2, name="t-drop")
    next(it)
    del it
    gc.collect()
    deadline = time.monotonic() + 5
    while _alive("t-drop") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _alive("t-drop")


def test_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError, match="num_workers"):
        OrderedMap(_slow_square, iter([]), num_workers=0, capacity=1, name="t-bad")
    with pytest.raises(ValueError, match="capacity"):
        OrderedMap(_slow_square, iter([]), num_workers=3, capacity=2, name="t-bad")
