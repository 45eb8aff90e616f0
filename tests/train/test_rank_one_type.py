"""A homogeneous store trains as the typed runtime's one-type case: plain PyG on the same batches.

A homogeneous store is one node type ``node`` and one relation ``node__to__node``; every run
of one goes through ``RankRuntime``. Each case here is held to two things.

**What it computes**, against an independent reference built in the same test run
(``replay_reference``): the run's sampled blocks, labels and dropout masks are recorded, and
PyG's own ``SAGEConv`` / ``GCNConv`` / ``GATConv``, loaded with the run's first weights,
retrain on them with ``torch.optim.Adam`` — halo rows through the run's codec, the gradient
of the mean over every rank's seeds. Each rank's step losses, each step's all-reduced gradient
and the final weights must match (``torch.testing.assert_close`` with float32's default
tolerance, ``rtol=1.3e-6, atol=1e-5``; for gradients ``atol`` is relative to the tensor's
largest entry). The two sides differ only in summation order, about ``1e-7`` relative here;
leaving out the fp16 or int8 codec on halo rows already moves a step's loss past the
tolerance, and a wrong aggregation, normalisation, weighting of ranks or dropout stream moves
the gradient by far more. The comparison runs in one process, so it holds on any CPU, and
``.ci/run`` repeats it under ``ATEN_CPU_CAPABILITY=default`` to show that. Each epoch's metrics must
equal those of PyG's layers over the whole graph with the replayed weights of that epoch
(a prediction may differ only where the top two logits lie within ``1e-4``).

**What it moves**, against ``one_type_golden.json``: the integers the node runtime
(``NodeRank``, deleted in issue 23) gave for each case — bytes and messages per stage,
counts, cache counters, evaluation traffic — compare exactly. They depend on sampled ids and
routing only, not on float summation, so they hold on any CPU.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from gnnsys.cache import CacheConfig, CodecConfig
from gnnsys.config import RunConfig
from gnnsys.datasets.link_split import LinkSplitConfig, edge_split
from gnnsys.datasets.synthetic import sbm
from gnnsys.partitioners import partition
from gnnsys.store import write_partitions
from gnnsys.store.source import DataConfig
from gnnsys.train.control.checkpoint import load_checkpoint
from gnnsys.train.control.run import train_local
from gnnsys.train.layer0.base import FirstLayerConfig, Placement
from gnnsys.train.link.config import LinkConfig
from gnnsys.train.node_types import NodeTypesConfig
from tests.train import replay_reference as ref
from tests.train.one_type_golden import GOLDEN, integers
from tests.train.run_configs import sbm_run

pytestmark = pytest.mark.usefixtures("shared_stores")  # runs share their stores (conftest)

_TIMING = ("seconds", "peak_rss_bytes", "threads", "bytes_by_type", "ranks", "balance")
"""History fields that are timings or that the node runtime's record predates (``ranks`` and
``balance`` carry each rank's compute and sync seconds)."""
_KNOWN = ()
"""History fields that still differ (none). Within ``cache``, ``capacity_bytes`` does: the node
cache reports its budget, a typed cache the whole rows of its type's share (less than a row
apart)."""


def _base(parts: int) -> RunConfig:
    return sbm_run(
        num_nodes=400, num_features=16, parts=parts, fanouts=(5, 5), hidden=16, batch_size=64,
        epochs=2,
    )  # fmt: skip


def _cases() -> dict[str, RunConfig]:
    base = _base(2)
    return {
        "p1": _base(1),
        "p2": base,
        "p4": _base(4),
        "replicated": replace(base, cluster=replace(base.cluster, topology="replicated")),
        "int8-degree-cache": replace(
            base, codec=CodecConfig(name="int8"), cache=CacheConfig(policy="degree", ratio=0.5)
        ),
        "fp16-adaptive-cache": replace(
            base, codec=CodecConfig(name="fp16"), cache=CacheConfig(policy="adaptive", ratio=0.3)
        ),
        "owner-sums": replace(base, layer0=FirstLayerConfig(placement=Placement.OWNER)),
        "gcn": replace(base, model=replace(base.model, name="gcn")),
        "gcn-owner-sums": replace(
            base,
            model=replace(base.model, name="gcn"),
            layer0=FirstLayerConfig(placement=Placement.OWNER),
        ),
        "gcn-int8-fused": replace(
            base, model=replace(base.model, name="gcn"), codec=CodecConfig(name="int8")
        ),
        "gcn-replicated": replace(
            base,
            model=replace(base.model, name="gcn"),
            cluster=replace(base.cluster, topology="replicated"),
        ),
        "gat": replace(base, model=replace(base.model, name="gat")),
        "gat-replicated": replace(
            base,
            model=replace(base.model, name="gat"),
            cluster=replace(base.cluster, topology="replicated"),
        ),
        "sage-blocked": replace(base, eval=replace(base.eval, block_mb=0.002)),
        "sage-projected": replace(  # the last layer (16 -> 4 wide) runs projected
            base, eval=replace(base.eval, block_mb=0.05)
        ),
        "gcn-blocked": replace(
            base, model=replace(base.model, name="gcn"), eval=replace(base.eval, block_mb=0.002)
        ),
        "gcn-halo-budget": replace(  # evaluation in runs, each fetching its own halo rows
            base, model=replace(base.model, name="gcn"), eval=replace(base.eval, halo_mb=0.002)
        ),
    }


def _typed(cfg: RunConfig, store: Path) -> RunConfig:
    hetero = NodeTypesConfig(
        model=cfg.model.name, input_type="node"
    )  # sage, gcn or gat per relation
    return replace(cfg, node_types=hetero, data=replace(cfg.data, store=str(store)))


_RUN_PLANS = ("gcn-halo-budget",)
"""Cases whose evaluation traffic differs: under a halo budget the two evaluators cut the
destinations into runs their own way, so they fetch different halo rows per run (the metrics,
computed from the logits, are still equal)."""


def _history(lines: list[dict[str, Any]], case: str = "") -> list[dict[str, Any]]:
    skip = (*_TIMING, *_KNOWN, *(("eval",) if case in _RUN_PLANS else ()))
    out = [{k: v for k, v in line.items() if k not in skip} for line in lines]
    for line in out:
        if "cache" in line:
            line["cache"] = {k: v for k, v in line["cache"].items() if k != "capacity_bytes"}
    return out


@pytest.mark.timeout(240)
@pytest.mark.parametrize("case", sorted([*_cases(), "link"]))
def test_one_type_run_equals_pyg_on_its_batches(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Losses, weights and metrics equal PyG's replay; traffic equals the node runtime's record."""
    split = None
    if case == "link":
        cfg, _, split = _link_case(tmp_path)
    else:
        cfg = _cases()[case]
    with ref.recording(monkeypatch) as rec:
        run = train_local(cfg, tmp_path / "run")
        graph = ref.WholeGraph.of_store(cfg.data.store or tmp_path / "run" / "store")
        reference = ref.replay(
            rec, graph, model=cfg.model.name, epochs=cfg.loop.epochs, lr=cfg.trainer.lr,
            weight_decay=cfg.trainer.weight_decay, dropout=cfg.model.dropout,
            codec=cfg.codec.name, partitioned=cfg.cluster.topology == "partitioned",
        )  # fmt: skip

    record = json.loads(GOLDEN.read_text())["runs"][case]
    assert integers(_history(run.history, case)) == record["history"]

    for r, steps in sorted(rec.steps.items()):  # float32 sums of a step's losses
        torch.testing.assert_close(
            torch.tensor([s.loss for s in steps]), torch.tensor(reference.losses[r]),
            msg=lambda m, r=r: f"rank {r}'s step losses: {m}",
        )  # fmt: skip
    for r, steps in sorted(rec.steps.items()):
        for i, step in enumerate(steps):
            _assert_gradient(step.grads, reference.grads[i], f"rank {r}, step {i}")
    ckpt = load_checkpoint(tmp_path / "run")
    assert ckpt is not None
    want = reference.epoch_states[-1]
    assert list(ckpt.model_state) == list(want)  # SAGE's, GCN's, GAT's names, in model order
    for name, value in ckpt.model_state.items():
        torch.testing.assert_close(value, want[name], msg=lambda m, n=name: f"{n}: {m}")

    per_epoch = len(next(iter(rec.steps.values()))) // cfg.loop.epochs
    for e, line in enumerate(run.history):  # an epoch's loss: its summed losses / its items
        window = slice(e * per_epoch, (e + 1) * per_epoch)
        ref_sum = sum(sum(reference.losses[r][window]) for r in rec.steps)
        items = sum(s.num_items for r in rec.steps for s in rec.steps[r][window])
        torch.testing.assert_close(line["loss"], ref_sum / items, rtol=1.3e-6, atol=1e-5)
        logits = ref.whole_graph_logits(cfg.model.name, reference.epoch_states[e], graph)
        if split is None:
            _assert_node_metrics(line, ref.split_metrics(logits, graph))
        else:
            _assert_link_metrics(line, logits, split)


def _assert_gradient(got: dict[str, Any], want: dict[str, Any], where: str) -> None:
    """A step's all-reduced gradient equals the reference's, tensor by tensor.

    Adam's first steps move each weight by about ``lr`` whatever the gradient's scale, so the
    weights alone miss a gradient weighted wrongly; the gradient does not. Tolerance: float32's
    ``rtol=1.3e-6``, and ``atol`` ``1e-5`` of the tensor's largest entry (entries that cancel
    to near zero keep only the summation order's absolute error).
    """
    assert list(got) == list(want), (where, list(got), list(want))
    for name, value in got.items():
        atol = 1e-5 * float(want[name].abs().max()) + 1e-12
        torch.testing.assert_close(
            value, want[name], rtol=1.3e-6, atol=atol, msg=lambda m, n=name: f"{where}, {n}: {m}"
        )


def _assert_node_metrics(line: dict[str, Any], want: dict[str, Any]) -> None:
    """Accuracy and macro-F1 per split equal the reference's, but for near-tied predictions."""
    for split, w in want.items():
        correct = round(line[f"{split}_acc"] * w["n"])
        assert abs(correct - w["correct"]) <= w["ties"], (split, line[f"{split}_acc"], w)
        if w["ties"] == 0:
            assert line[f"{split}_f1"] == pytest.approx(w["f1"], rel=1e-12), (split, w)


def _assert_link_metrics(line: dict[str, Any], h: torch.Tensor, split: Any) -> None:
    """MRR and Hits@K equal the reference's, but for links with a near-tied negative."""
    for name in ("val", "test"):
        pos, neg = getattr(split, f"{name}_2K"), getattr(split, f"{name}_neg_KQ")
        w = ref.link_metrics(h, pos, neg)
        slack = (w["ties"] + 1e-9) / pos.shape[1]  # a near tie moves one rank by one place
        for metric in ("mrr", "hits@20", "hits@50", "hits@100"):
            assert abs(line[f"{name}_{metric}"] - w[metric]) <= slack, (name, metric, w)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("case", ["p2", "gcn", "gat"])
def test_a_typed_config_on_one_type_is_the_same_run(case: str, tmp_path: Path) -> None:
    """Naming the one type (``node_types=NodeTypesConfig(input_type="node")``) changes nothing."""
    cfg = _cases()[case]
    plain = train_local(cfg, tmp_path / "plain")
    typed = train_local(_typed(cfg, tmp_path / "plain" / "store"), tmp_path / "typed")
    assert _history(typed.history, case) == _history(plain.history, case)
    _assert_same_weights(tmp_path / "plain", tmp_path / "typed")


def _assert_same_weights(node: Path, typed: Path) -> None:
    """The two runs' final weights are equal bit for bit, under the same names in model order."""
    a, b = load_checkpoint(node), load_checkpoint(typed)
    assert a is not None and b is not None
    assert list(a.model_state) == list(b.model_state)  # the one relation saves as SAGE/GCN/GAT
    for name, x in a.model_state.items():
        assert torch.equal(x, b.model_state[name]), name


def _link_case(root: Path) -> tuple[RunConfig, Path, Any]:
    """Link prediction on a 2-part store of an SBM graph's train edges (written under ``root``)."""
    graph = sbm(num_nodes=500, num_classes=4, avg_degree=8, num_features=10, seed=2)
    split = edge_split(graph, LinkSplitConfig(val=0.1, test=0.1, num_neg=60, seed=1))
    store = root / "store"
    assignment = partition(split.graph, "metis", 2, seed=0)
    write_partitions(split.graph, assignment, store, num_hops=2, links=split)
    base = _base(2)
    return replace(base, data=DataConfig(store=str(store)), link=LinkConfig()), store, split
