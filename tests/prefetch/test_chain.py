"""``Prefetcher``: in-order stages on threads, bounded, errors and shutdown as documented."""

from __future__ import annotations

import threading
import time
import traceback

import pytest

from gnnsys.prefetch import Prefetcher


def _prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("gnnsys-prefetch")]


@pytest.mark.parametrize("depth", [0, 1, 2, 4])
def test_items_come_in_order_and_never_more_than_depth_ahead(depth: int) -> None:
    made: list[int] = []
    taken: list[int] = []
    ahead: list[int] = []

    def prepare(i: int) -> int:
        made.append(i)
        ahead.append(len(made) - len(taken))
        return i * i

    with Prefetcher(prepare, 12, depth) as feed:
        for item in feed:
            taken.append(item)
            time.sleep(0.002)  # let the producer run ahead as far as it may
    assert taken == [i * i for i in range(12)] and made == list(range(12))
    # the producer holds one item while up to `depth` wait in the queue (1 inline at depth 0)
    assert max(ahead) <= depth + 1
    assert not _prefetch_threads()


def test_a_producer_error_reaches_the_consumer_with_its_traceback() -> None:
    def prepare(i: int) -> int:
        if i == 3:
            raise KeyError(f"batch {i} is broken")
        return i

    got: list[int] = []
    with pytest.raises(KeyError, match="batch 3 is broken") as info:
        with Prefetcher(prepare, 10, 2) as feed:
            for item in feed:
                got.append(item)
    assert got == [0, 1, 2]  # the batches before the failure, in order
    text = "".join(traceback.format_exception(info.value))
    assert "in prepare" in text and "_produce" in text  # the producer's own frames
    assert not _prefetch_threads()


def test_a_consumer_error_stops_and_joins_the_producer() -> None:
    made: list[int] = []

    def prepare(i: int) -> int:
        made.append(i)
        return i

    with pytest.raises(RuntimeError, match="step 1 failed"):
        with Prefetcher(prepare, 1000, 3) as feed:
            for item in feed:
                if item == 1:
                    raise RuntimeError("step 1 failed")
    assert not _prefetch_threads()
    assert len(made) <= 1 + 1 + 3 + 1  # taken, failed, queued, in hand: never the whole epoch


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_a_chain_of_stages_sees_every_item_in_order(depth: int) -> None:
    seen: dict[str, list[int]] = {"first": [], "second": []}

    def first(i: int) -> int:
        seen["first"].append(i)
        return i

    def second(i: int) -> int:
        seen["second"].append(i)  # a stage with state (a cache) sees the synchronous order
        if i == 7:
            raise OSError("stage two failed at 7")
        return -i

    with pytest.raises(OSError, match="stage two failed at 7") as info:
        with Prefetcher(first, 20, depth, then=(second,)) as feed:
            got = [item for item in feed]
    assert "in second" in "".join(traceback.format_exception(info.value))
    assert seen["second"] == list(range(8))
    assert seen["first"] == list(range(len(seen["first"])))
    assert not _prefetch_threads()
    with Prefetcher(first, 5, depth, then=(lambda i: i * 10, lambda i: i + 1)) as feed:
        got = list(feed)
    assert got == [1, 11, 21, 31, 41]


def test_stall_is_the_wait_for_a_slow_producer() -> None:
    def prepare(i: int) -> int:
        time.sleep(0.02)
        return i

    with Prefetcher(prepare, 5, 2) as feed:
        assert list(feed) == [0, 1, 2, 3, 4]
    assert feed.stall >= 0.05  # the consumer did nothing: it waited for most of the producer
    with pytest.raises(ValueError, match="prefetch depth -1"):
        Prefetcher(prepare, 1, -1)


@pytest.mark.parametrize("workers", [2, 3])
def test_a_pure_first_stage_on_several_threads_delivers_in_order(workers: int) -> None:
    def first(i: int) -> int:
        time.sleep(0.001 * (i % 3))  # finish out of order
        return i

    with Prefetcher(first, 30, 4, then=(lambda i: i + 100,), workers=workers) as feed:
        assert list(feed) == [i + 100 for i in range(30)]
    assert not _prefetch_threads()
    with pytest.raises(ValueError, match="workers=0"):
        Prefetcher(first, 1, 1, workers=0)
