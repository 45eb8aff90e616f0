"""The pipelined step: prefetching changes when a batch is prepared, never what is computed."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from gnnsys.cache import CacheConfig, CodecConfig
from gnnsys.errors import WorkerFailedError
from gnnsys.models import ModelConfig
from gnnsys.sampler import NeighborSampler
from gnnsys.testing.in_memory import Rows, one_type_trainer
from gnnsys.train.control.checkpoint import load_checkpoint
from gnnsys.train.control.recorder import METRICS_NAME
from gnnsys.train.control.run import train_local
from gnnsys.train.pipeline import STAGES
from gnnsys.train.trainer import Trainer
from gnnsys.train.worker import FaultSpec
from gnnsys.types import Graph
from tests.train.run_configs import sbm_run

pytestmark = pytest.mark.usefixtures("shared_stores")  # runs share their stores (conftest)


def _prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("gnnsys-prefetch")]


# ---- the trainer ---------------------------------------------------------------------------
def _trainer(
    graph: Graph, prefetch: int, delay_s: float = 0.0, device: torch.device | str = "cpu"
) -> Trainer:
    """The rows answer after ``delay_s``, like a loaded owner."""
    config = Trainer.Config(lr=0.01, batch_size=8, seed=0, prefetch=prefetch)
    assert graph.x is not None
    return one_type_trainer(graph, config, rows=Rows(graph.x, delay_s), device=device)


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


@pytest.mark.parametrize("prefetch", [1, 3])
def test_one_producer_thread_gives_the_same_epoch(
    tiny_graph: Graph, prefetch: int, device: torch.device
) -> None:
    """``stage_threads`` 1 (one thread samples, then fetches) and 2 train the same weights."""
    runs = []
    for threads in (1, 2):
        trainer = _trainer(tiny_graph, prefetch=prefetch, device=device)
        trainer.stage_threads = threads
        stats = [trainer.train_epoch(e, 6) for e in range(2)]
        runs.append(([s.loss_sum for s in stats], [p.detach() for p in trainer.model.parameters()]))
        assert not _prefetch_threads()
    (loss_a, params_a), (loss_b, params_b) = runs
    assert loss_a == loss_b
    assert all(torch.equal(a, b) for a, b in zip(params_a, params_b, strict=True))


def test_stage_threads_follow_where_owner_calls_run() -> None:
    from dataclasses import replace as swap

    from gnnsys.train.worker import FaultSpec, WorkerSpec, stage_threads

    spec = WorkerSpec(
        rank=0, world_size=2, store="s", topology="partitioned", trainer=Trainer.Config(),
        sampler=NeighborSampler.Config(fanouts=(2,)), model=ModelConfig(), num_features=4,
        num_classes=2, deadline_s=10.0, owner_reads="remote",
    )  # fmt: skip
    assert stage_threads(spec, None) == 2  # owner actors: calls leave the process
    assert stage_threads(swap(spec, owner_reads="local"), None) == 1
    assert stage_threads(spec, object()) == 1  # the in-process executor's client
    delayed = swap(spec, owner_reads="local", fault=FaultSpec("delay", 0, 0, delay_s=0.01))
    assert stage_threads(delayed, None) == 2  # the delay stands in for remote latency


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
@pytest.mark.parametrize("parts", [1, 2, pytest.param(4, marks=pytest.mark.slow)])  # 4: --all
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
