"""Link prediction on one relation of a heterogeneous graph (``--task link --target-edge``).

Claims, on a small ``synthetic:mag`` (scale 0.002, reverse relations):

* the typed split holds out links of the target relation only, and no held-out link or its
  reverse is left in any relation of the training graph; same-type relations split undirected
  pairs (no pair in two splits); the split is a function of its config;
* the store gives each part the links whose source it owns (the union is the split), under
  checksums, and names the relation in its manifest;
* training runs end to end at P = 1 and 2 (in process, and through the CLI), and the sharded
  exact link evaluation equals one process's ranking on the whole training graph with the same
  weights and embedding rows (MRR and Hits@K);
* a store of another relation's links is refused, naming both.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from gnnsys.config import RunConfig
from gnnsys.datasets.link_split import LinkSplitConfig, RelationLinkSplit, relation_edge_split
from gnnsys.models import ModelConfig
from gnnsys.partitioners import partition_hetero
from gnnsys.sampler import NeighborSampler
from gnnsys.store import write_partitions
from gnnsys.store.info import store_info
from gnnsys.store.links import load_relation_links
from gnnsys.store.source import DataConfig
from gnnsys.train.control.coordinator import Coordinator
from gnnsys.train.control.local_group import LocalWorkerGroup
from gnnsys.train.control.run import train_local, worker_template
from gnnsys.train.eval.evaluate import combine_evals
from gnnsys.train.link.config import LinkConfig
from gnnsys.train.metrics import link_metrics, link_ranks, link_sums
from gnnsys.train.node_types import NodeTypesConfig
from gnnsys.train.trainer import Trainer
from gnnsys.types.relations import HeteroGraph
from tests.train.typed_reference import full_typed_outputs

pytestmark = pytest.mark.usefixtures("shared_stores")  # runs share their stores (conftest)

CITES = ("paper", "cites", "paper")
WRITES = ("author", "writes", "paper")


def _split(mag: HeteroGraph, et: tuple[str, str, str]) -> RelationLinkSplit:
    return relation_edge_split(mag, et, LinkSplitConfig(num_neg=30, edge_type="__".join(et)))


def _pairs(rel: object) -> set[tuple[int, int]]:
    indptr, indices = rel.indptr, rel.indices  # type: ignore[attr-defined]
    dst = np.repeat(np.arange(indptr.shape[0] - 1), np.diff(indptr))
    return set(zip(indices.tolist(), dst.tolist(), strict=True))


@pytest.mark.parametrize("et", [CITES, WRITES])
def test_held_out_links_and_reverses_leave_the_graph(mag: HeteroGraph, et: tuple) -> None:
    split = _split(mag, et)
    held = {(int(s), int(d)) for k in (split.val_2K, split.test_2K) for s, d in k.T}
    assert held and split.train_2E.shape[1] > 0
    for edge_type, rel in split.graph.relations.items():
        edges = _pairs(rel)
        if edge_type == et:
            assert not held & edges
        if edge_type[0] == et[2] and edge_type[2] == et[0]:
            assert not {(d, s) for s, d in held} & edges, edge_type
        if et[1] not in edge_type[1]:  # other relations are untouched
            assert edges == _pairs(mag.relations[edge_type]), edge_type
    if et[0] == et[2]:  # undirected pairs: a pair sits in one split only
        undirected = [
            {(min(s, d), max(s, d)) for s, d in k.T.tolist()}
            for k in (split.train_2E, split.val_2K, split.test_2K)
        ]
        assert not (undirected[0] & undirected[1] or undirected[0] & undirected[2])
    again = _split(mag, et)
    assert np.array_equal(again.val_neg_KQ, split.val_neg_KQ)
    assert np.array_equal(again.train_2E, split.train_2E)
    assert int(split.val_neg_KQ.max()) < mag.num_nodes(et[2])


def test_store_gives_each_part_its_sources_links(mag: HeteroGraph, tmp_path: Path) -> None:
    split = _split(mag, WRITES)
    assignment = partition_hetero(split.graph, "random", 3, 0)
    write_partitions(split.graph, assignment, tmp_path / "s", num_hops=2, links=split)
    offset = mag.node_offsets()["author"]
    got = []
    for part in range(3):
        et, links = load_relation_links(tmp_path / "s", part)
        assert et == WRITES
        owner = assignment.part_N[offset + links.train_2E[0]]
        assert (owner == part).all()
        got.append(links.val_2K)
    merged = np.concatenate(got, axis=1)
    assert sorted(map(tuple, merged.T.tolist())) == sorted(map(tuple, split.val_2K.T.tolist()))


def _config(parts: int, store: Path | None = None, et: tuple = CITES) -> RunConfig:
    return RunConfig(
        data=DataConfig(
            dataset="synthetic:mag",
            store=None if store is None else str(store),
            partitioner="random",
            dataset_params=(("reverse", True), ("scale", 0.002)),
            link_split=LinkSplitConfig(num_neg=30, edge_type="__".join(et)),
        ),
        cluster=replace(RunConfig().cluster, parts=parts),
        sampler=NeighborSampler.Config(fanouts=(4, 3)),
        model=ModelConfig(hidden=16, dropout=0.0),
        trainer=Trainer.Config(lr=0.01, batch_size=256, seed=3),
        loop=Coordinator.Config(epochs=2, progress=False, deadline_s=60.0),
        node_types=NodeTypesConfig(),
        link=LinkConfig(),
    )


@pytest.mark.parametrize("parts", [pytest.param(1, marks=pytest.mark.slow), 2])  # 1: --all
def test_link_training_runs_end_to_end(parts: int, tmp_path: Path) -> None:
    result = train_local(_config(parts), tmp_path)
    lines = result.history
    assert [m["epoch"] for m in lines] == [0, 1]
    for m in lines:
        assert 0.0 < m["val_mrr"] <= 1.0 and 0.0 < m["test_mrr"] <= 1.0
        assert np.isfinite(m["loss"])
    if parts > 1:  # halo rows of both the featured and the embedded types move
        assert {"paper", "author"} <= set(lines[0]["bytes_by_type"])


def test_exact_link_evaluation_equals_a_whole_graph_ranking(
    mag: HeteroGraph, tmp_path: Path
) -> None:
    split = _split(mag, CITES)
    store = tmp_path / "s"
    write_partitions(
        split.graph, partition_hetero(split.graph, "random", 2, 0), store, num_hops=2, links=split
    )
    template = worker_template(_config(2, store), store, store_info(store), "partitioned")
    group = LocalWorkerGroup(template, 60.0)
    group.start()
    try:
        group.run_epoch(0, 2, lambda _: None)
        got = combine_evals(group.evaluate(("val", "test")), 16).metrics
        model = group.workers[0].trainer.model
        x_dict = {"paper": torch.from_numpy(mag.nodes["paper"].x)}
        for t in ("author", "field_of_study", "institution"):
            table = torch.zeros(mag.num_nodes(t), 128)
            for w in group.workers:
                lid = torch.from_numpy(np.asarray(w.rank.hshard.nodes[t].owned_lid, dtype=np.int64))
                table[lid] = torch.from_numpy(w.rank.embeddings.local_rows(t))
            x_dict[t] = table
    finally:
        group.stop()
    relations = {et: (r.indptr, r.indices) for et, r in split.graph.relations.items()}
    h = full_typed_outputs(model.encoder.layers, relations, x_dict)["paper"]
    for name, links_2K, neg_KQ in (
        ("val", split.val_2K, split.val_neg_KQ),
        ("test", split.test_2K, split.test_neg_KQ),
    ):
        with torch.no_grad():
            src = h[torch.from_numpy(links_2K[0])]
            pos = model.score(src, h[torch.from_numpy(links_2K[1])])
            neg = model.score(src.unsqueeze(1), h[torch.from_numpy(neg_KQ)])
        want = link_metrics(link_sums(link_ranks(pos.double().numpy(), neg.double().numpy())))
        for key, value in want.items():
            assert got[f"{name}_{key}"] == pytest.approx(value, abs=1e-9), (name, key)


def test_store_of_another_relation_is_refused(tmp_path: Path) -> None:
    train_local(replace(_config(1), loop=replace(_config(1).loop, epochs=1)), tmp_path / "a")
    store = tmp_path / "a" / "store"
    with pytest.raises(ValueError, match="holds links of paper__cites__paper, not of"):
        train_local(_config(1, store, et=WRITES), tmp_path / "b")


def test_cli_trains_a_relation_of_synthetic_mag(tmp_path: Path) -> None:
    import json

    from gnnsys.cli import main

    out = tmp_path / "run"
    code = main(
        [
            "train",
            "synthetic:mag",
            "-D",
            "scale=0.002",
            "-D",
            "reverse=true",
            "--parts",
            "2",
            "--partitioner",
            "random",
            "--fanouts",
            "4,3",
            "--hidden",
            "8",
            "--epochs",
            "1",
            "--batch-size",
            "256",
            "--executor",
            "local",
            "--no-progress",
            "--task",
            "link",
            "--target-edge",
            "author__writes__paper",
            "--eval-negatives",
            "20",
            "--out",
            str(out),
        ]  # fmt: skip
    )
    assert code == 0
    [line] = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert 0.0 < line["val_mrr"] <= 1.0 and "test_hits@20" in line
    _, links = load_relation_links(out / "store", 0)
    assert links.val_neg_KQ.shape[1] == 20
