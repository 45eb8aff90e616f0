"""The pipelined step: prefetching changes when a batch is prepared, never what is computed."""

from __future__ import annotations

import json
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from gnnsys.cache import CacheConfig, CodecConfig
from gnnsys.errors import WorkerFailedError
from gnnsys.models import ModelConfig, build_model
from gnnsys.sampler import CSRNeighborSource, NeighborSampler
from gnnsys.train.control.checkpoint import load_checkpoint
from gnnsys.train.control.recorder import METRICS_NAME
from gnnsys.train.control.run import train_local
from gnnsys.train.pipeline import STAGES, Prefetcher
from gnnsys.train.trainer import Trainer
from gnnsys.train.worker import FaultSpec
from gnnsys.types import Graph
from tests.train.run_configs import sbm_run


def _prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("gnnsys-prefetch")]


# ---- the Prefetcher --------------------------------------------------------------------------
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


# ---- the trainer ---------------------------------------------------------------------------
class _SlowRows:
    """A feature source that answers slowly, like a loaded owner."""

    def __init__(self, x: np.ndarray, delay_s: float) -> None:
        self.x, self.delay_s = x, delay_s

    def fetch(self, gid: torch.Tensor) -> torch.Tensor:
        time.sleep(self.delay_s)
        return torch.from_numpy(self.x[gid.numpy()])


def _trainer(graph: Graph, prefetch: int, delay_s: float = 0.0) -> Trainer:
    assert graph.x is not None and graph.y is not None and graph.train_mask is not None
    torch.manual_seed(0)
    model = build_model(ModelConfig(hidden=16), graph.num_features, graph.num_classes, 2)
    train_gid = torch.from_numpy(np.flatnonzero(graph.train_mask))
    sampler = NeighborSampler(
        NeighborSampler.Config(fanouts=(5, 5)), source=CSRNeighborSource.from_graph(graph)
    )
    return Trainer(
        Trainer.Config(lr=0.01, batch_size=8, seed=0, prefetch=prefetch),
        model=model,
        sampler=sampler,
        features=_SlowRows(graph.x, delay_s),
        train_gid=train_gid,
        train_y=torch.from_numpy(graph.y[train_gid.numpy()]),
    )


def test_a_step_that_raises_under_a_slow_source_leaves_no_thread(tiny_graph: Graph) -> None:
    trainer = _trainer(tiny_graph, prefetch=4, delay_s=0.05)

    def hook(b: int) -> None:
        if b == 2:
            raise RuntimeError("rank raised at batch 2")

    start = time.perf_counter()
    with pytest.raises(RuntimeError, match="rank raised at batch 2"):
        trainer.train_epoch(0, 8, hook=hook)
    assert time.perf_counter() - start < 5.0  # no wait for the rest of the epoch
    assert not _prefetch_threads()


def test_epoch_split_has_every_stage_stall_and_overlap(tiny_graph: Graph) -> None:
    stats = _trainer(tiny_graph, prefetch=2, delay_s=0.01).train_epoch(0, 4)
    assert set(stats.seconds) == {*STAGES, "stall", "loop", "overlap"}
    assert stats.seconds["fetch"] >= 4 * 0.01 * 0.9  # four batches, each fetched once
    assert stats.seconds["overlap"] > 0 and stats.seconds["stall"] <= stats.seconds["loop"]
    with pytest.raises(ValueError, match="prefetch=-1"):
        Trainer.Config(prefetch=-1)


# ---- whole runs: bit-identical at every depth ----------------------------------------------
def _run_config(parts: int, prefetch: int) -> Any:
    return sbm_run(
        num_nodes=600,
        num_features=12,
        parts=parts,
        fanouts=(5, 5),
        hidden=16,
        batch_size=4,  # about 8 steps an epoch: depth 4 runs well ahead of the step
        epochs=2,
        trainer={"prefetch": prefetch},
        codec=CodecConfig(name="int8"),
        cache=CacheConfig(policy="adaptive", ratio=0.2),
    )


def _outcome(run_dir: Path) -> tuple[list[Any], dict[str, torch.Tensor]]:
    lines = (run_dir / METRICS_NAME).read_text().splitlines()
    keep = ("loss", "batch_train_acc", "bytes", "messages", "counts", "cache", "test_acc")
    history = [{k: json.loads(line).get(k) for k in keep} for line in lines]
    ckpt = load_checkpoint(run_dir)
    assert ckpt is not None
    return history, ckpt.model_state


@pytest.mark.timeout(300)
@pytest.mark.parametrize("parts", [1, 2, 4])
def test_runs_are_bit_identical_at_every_prefetch_depth(tmp_path: Path, parts: int) -> None:
    ref_history, ref_weights = None, None
    for depth in (0, 1, 2, 4):
        train_local(_run_config(parts, depth), tmp_path / f"k{depth}")
        history, weights = _outcome(tmp_path / f"k{depth}")
        if ref_history is None:
            ref_history, ref_weights = history, weights
            continue
        assert history == ref_history, f"prefetch {depth} changed losses, ledger or cache"
        assert ref_weights is not None
        for name, tensor in weights.items():
            assert torch.equal(tensor, ref_weights[name]), f"prefetch {depth}: {name} differs"


@pytest.mark.timeout(120)
def test_a_raising_rank_ends_the_run_and_its_prefetch_threads(tmp_path: Path) -> None:
    cfg = _run_config(2, 4)
    with pytest.raises(WorkerFailedError, match="injected fault"):
        train_local(cfg, tmp_path, fault=FaultSpec("raise", 1, 0, 1))
    assert not _prefetch_threads()
