"""Sharded exact evaluation of typed graphs (``gnnsys.train.eval.sharded``).

Claims, on a small ``synthetic:mag`` (scale 0.002, reverse relations: 4 node types, 3 of them
featureless with learnable rows) written as 1, 2 and 4 random parts:

* after a trained epoch, every rank's logits of its own papers equal one process's
  full-neighbourhood forward of the same weights and embedding rows on the whole graph
  (:func:`full_typed_outputs`) to 1e-5, for RelationalSAGE, RelationalGAT and R-GCN, at P = 1, 2, 4;
* the metrics the driver combines equal the metrics of those whole-graph logits exactly;
* the same holds when a layer runs over many runs of destination rows (``chunk_edges``);
* evaluation traffic is counted in its own ledger (per type), none at P = 1;
* tables spilled to file maps (``spill_mb``) give bit-identical logits;
* a halo budget (``halo_mb``: runs of rows fetch only the halo rows they read) gives the same
  logits (to float rounding: smaller matmuls), for more evaluation bytes;
* source-blocked layers (``block_mb``: spans of destinations, sources read in ascending blocks)
  give the whole-graph logits to 1e-5 for RelationalSAGE at P = 1, 2, 4 with spans and blocks much
  smaller than a type (spilled tables too); R-GCN and GAT keep the default path.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from gnnsys.config import RunConfig
from gnnsys.models import ModelConfig
from gnnsys.sampler import NeighborSampler
from gnnsys.store import read_shard
from gnnsys.store.info import store_info
from gnnsys.store.source import DataConfig
from gnnsys.train.control.coordinator import Coordinator
from gnnsys.train.control.local_group import LocalWorkerGroup
from gnnsys.train.control.run import worker_template
from gnnsys.train.eval.evaluate import combine_evals
from gnnsys.train.metrics import accuracy, confusion_matrix
from gnnsys.train.node_types import NodeTypesConfig
from gnnsys.train.trainer import Trainer
from gnnsys.types.relations import HeteroGraph
from tests.train.typed_reference import full_typed_outputs

pytestmark = pytest.mark.usefixtures("shared_stores")  # runs share their stores (conftest)

SPLITS = ("train", "val", "test")


def _group(
    store: Path,
    parts: int,
    model: str,
    chunk: int,
    spill_mb: float = 0.0,
    halo_mb: float = 0.0,
    block_mb: float = 0.0,
    dropout: float = 0.0,
) -> LocalWorkerGroup:
    cfg = RunConfig(
        data=DataConfig(dataset="synthetic:mag", store=str(store)),
        cluster=replace(RunConfig().cluster, parts=parts),
        sampler=NeighborSampler.Config(fanouts=(6, 4)),
        model=ModelConfig(hidden=16, dropout=dropout),
        trainer=Trainer.Config(lr=0.01, batch_size=256, seed=3),
        loop=Coordinator.Config(epochs=1, progress=False, deadline_s=60.0),
        node_types=NodeTypesConfig(model=model),
        eval=replace(
            RunConfig().eval,
            chunk_edges=chunk,
            spill_mb=spill_mb,
            halo_mb=halo_mb,
            block_mb=block_mb,
        ),
    )
    template = worker_template(cfg, store, store_info(store), "partitioned")
    group = LocalWorkerGroup(template, 60.0)
    group.start()
    return group


def _whole_inputs(mag: HeteroGraph, group: LocalWorkerGroup, store: Path) -> dict:
    """Every node's layer-0 rows: paper features, and each rank's trained embedding rows."""
    x_dict = {"paper": torch.from_numpy(mag.nodes["paper"].x)}
    for t in mag.node_types:
        if t == "paper":
            continue
        table = torch.zeros(mag.num_nodes(t), group.workers[0].rank.embeddings.dim)
        for rank, worker in enumerate(group.workers):
            lid = np.asarray(read_shard(store, rank).nodes[t].owned_lid, dtype=np.int64)
            table[torch.from_numpy(lid)] = torch.from_numpy(worker.rank.embeddings.local_rows(t))
        x_dict[t] = table
    return x_dict


def _logits_against_the_whole_graph(
    mag: HeteroGraph, group: LocalWorkerGroup, store: Path
) -> tuple[list[Any], torch.Tensor]:
    """Two steps (weights and embeddings move), then every rank's paper logits against one
    process's whole-graph forward of the same weights and rows, to 1e-5; stops the group."""
    try:
        group.run_epoch(0, 2, lambda _: None)
        reports = group.evaluate(SPLITS, with_logits=True)
        layers = group.workers[0].trainer.model.layers
        relations = {et: (r.indptr, r.indices) for et, r in mag.relations.items()}
        want = full_typed_outputs(layers, relations, _whole_inputs(mag, group, store))
    finally:
        group.stop()
    for report in reports:
        assert report.logits is not None
        lid, got = report.logits
        np.testing.assert_allclose(got, want["paper"][torch.from_numpy(lid)].numpy(), atol=1e-5)
    return reports, want["paper"]


@pytest.mark.parametrize("chunk", [1 << 20, 300])  # one run of rows per type, or many
@pytest.mark.parametrize("model", ["sage", "gat", "rgcn"])
@pytest.mark.parametrize("parts", [1, 2, 4])
def test_exact_evaluation_equals_a_whole_graph_forward(
    mag: HeteroGraph, stores: dict[int, Path], parts: int, model: str, chunk: int
) -> None:
    group = _group(stores[parts], parts, model, chunk)
    reports, want_NC = _logits_against_the_whole_graph(mag, group, stores[parts])
    for report in reports:
        assert (report.traffic.total_bytes > 0) == (parts > 1)
    papers = mag.nodes["paper"]
    assert papers.y is not None
    pred = want_NC.argmax(-1).numpy()
    metrics = combine_evals(reports, want_NC.shape[1]).metrics
    for split in SPLITS:
        mask = np.asarray(getattr(papers, f"{split}_mask"), dtype=bool) & (papers.y >= 0)
        confusion = confusion_matrix(papers.y[mask], pred[mask], want_NC.shape[1])
        assert metrics[f"{split}_acc"] == accuracy(confusion), split


def test_gat_evaluates_without_attention_dropout(mag: HeteroGraph, stores: dict[int, Path]) -> None:
    """Training leaves the model in training mode; evaluation must not drop attention weights.

    (It did: the typed evaluator never switched the layers to evaluation, so a GAT run's exact
    logits were those of a random dropout mask.)
    """
    group = _group(stores[2], 2, "gat", 1 << 20, dropout=0.5)
    _logits_against_the_whole_graph(mag, group, stores[2])


def test_spilled_tables_give_the_same_logits(mag: HeteroGraph, stores: dict[int, Path]) -> None:
    logits = {}
    for spill_mb in (0.0, 0.001):  # 0.001 MiB: every table of a type goes to a file map
        group = _group(stores[2], 2, "sage", 300, spill_mb=spill_mb)
        try:
            group.run_epoch(0, 2, lambda _: None)
            for layer in range(2):
                for w in group.workers:
                    w.eval_layer(layer)
            spilled = [w.rank._evaluator.tables.spilled() for w in group.workers]
            reports = [w.eval_report(SPLITS, True) for w in group.workers]
        finally:
            group.stop()
        assert all(spilled) == (spill_mb > 0)  # the last layer's tables, still held
        logits[spill_mb] = [r.logits[1] for r in reports if r.logits is not None]
    for a, b in zip(logits[0.0], logits[0.001], strict=True):
        assert np.array_equal(a, b)


@pytest.mark.parametrize(  # sage's runs: test_source_blocked_layers_equal_a_whole_graph_forward;
    "model",
    [pytest.param("sage", marks=pytest.mark.slow), "rgcn"],  # sage here: --all
)
def test_a_halo_budget_gives_the_same_logits(
    mag: HeteroGraph, stores: dict[int, Path], model: str
) -> None:
    got = {}
    for halo_mb in (0.0, 0.002):  # 0.002 MiB: a few dozen halo rows per run
        group = _group(stores[4], 4, model, 1 << 20, halo_mb=halo_mb)
        try:
            group.run_epoch(0, 2, lambda _: None)
            reports = group.evaluate(SPLITS, with_logits=True)
        finally:
            group.stop()
        got[halo_mb] = reports
    for a, b in zip(got[0.0], got[0.002], strict=True):
        assert a.logits is not None and b.logits is not None
        assert np.array_equal(a.logits[0], b.logits[0])
        np.testing.assert_allclose(a.logits[1], b.logits[1], rtol=0, atol=1e-5)  # matmul shapes
    # runs fetch a hub again each time they read it: more evaluation bytes, same answer
    assert sum(r.traffic.total_bytes for r in got[0.002]) > sum(
        r.traffic.total_bytes for r in got[0.0]
    )


@pytest.mark.parametrize("model", ["sage", "rgcn"])
@pytest.mark.parametrize(  # 1 and 4 parts run with --all (8 s, 4 s); 2 has halo and owned rows
    "parts", [pytest.param(1, marks=pytest.mark.slow), 2, pytest.param(4, marks=pytest.mark.slow)]
)
def test_source_blocked_layers_equal_a_whole_graph_forward(
    mag: HeteroGraph,
    stores: dict[int, Path],
    parts: int,
    model: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """0.01 MiB spans: a few dozen destination rows each, sources in blocks of a few rows."""
    from gnnsys.train.eval import blocked as eval_blocked
    from gnnsys.train.eval import sharded as eval_typed

    spans: list[int] = []

    def counted(*args: object, **kw: object) -> None:
        spans.append(1)
        eval_blocked.blocked_outputs(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(eval_typed, "blocked_outputs", counted)
    group = _group(stores[parts], parts, model, 1 << 20, spill_mb=0.001, block_mb=0.01)
    _logits_against_the_whole_graph(mag, group, stores[parts])
    assert bool(spans) == (model == "sage")  # R-GCN keeps the default path


@pytest.mark.parametrize("parts", [1, 2, 4])
def test_projected_layers_equal_a_whole_graph_forward(
    mag: HeteroGraph, stores: dict[int, Path], parts: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """1 MiB spans: layer 0 (128 -> 16 wide) runs projected, relation by relation."""
    from gnnsys.train.eval import blocked as eval_blocked

    calls: list[str] = []
    projected = eval_blocked.projected_outputs

    def counted(module: Any, *args: Any, **kw: Any) -> None:
        calls.append(type(module).__name__)
        projected(module, *args, **kw)

    monkeypatch.setattr(eval_blocked, "projected_outputs", counted)
    group = _group(stores[parts], parts, "sage", 1 << 20, block_mb=1.0)
    _logits_against_the_whole_graph(mag, group, stores[parts])
    assert calls and set(calls) == {"RelationalSAGELayer"}
