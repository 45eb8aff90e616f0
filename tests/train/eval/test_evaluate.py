"""Sharded exact evaluation equals the single-process full-graph evaluation, and its metrics."""

from __future__ import annotations

import logging
import os
import re
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from gnnsys.config import RunConfig
from gnnsys.datasets import load
from gnnsys.datasets.synthetic import sbm
from gnnsys.models import ModelConfig, build_model
from gnnsys.partitioners import partition
from gnnsys.sampler import NeighborSampler
from gnnsys.store import write_partitions
from gnnsys.store.info import store_info
from gnnsys.store.source import DataConfig
from gnnsys.testing.reference import full_block, full_graph_logits
from gnnsys.train.control.cluster_config import ClusterConfig
from gnnsys.train.control.local_group import LocalWorkerGroup
from gnnsys.train.control.run import worker_template
from gnnsys.train.device import DevicePlan
from gnnsys.train.eval import blocked as eval_blocked
from gnnsys.train.eval import memory as eval_memory
from gnnsys.train.eval import sharded as eval_typed
from gnnsys.train.eval.evaluate import (
    SPLITS,
    EvalConfig,
    RankEval,
    combine_evals,
)
from gnnsys.train.metrics import accuracy, confusion_matrix, macro_f1
from gnnsys.train.trainer import Trainer
from gnnsys.types import Graph
from tests.tmpfs import mount_tmpfs
from tests.train.remote.test_halo_runtime import feature_path

pytestmark = pytest.mark.usefixtures("shared_stores")  # runs share their stores (conftest)

SHARED = Path(
    os.environ.get("GNNSYS_DATA") or Path(__file__).resolve().parents[3] / "shared" / "datasets"
)


def _config(store: Path, parts: int, model: str, **fetch: object) -> RunConfig:
    chunk_edges = int(fetch.pop("chunk_edges", 1 << 20))  # type: ignore[call-overload]
    in_place = bool(fetch.pop("in_place", True))
    halo_mb = float(fetch.pop("halo_mb", 0.0))  # type: ignore[arg-type]
    message_mb = float(fetch.pop("message_mb", 16.0))  # type: ignore[arg-type]
    spill_mb = float(fetch.pop("spill_mb", 0.0))  # type: ignore[arg-type]
    block_mb = float(fetch.pop("block_mb", 0.0))  # type: ignore[arg-type]
    return RunConfig(
        eval=EvalConfig(
            chunk_edges=chunk_edges,
            in_place=in_place,
            halo_mb=halo_mb,
            message_mb=message_mb,
            spill_mb=spill_mb,
            block_mb=block_mb,
        ),
        data=DataConfig(store=str(store)),
        cluster=ClusterConfig(parts=parts),
        sampler=NeighborSampler.Config(fanouts=(5, 5)),
        model=ModelConfig(name=model, hidden=16, dropout=0.5),
        trainer=Trainer.Config(batch_size=128, lr=0.01),
        **feature_path(**fetch),  # type: ignore[arg-type]
    )


def _sharded(
    graph: Graph,
    parts: int,
    model: str,
    root: Path,
    *,
    strategy: str = "metis",
    device: str = "cpu",
    **fetch: object,
) -> tuple[list[RankEval], torch.Tensor]:
    """Train one epoch in-process, evaluate sharded; returns the reports and the reference."""
    store = root / f"store-{parts}"
    assignment = partition(graph, strategy if parts > 1 else "random", parts, seed=0)
    write_partitions(graph, assignment, store, num_hops=2, overwrite=True)
    cfg = _config(store, parts, model, **fetch)
    info = store_info(store)
    template = replace(worker_template(cfg, store, info, "partitioned"), device=DevicePlan(device))
    group = LocalWorkerGroup(template, 60.0)
    return _train_and_evaluate(group, graph, cfg, store)


def _train_and_evaluate(
    group: Any, graph: Graph, cfg: RunConfig, store: Path
) -> tuple[list[RankEval], torch.Tensor]:
    """One training epoch on ``group``, its sharded evaluation, and the full-graph reference."""
    info = store_info(store)
    try:
        num_batches = group.start()
        group.run_epoch(0, num_batches, lambda _: None)  # trained, not initial, weights
        reports = group.evaluate(SPLITS, with_logits=True)
        state = group.collect()[0].model
    finally:
        group.stop()
    net = build_model(cfg.model, info.num_features, info.num_classes, 2)
    net.load_state_dict(state)
    x = torch.from_numpy(np.asarray(graph.x, dtype=np.float32))
    reference = full_graph_logits(net, full_block(graph.indptr, graph.indices, graph.num_nodes), x)
    return reports, reference


def _assembled(reports: list[RankEval], like: torch.Tensor) -> torch.Tensor:
    got = torch.full_like(like, float("nan"))
    for r in reports:
        assert r.logits is not None
        gid, logits = r.logits
        got[torch.from_numpy(gid)] = torch.from_numpy(logits)
    return got


def _check_equal(graph: Graph, reports: list[RankEval], reference: torch.Tensor) -> None:
    got = _assembled(reports, reference)
    diff = (got - reference).abs()
    assert not torch.isnan(got).any(), "some node was evaluated by no rank"
    assert float(diff.max()) <= 1e-5, (
        f"max diff {float(diff.max()):.3g} mean {float(diff.mean()):.3g}"
    )
    # The driver's combined metrics equal the metrics of the reference logits.
    result = combine_evals(reports, int(reference.shape[1]))
    pred = reference.argmax(-1).numpy()
    assert graph.y is not None
    for split in SPLITS:
        mask = getattr(graph, f"{split}_mask") & (graph.y >= 0)
        confusion = confusion_matrix(graph.y[mask], pred[mask], int(reference.shape[1]))
        assert result.metrics[f"{split}_acc"] == pytest.approx(accuracy(confusion), abs=1e-12)
        assert result.metrics[f"{split}_f1"] == pytest.approx(macro_f1(confusion), abs=1e-12)


@pytest.fixture(scope="module")
def sbm_graph() -> Graph:
    return sbm(num_nodes=600, num_classes=4, avg_degree=8, num_features=12, seed=3)


@pytest.mark.parametrize("parts", [1, 2, 4])
@pytest.mark.parametrize("model", ["sage", "gcn", "gat"])
def test_sharded_equals_full_graph_sbm(
    sbm_graph: Graph, parts: int, model: str, tmp_path: Path
) -> None:
    reports, reference = _sharded(sbm_graph, parts, model, tmp_path)
    _check_equal(sbm_graph, reports, reference)
    if parts > 1:
        assert sum(r.traffic.bytes["feature_response"] for r in reports) > 0


@pytest.mark.parametrize("in_place", [True, False])
@pytest.mark.parametrize("model", ["sage", "gcn", "gat"])
def test_sharded_on_the_trainers_device(
    sbm_graph: Graph, model: str, in_place: bool, device: torch.device, tmp_path: Path
) -> None:
    """The dense part of every layer runs on the trainer's device, a run of rows at a time."""
    reports, reference = _sharded(  # ldg: the GPU machine has no METIS
        sbm_graph, 2, model, tmp_path, strategy="ldg", device=device.type, chunk_edges=37,
        in_place=in_place,
    )  # fmt: skip
    _check_equal(sbm_graph, reports, reference)


@pytest.mark.parametrize("model", ["sage", "gcn", "gat"])
def test_sharded_in_small_chunks(sbm_graph: Graph, model: str, tmp_path: Path) -> None:
    reports, reference = _sharded(sbm_graph, 2, model, tmp_path, chunk_edges=37, in_place=False)
    _check_equal(sbm_graph, reports, reference)


@pytest.mark.parametrize("model", ["sage", "gcn", "gat"])
def test_sharded_under_a_small_halo_budget(sbm_graph: Graph, model: str, tmp_path: Path) -> None:
    # ~40 halo rows of 12 features at a time: many runs, hubs fetched once per run.
    reports, reference = _sharded(sbm_graph, 4, model, tmp_path, halo_mb=40 * 12 * 4 / 2**20)
    _check_equal(sbm_graph, reports, reference)
    whole, _ = _sharded(sbm_graph, 4, model, tmp_path / "whole")
    assert sum(r.traffic.messages["feature_request"] for r in reports) > sum(
        r.traffic.messages["feature_request"] for r in whole
    )


@pytest.mark.parametrize("model", ["sage", "gcn"])
def test_sharded_in_small_messages(sbm_graph: Graph, model: str, tmp_path: Path) -> None:
    # At most 7 rows of 16 floats per answer: the same logits and bytes in more messages.
    small, reference = _sharded(sbm_graph, 4, model, tmp_path, message_mb=7 * 16 * 4 / 2**20)
    _check_equal(sbm_graph, small, reference)
    whole, _ = _sharded(sbm_graph, 4, model, tmp_path / "whole")
    for kind in ("feature_request", "feature_response"):
        assert sum(r.traffic.bytes[kind] for r in small) == sum(
            r.traffic.bytes[kind] for r in whole
        )
    requests = sum(r.traffic.messages["feature_request"] for r in small)
    assert requests > sum(r.traffic.messages["feature_request"] for r in whole)
    assert requests == sum(r.traffic.messages["feature_response"] for r in small)


def test_eval_message_size_is_validated() -> None:
    with pytest.raises(ValueError, match="message_mb=0"):
        EvalConfig(message_mb=0)


def test_sharded_reads_halo_cache_without_side_effects(sbm_graph: Graph, tmp_path: Path) -> None:
    reports, reference = _sharded(
        sbm_graph, 4, "sage", tmp_path, cache_policy="degree", cache_ratio=0.5, codec="fp32"
    )
    _check_equal(sbm_graph, reports, reference)
    assert sum(r.cache_hits for r in reports) > 0
    assert sum(r.cache_hits for r in reports) <= sum(r.halo_rows for r in reports)


def test_lossy_eval_codec_moves_fewer_bytes(sbm_graph: Graph, tmp_path: Path) -> None:
    store = tmp_path / "store"
    write_partitions(sbm_graph, partition(sbm_graph, "metis", 2, seed=0), store, num_hops=2)
    got = {}
    for codec in ("fp32", "int8"):
        cfg = replace(_config(store, 2, "sage"), eval=EvalConfig(codec=codec))
        group = LocalWorkerGroup(worker_template(cfg, store, store_info(store), "partitioned"), 60)
        group.start()
        got[codec] = group.evaluate(SPLITS)
        group.stop()
    peer_bytes = {c: sum(r.traffic.bytes["feature_response"] for r in rs) for c, rs in got.items()}
    assert peer_bytes["int8"] < peer_bytes["fp32"]


@pytest.mark.parametrize(
    ("name", "parts"),
    [("planetoid:cora", 1), ("planetoid:cora", 2), ("planetoid:cora", 4)],
)
@pytest.mark.parametrize("model", ["sage", "gcn"])
def test_sharded_equals_full_graph_cora(name: str, parts: int, model: str, tmp_path: Path) -> None:
    if not SHARED.is_dir():
        pytest.skip(f"real datasets not present at {SHARED}; set GNNSYS_DATA (sbm covers this)")
    graph = load(name, root=str(SHARED))
    reports, reference = _sharded(graph, parts, model, tmp_path)
    _check_equal(graph, reports, reference)


@pytest.mark.slow
@pytest.mark.parametrize("parts", [1, 2, 4])
def test_sharded_equals_full_graph_facebook(parts: int, tmp_path: Path) -> None:
    if not SHARED.is_dir():
        pytest.skip(f"real datasets not present at {SHARED}; set GNNSYS_DATA (sbm covers this)")
    graph = load("musae:facebook", root=str(SHARED))
    reports, reference = _sharded(graph, parts, "sage", tmp_path)
    _check_equal(graph, reports, reference)


def test_eval_config_schedule() -> None:
    cfg = EvalConfig(every=2, test_at_end=True)
    assert [cfg.due(e, 4) for e in range(5)] == [False, True, False, True, True]
    assert cfg.splits(1, 4) == ("train", "val")
    assert cfg.splits(4, 4) == SPLITS
    assert not EvalConfig(every=0).due(4, 4)
    assert EvalConfig().selection_metric(2) == "auc"
    assert EvalConfig().selection_metric(5) == "acc"
    with pytest.raises(ValueError, match="auc needs binary"):
        EvalConfig(metric="auc").selection_metric(3)
    with pytest.raises(ValueError, match="eval codec='auto'"):
        EvalConfig(codec="auto")


@pytest.mark.ray
@pytest.mark.timeout(240)
@pytest.mark.parametrize(  # gcn differs from sage only in degrees, tested in process too
    "model", ["sage", pytest.param("gcn", marks=pytest.mark.slow)]
)
def test_ray_group_sharded_equals_full_graph(
    ray_session: object, sbm_graph: Graph, model: str, tmp_path: Path
) -> None:
    from gnnsys.train.control.ray_group import RayWorkerGroup
    from gnnsys.train.control.resources import Resources

    store = tmp_path / "store"
    write_partitions(sbm_graph, partition(sbm_graph, "metis", 2, seed=0), store, num_hops=2)
    cfg = _config(store, 2, model)
    info = store_info(store)
    template = worker_template(cfg, store, info, "partitioned")
    group = RayWorkerGroup(template, Resources(worker_cpus=0.5, owner_cpus=0.25), 60.0)
    reports, reference = _train_and_evaluate(group, sbm_graph, cfg, store)
    _check_equal(sbm_graph, reports, reference)


# ---- layer tables in unlinked memory-mapped files (EvalConfig.spill_mb) -------------------------
def _spill_map_flags() -> list[bool]:
    """Per spilled map of this process, whether the kernel marks it random-read (``rr``)."""
    out, inside = [], False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5 and ":" in head[3]:
            inside = eval_memory.SPILL_PREFIX in line
        elif inside and line.startswith("VmFlags:"):
            out.append("rr" in head[1:])
    return out


def _spill_maps() -> list[str]:
    """This process's mappings of spilled evaluation tables (``/proc/self/maps`` lines)."""
    with open("/proc/self/maps") as maps:
        return [line for line in maps if eval_memory.SPILL_PREFIX in line]


def _spill_files(where: Path) -> list[Path]:
    """Files of spilled tables in ``where`` (torch's own caches may live there too)."""
    return list(where.glob(f"{eval_memory.SPILL_PREFIX}*"))


@pytest.fixture
def spill_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh ``tempfile.gettempdir()`` (what ``TMPDIR`` sets) for the spilled tables."""
    where = tmp_path / "tmpdir"
    where.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(where))
    return where


@pytest.mark.parametrize(
    ("model", "fetch"),
    [
        ("sage", {}),  # in place (linear_layer_outputs)
        ("gcn", {}),  # in place, with degrees
        ("gat", {}),  # gathering path, width known at the first chunk
        ("sage", {"in_place": False, "chunk_edges": 37}),  # gathering path, many chunks
        ("gat", {"halo_mb": 40 * 12 * 4 / 2**20}),  # many runs write into one table
    ],
    ids=["sage", "gcn", "gat", "sage-gathered", "gat-halo-runs"],
)
def test_spilled_tables_give_bit_identical_results(
    sbm_graph: Graph,
    model: str,
    fetch: dict[str, object],
    tmp_path: Path,
    spill_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[tuple[int, int]] = []
    spilled_table = eval_memory.spilled_table

    def spy(rows: int, width: int) -> tuple[torch.Tensor, object]:
        table, mapped = spilled_table(rows, width)
        maps = _spill_maps()  # mapped, already deleted from the directory
        assert maps and all(line.rstrip().endswith("(deleted)") for line in maps), maps
        assert all(str(spill_dir) in line for line in maps), maps
        assert not _spill_files(spill_dir)
        made.append((rows, width))
        return table, mapped

    monkeypatch.setattr(eval_memory, "spilled_table", spy)
    memory, reference = _sharded(sbm_graph, 2, model, tmp_path / "memory", spill_mb=0, **fetch)
    assert not made  # 0: every table in memory
    spilled, again = _sharded(sbm_graph, 2, model, tmp_path / "spill", spill_mb=1e-6, **fetch)
    assert torch.equal(reference, again), "training is not deterministic: compare same weights"
    assert len(made) == 2 * 2  # both tables (layers 1 and 2) of both ranks
    assert torch.equal(_assembled(spilled, reference), _assembled(memory, reference))
    for a, b in zip(spilled, memory, strict=True):
        assert a.confusion.keys() == b.confusion.keys()
        assert all(np.array_equal(a.confusion[s], b.confusion[s]) for s in a.confusion)
    _check_equal(sbm_graph, spilled, reference)
    assert not _spill_maps(), "report() left a spilled table mapped"
    assert not _spill_files(spill_dir), "a spilled table's file is left on disk"


def test_layer_tables_spill_above_the_limit_and_unmap_when_dropped(spill_dir: Path) -> None:
    tables = eval_memory.LayerTables(spill_mb=100 * 8 * 4 / 2**20)  # 100 rows of 8 floats
    small = tables.buffer(1, 100, 8)  # exactly the limit: stays in memory
    big = tables.buffer(2, 101, 8)
    assert tables.spilled() == [2] and len(_spill_maps()) == 1
    assert _spill_map_flags() == [True]  # MADV_RANDOM: no read-around of evicted rows
    assert 2 not in tables  # not readable before it is published
    big[:] = torch.arange(101 * 8, dtype=torch.float32).view(101, 8)
    small.fill_(1.0)
    tables.publish(1)
    tables.publish(2)
    pos = np.array([100, 3, 3, 57])  # a peer's request: read ahead on the spilled table
    assert tables._ahead[2].live and 1 not in tables._ahead
    assert torch.equal(tables.rows(2, pos), tables[2][torch.from_numpy(pos)])
    assert torch.equal(tables.rows(1, pos[1:]), torch.ones(3, 8))
    view = tables[2][100:]  # a view outliving the table keeps the map valid
    del big
    tables.pop(2)
    assert 2 not in tables and tables.spilled() == [] and len(_spill_maps()) == 1
    assert torch.equal(view, torch.arange(800, 808, dtype=torch.float32)[None])
    del view
    assert not _spill_maps()
    assert torch.equal(tables[1], torch.ones(100, 8))
    again = tables.buffer(3, 200, 8)
    assert len(_spill_maps()) == 1
    del again
    tables.clear()
    assert not _spill_maps() and 1 not in tables
    assert not _spill_files(spill_dir)
    assert not eval_memory.LayerTables(spill_mb=0).spills(1 << 20, 1 << 10)


def test_eval_spill_size_is_validated() -> None:
    with pytest.raises(ValueError, match=re.escape("eval spill_mb=-1.0; choose >= 0")):
        EvalConfig(spill_mb=-1.0)
    with pytest.raises(ValueError, match="eval spill_mb=nan"):
        EvalConfig(spill_mb=float("nan"))


def test_a_full_temp_dir_fails_with_its_name_not_sigbus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mounted = mount_tmpfs(tmp_path / "tiny", "size=1m")
    tiny = next(mounted)  # skips where mount is refused
    try:
        monkeypatch.setattr(tempfile, "tempdir", str(tiny))
        tables = eval_memory.LayerTables(spill_mb=1e-6)
        with pytest.raises(OSError, match=f"cannot reserve 2.0 MiB .* in {re.escape(str(tiny))}"):
            tables.buffer(1, 1 << 12, 128)  # 2 MiB on a 1 MiB file system
        assert not _spill_maps() and not _spill_files(tiny)
    finally:
        mounted.close()  # unmounts


# ---- source-blocked evaluation (EvalConfig.block_mb) ------------------------------------------
@pytest.mark.parametrize("parts", [1, 2, 4])
@pytest.mark.parametrize(
    ("model", "fetch"),
    [
        ("sage", {}),
        ("gcn", {}),  # degrees scale every gathered row, own and halo
        ("gat", {}),  # not linear: the span path, unchanged
        ("sage", {"spill_mb": 1e-6}),  # blocks read from spilled tables
        ("sage", {"block_mb": 1.0}),  # the last layer's projections fit: it runs projected
    ],
    ids=["sage", "gcn", "gat", "sage-spilled", "sage-projected"],
)
def test_blocked_evaluation_equals_full_graph(
    sbm_graph: Graph,
    parts: int,
    model: str,
    fetch: dict[str, object],
    tmp_path: Path,
    spill_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    blocked_widths: list[int] = []
    projected_widths: list[int] = []
    blocked = eval_typed.blocked_outputs

    def spy(module: Any, node_type: str, own: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        blocked_widths.append(int(own.shape[1]))
        blocked(module, node_type, own, *args, **kwargs)

    projected = eval_blocked.projected_outputs

    def spy_projected(module: Any, own: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        projected_widths.append(int(own.shape[1]))
        projected(module, own, *args, **kwargs)

    monkeypatch.setattr(eval_typed, "blocked_outputs", spy)
    monkeypatch.setattr(eval_blocked, "projected_outputs", spy_projected)
    # 40 rows of layer 0 (F = 12), 30 of layer 1 (H = 16): the projections do not fit
    block_mb = float(fetch.pop("block_mb", 40 * 12 * 4 / 2**20))  # type: ignore[arg-type]
    reports, reference = _sharded(sbm_graph, parts, model, tmp_path, block_mb=block_mb, **fetch)
    _check_equal(sbm_graph, reports, reference)
    if model == "gat":
        assert not blocked_widths and not projected_widths
        return
    assert sorted(blocked_widths) == sorted([12, 16] * parts)  # both layers of every rank
    # SAGE's last layer (16 -> 4 classes) runs projected where its projections fit 1 MiB
    assert projected_widths == ([16] * parts if block_mb >= 1.0 else [])


def test_willneed_rows_is_a_hint_on_maps_and_memory(tmp_path: Path) -> None:
    data = np.arange(64 * 8, dtype=np.float32).reshape(64, 8)
    np.save(tmp_path / "x.npy", data)
    mapped = torch.from_numpy(np.load(tmp_path / "x.npy", mmap_mode="r+"))
    for table in (mapped, torch.from_numpy(data.copy())):
        eval_memory.willneed_rows(table, 3, 60)
        eval_memory.willneed_rows(table, 5, 5)  # empty: nothing asked
        assert torch.equal(table, torch.from_numpy(data))


def test_each_evaluation_layer_is_logged(
    sbm_graph: Graph, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="gnnsys.train.control.local_group"):
        _sharded(sbm_graph, 2, "sage", tmp_path)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("evaluation:")]
    assert [line.rsplit(" after ", 1)[0] for line in lines] == [
        "evaluation: layer 1/2 done",
        "evaluation: layer 2/2 done",
    ]
