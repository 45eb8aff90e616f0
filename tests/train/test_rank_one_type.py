"""A homogeneous store trains as the typed runtime's one-type case, exactly as the node runtime did.

A homogeneous store is one node type ``node`` and one relation ``node__to__node``; every run
of one goes through ``TypedRank``. Before the node runtime (``NodeRank``) was deleted (issue
23), each case here ran through both and gave **bit-identical** weights and identical losses,
metrics, traffic and cache counters: the one-relation ``HeteroSAGE`` (GCN, GAT) starts from the
same weights as ``SAGE`` and saves them under its names, the typed sampler draws the one
relation with the batch seed itself (as ``NeighborSampler`` does), and the typed owners, caches,
codecs, layer-0 paths, evaluator and link trainer are the same code per type. What the node
runtime gave is kept in ``one_type_golden.json``; every case must still give exactly that.
The figures that differed between the two are listed in ``_KNOWN`` and ``_RUN_PLANS``.
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
from gnnsys.train.node_types import HeteroConfig
from tests.train.one_type_golden import GOLDEN, weight_digests
from tests.train.run_configs import sbm_run

_TIMING = ("seconds", "peak_rss_bytes", "threads", "bytes_by_type")
"""History fields that are timings or that only the typed runtime reports."""
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
    hetero = HeteroConfig(model=cfg.model.name, input_type="node")  # sage, gcn or gat per relation
    return replace(cfg, hetero=hetero, data=replace(cfg.data, store=str(store)))


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
def test_one_type_runs_equal_the_node_runtime_record(case: str, tmp_path: Path) -> None:
    """Every case's history and final weights equal the node runtime's, bit for bit.

    ``one_type_golden.json`` holds what ``NodeRank`` gave for each case before it was deleted
    (``tests/train/one_type_golden.py``); a homogeneous run is now the typed runtime's
    one-type case, and must still give exactly that.
    """
    golden = json.loads(GOLDEN.read_text())
    if golden["torch"] != torch.__version__:
        pytest.skip(f"recorded with torch {golden['torch']}, not {torch.__version__}")
    cfg = _link_case(tmp_path)[0] if case == "link" else _cases()[case]
    run = train_local(cfg, tmp_path / "run")
    want = golden["runs"][case]
    assert json.loads(json.dumps(_history(run.history, case))) == want["history"]
    ckpt = load_checkpoint(tmp_path / "run")
    assert ckpt is not None
    assert weight_digests(ckpt.model_state) == want["weights"]  # names too: SAGE's, GCN's, GAT's


@pytest.mark.timeout(240)
@pytest.mark.parametrize("case", ["p2", "gcn", "gat"])
def test_a_typed_config_on_one_type_is_the_same_run(case: str, tmp_path: Path) -> None:
    """Naming the one type (``hetero=HeteroConfig(input_type="node")``) changes nothing."""
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


def _link_case(root: Path) -> tuple[RunConfig, Path]:
    """Link prediction on a 2-part store of an SBM graph's train edges (written under ``root``)."""
    graph = sbm(num_nodes=500, num_classes=4, avg_degree=8, num_features=10, seed=2)
    split = edge_split(graph, LinkSplitConfig(val=0.1, test=0.1, num_neg=60, seed=1))
    store = root / "store"
    assignment = partition(split.graph, "metis", 2, seed=0)
    write_partitions(split.graph, assignment, store, num_hops=2, links=split)
    base = _base(2)
    return replace(base, data=DataConfig(store=str(store)), link=LinkConfig()), store
