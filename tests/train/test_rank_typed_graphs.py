"""Heterogeneous training in the runtime: typed owners, embeddings, ledger, checkpoints, CLI.

Claims tested on a small ``synthetic:mag`` (scale 0.002 with reverse relations, 3.9 k nodes):

* a rank's typed batch (every ``n_id``, every block) and its rows (features, embeddings) equal
  what one process computes on the whole graph, at 1, 2 and 4 parts;
* an epoch (one or several steps) of a ``P``-part run is **bit-identical** to one process that
  simulates the ``P`` ranks on the whole graph (their batches, mean dense gradient,
  rank-ordered sparse embedding gradient, Adam and SparseAdam), at ``P`` = 1, 2, 4:
  distribution changes nothing;
* the ledger's bytes per node type equal an independent replay on the whole graph;
* two runs with one seed are identical; a stopped run resumed from its checkpoint equals an
  uninterrupted one (dense weights, embedding rows, metrics);
* a rank that raises aborts the run naming it; on Ray, a rank that exits is restarted from the
  checkpoint through the CLI.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.nn import functional

from gnnsys.cache import CodecConfig
from gnnsys.config import RunConfig
from gnnsys.distributed.batches import epoch_positions
from gnnsys.errors import WorkerFailedError
from gnnsys.models import ModelConfig
from gnnsys.models.sparse_embedding import EmbeddingConfig, LocalEmbeddingGroup, init_rows
from gnnsys.sampler import NeighborSampler
from gnnsys.sampler.neighbor import RelationalSampler, csr_sources
from gnnsys.store import read_shard
from gnnsys.store.info import store_info
from gnnsys.store.source import DataConfig
from gnnsys.train.control.checkpoint import load_checkpoint
from gnnsys.train.control.coordinator import Coordinator
from gnnsys.train.control.local_group import LocalWorkerGroup
from gnnsys.train.control.run import train_local, worker_template
from gnnsys.train.node_types import NodeTypesConfig
from gnnsys.train.rank import rank_model
from gnnsys.train.schedule import batch_seed_for
from gnnsys.train.trainer import Trainer
from gnnsys.train.worker import FaultSpec
from gnnsys.types.relations import HeteroGraph

pytestmark = pytest.mark.usefixtures("shared_stores")  # runs share their stores (conftest)

SCALE = 0.002
PARAMS = (("reverse", True), ("scale", SCALE))
FEATURELESS = ("author", "field_of_study", "institution")
EMB = EmbeddingConfig(dim=128, lr=0.01, seed=3)


def _config(store: Path, parts: int, *, epochs: int = 1, batch: int = 1024, **kw: Any) -> RunConfig:
    return RunConfig(
        data=DataConfig(dataset="synthetic:mag", store=str(store)),
        cluster=replace(RunConfig().cluster, parts=parts),
        sampler=NeighborSampler.Config(fanouts=(6, 4)),
        model=ModelConfig(hidden=16, dropout=0.0),
        trainer=Trainer.Config(lr=0.01, batch_size=batch, seed=3),
        loop=Coordinator.Config(epochs=epochs, progress=False, deadline_s=60.0, **kw),
        node_types=NodeTypesConfig(),
    )


def _group(store: Path, parts: int, topology: str = "partitioned") -> LocalWorkerGroup:
    cfg = _config(store, parts)
    template = worker_template(cfg, store, store_info(store), topology)
    group = LocalWorkerGroup(template, 60.0)
    group.start()
    return group


def _whole_sampler(mag: HeteroGraph) -> RelationalSampler:
    fanouts = {et: (6, 4) for et in mag.edge_types}
    config = RelationalSampler.Config(fanouts=fanouts)
    return RelationalSampler(config, sources=csr_sources(mag), node_types=mag.node_types)


def _rank_seeds(store: Path, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    papers = read_shard(store, rank).nodes["paper"]
    pos = np.flatnonzero(np.asarray(papers.data["train_mask"]))
    lid = torch.from_numpy(np.asarray(papers.owned_lid, dtype=np.int64)[pos])
    return lid, torch.from_numpy(np.asarray(papers.data["y"], dtype=np.int64)[pos])


# ---- batches and rows ---------------------------------------------------------------------------
def test_replicated_ranks_train_the_partitioned_run_without_structure_traffic(
    stores: dict[int, Path],
) -> None:
    got = {}
    for topology in ("partitioned", "replicated"):
        group = _group(stores[2], 2, topology)
        try:
            reports = group.run_epoch(0, 2, lambda _: None)
            weights = group.collect()[0].model
        finally:
            group.stop()
        got[topology] = (reports, weights)
    for a, b in zip(got["partitioned"][0], got["replicated"][0], strict=True):
        assert a.stats.loss_sum == b.stats.loss_sum
        assert a.traffic.bytes["structure_response"] > 0
        assert b.traffic.bytes["structure_response"] == 0  # every relation's CSR is local
        assert a.traffic.bytes["feature_response"] == b.traffic.bytes["feature_response"]
    for key, value in got["partitioned"][1].items():
        assert torch.equal(value, got["replicated"][1][key]), key


@pytest.mark.parametrize("parts", [1, 2, 4])
def test_typed_batch_and_rows_equal_the_whole_graph(
    mag: HeteroGraph, stores: dict[int, Path], parts: int
) -> None:
    whole = _whole_sampler(mag)
    group = _group(stores[parts], parts)
    try:
        for rank, worker in enumerate(group.workers):
            seeds = _rank_seeds(stores[parts], rank)[0][:40]
            got = worker.trainer.sampler.sample(seeds, seed=11)
            want = whole.sample(seeds, input_type="paper", seed=11)
            for t in mag.node_types:
                assert torch.equal(got.n_id[t], want.n_id[t]), (parts, rank, t)
            for layer_got, layer_want in zip(got.blocks, want.blocks, strict=True):
                for et, block in layer_got.items():
                    assert torch.equal(block.rowptr, layer_want[et].rowptr), et
                    assert torch.equal(block.col, layer_want[et].col), et
                    assert bool((block.e_id == -1).all()), et  # edge ids: not read
            x_dict, leaves = worker.trainer.inputs.fetch(got)
            x = torch.from_numpy(mag.nodes["paper"].x)
            assert torch.equal(x_dict["paper"], x[got.n_id["paper"]])
            assert sorted(leaves) == list(FEATURELESS)
            for t in FEATURELESS:  # embeddings start from rows that depend only on the id
                assert torch.equal(x_dict[t], init_rows(EMB, t, got.n_id[t]))
    finally:
        group.stop()


# ---- one step equals a single-process simulation of the ranks ------------------------------------
def _reference_steps(
    mag: HeteroGraph, store: Path, parts: int, batch: int
) -> tuple[dict[str, Any], dict]:
    """Epoch 0 of ``parts`` ranks simulated in one process on the whole graph."""
    torch.set_num_threads(1)  # as every rank (matmul blocking can depend on threads)
    cfg = _config(store, parts, batch=batch)
    spec = worker_template(cfg, store, store_info(store), "partitioned")
    model = rank_model(spec)
    tables = {
        t: LocalEmbeddingGroup(EMB, node_type=t, owner_of=torch.zeros(mag.num_nodes(t)).long())
        for t in FEATURELESS
    }
    x = torch.from_numpy(mag.nodes["paper"].x)
    whole = _whole_sampler(mag)
    seeds = [_rank_seeds(store, r) for r in range(parts)]
    num_batches = max(1, -(-sum(len(s[0]) for s in seeds) // (batch * parts)))  # global
    params = list(model.parameters())
    adam = torch.optim.Adam(params, lr=0.01)
    schedule = [epoch_positions(s[0], num_batches, seed=3, epoch=0) for s in seeds]
    for b in range(num_batches):
        total = torch.zeros(sum(p.numel() for p in params) + 1)  # ThreadSync: rank-order sum
        sparse: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {t: [] for t in FEATURELESS}
        for r, (lid, y) in enumerate(seeds):
            pos = schedule[r][b]
            sub = whole.sample(lid[pos], input_type="paper", seed=batch_seed_for(3, r, 0, b))
            leaves = {t: tables[t].rows(sub.n_id[t]).requires_grad_() for t in FEATURELESS}
            logits = model({"paper": x[sub.n_id["paper"]], **leaves}, sub.blocks)["paper"]
            # summed over seeds; the step divides by the seeds of every rank
            loss = functional.cross_entropy(logits[: sub.batch_size], y[pos], reduction="sum")
            grads = torch.autograd.grad(
                loss, params + [leaves[t] for t in FEATURELESS], allow_unused=True
            )
            total += torch.cat(
                [
                    *(
                        (torch.zeros_like(p) if g is None else g).reshape(-1)
                        for p, g in zip(params, grads, strict=False)
                    ),
                    torch.tensor([float(pos.numel())]),
                ]
            )
            for t, g in zip(FEATURELESS, grads[len(params) :], strict=True):
                sparse[t].append((sub.n_id[t], g))
        mean = total / parts
        dense = mean[:-1] / mean[-1]
        offset = 0
        for p in params:
            p.grad = dense[offset : offset + p.numel()].view_as(p).clone()
            offset += p.numel()
        adam.step()
        for t, contributions in sparse.items():
            tables[t].step(contributions, divide_by=round(float(mean[-1]) * parts))
    return model.state_dict(), {t: tables[t].table() for t in FEATURELESS}


@pytest.mark.parametrize(
    ("parts", "batch", "prefetch"),
    [(1, 2048, 2), (2, 2048, 2), (4, 2048, 2), (2, 128, 2), (4, 96, 2), (2, 128, 0), (4, 96, 4)],
)
def test_epoch_is_bit_identical_to_a_single_process_simulation(
    mag: HeteroGraph,
    stores: dict[int, Path],
    parts: int,
    batch: int,
    prefetch: int,
    tmp_path: Path,
) -> None:
    cfg = _config(stores[parts], parts, batch=batch)
    cfg = replace(cfg, trainer=replace(cfg.trainer, prefetch=prefetch))  # any depth, same steps
    train_local(replace(cfg, eval=replace(cfg.eval, every=0)), tmp_path)
    ckpt = load_checkpoint(tmp_path)
    assert ckpt is not None
    want_model, want_tables = _reference_steps(mag, stores[parts], parts, batch)
    for k, v in want_model.items():
        assert torch.equal(ckpt.model_state[k], v), k
    for r in range(parts):
        owned = ckpt.rng_by_rank[r]["owned"]["shards"]
        nodes = read_shard(stores[parts], r).nodes
        for t in FEATURELESS:
            lid = torch.from_numpy(np.asarray(nodes[t].owned_lid, dtype=np.int64))
            assert torch.equal(owned[t]["weight"], want_tables[t][lid]), (r, t)


# ---- ledger, determinism, resume, faults ---------------------------------------------------------
def _replay_bytes(mag: HeteroGraph, store: Path, parts: int, num_batches: int) -> dict:
    """Independent count of an epoch's typed traffic (fp32 rows, no cache) on the whole graph."""
    part_of = {t: np.asarray(read_part_N(store, mag, t)) for t in mag.node_types}
    whole = _whole_sampler(mag)
    out: dict[str, dict[str, int]] = {t: {} for t in mag.node_types}

    def add(t: str, cat: str, n: int) -> None:
        out[t][cat] = out[t].get(cat, 0) + n

    for r in range(parts):
        lid = _rank_seeds(store, r)[0]
        for b, pos in enumerate(epoch_positions(lid, num_batches, seed=3, epoch=0)):
            if not len(pos):
                continue
            sub = whole.sample(lid[pos], input_type="paper", seed=batch_seed_for(3, r, 0, b))
            for t, n_id in sub.n_id.items():
                remote = int((part_of[t][n_id.numpy()] != r).sum())
                width = 128
                add(t, "feature_request", 8 * remote)
                add(t, "feature_response", 4 * width * remote)
                if t in FEATURELESS and parts > 1:
                    add(t, "embedding_grad", (8 + 4 * width) * remote)
            rowptr0 = {et: blk.rowptr for et, blk in sub.blocks[0].items()}
            for (_, _, dst), ptr in rowptr0.items():
                counts = (ptr[1:] - ptr[:-1]).numpy()
                nodes = sub.num_sampled_nodes[dst]
                for hop in range(2):
                    lo, hi = sum(nodes[:hop]), sum(nodes[: hop + 1])
                    far = part_of[dst][sub.n_id[dst][lo:hi].numpy()] != r
                    add(dst, "structure_request", 8 * int(far.sum()))
                    edges = int(counts[lo:hi][far].sum())
                    add(dst, "structure_response", 8 * (int(far.sum()) + edges))  # no e_id
    return {t: {c: v for c, v in cats.items() if v} for t, cats in out.items()}


def read_part_N(store: Path, mag: HeteroGraph, node_type: str) -> np.ndarray:
    offset = mag.node_offsets()[node_type]
    part_N = np.load(store / "node_to_part.npy")
    return part_N[offset : offset + mag.num_nodes(node_type)]


@pytest.mark.parametrize("parts", [2, 4])
def test_ledger_by_type_equals_a_replay(
    mag: HeteroGraph, stores: dict[int, Path], parts: int, tmp_path: Path
) -> None:
    cfg = replace(_config(stores[parts], parts, batch=128), eval=replace(RunConfig().eval, every=0))
    line = train_local(cfg, tmp_path).history[0]
    want = _replay_bytes(mag, stores[parts], parts, line["num_batches"])
    assert line["bytes_by_type"] == want
    typed = sum(v for cats in want.values() for v in cats.values())
    assert sum(line["bytes"].values()) == typed + line["bytes"]["allreduce"]


def test_same_seed_same_run_and_resume_equals_uninterrupted(
    stores: dict[int, Path], tmp_path: Path
) -> None:
    store = stores[2]
    full = train_local(_config(store, 2, epochs=2, batch=256), tmp_path / "a").history
    again = train_local(_config(store, 2, epochs=2, batch=256), tmp_path / "b").history
    train_local(_config(store, 2, epochs=1, batch=256), tmp_path / "c")
    resumed = train_local(_config(store, 2, epochs=2, batch=256, resume=True), tmp_path / "c")
    for run in (again, resumed.history):
        assert [m["loss"] for m in run] == [m["loss"] for m in full]
        assert [m.get("val_acc") for m in run] == [m.get("val_acc") for m in full]
        assert [m["bytes_by_type"] for m in run] == [m["bytes_by_type"] for m in full]
    ckpts = [load_checkpoint(tmp_path / d) for d in "ac"]
    assert all(c is not None for c in ckpts)
    a, c = ckpts[0], ckpts[1]
    assert a is not None and c is not None
    for k, v in a.model_state.items():
        assert torch.equal(v, c.model_state[k]), k
    for r in range(2):
        for t in FEATURELESS:
            ta, tc = a.rng_by_rank[r]["owned"], c.rng_by_rank[r]["owned"]
            assert torch.equal(ta["shards"][t]["weight"], tc["shards"][t]["weight"]), (r, t)
            assert ta["steps"] == tc["steps"] == 2 * full[0]["num_batches"]


@pytest.mark.parametrize("codec", ["fp32", "int8"])
def test_a_typed_run_trains_on_the_device_and_resumes_on_the_host(
    stores: dict[int, Path], tmp_path: Path, device: torch.device, codec: str
) -> None:
    """Embedding rows cross to the device on the autograd graph, int8 rows still encoded (the
    fused layer 0 sums them there); state resumes anywhere."""
    cfg = replace(_config(stores[2], 2, epochs=2, batch=256), codec=CodecConfig(name=codec))
    on = replace(cfg, cluster=replace(cfg.cluster, device=device.type))
    host = replace(cfg, cluster=replace(cfg.cluster, device="cpu"))
    want = [m["loss"] for m in train_local(host, tmp_path / "host").history]
    got = train_local(on, tmp_path / "device").history
    assert {d.split(":")[0] for d in got[0]["devices"]} == {device.type}
    assert [m["loss"] for m in got] == pytest.approx(want, rel=1e-3)
    train_local(replace(on, loop=replace(on.loop, epochs=1)), tmp_path / "moved")
    resumed = train_local(replace(host, loop=replace(host.loop, resume=True)), tmp_path / "moved")
    assert [m["loss"] for m in resumed.history] == pytest.approx(want, rel=1e-3)


@pytest.mark.parametrize(("codec", "aggregate_at"), [("int8", "requester"), ("fp32", "owner")])
def test_typed_rows_on_the_device_train_the_same_weights(
    stores: dict[int, Path], tmp_path: Path, device: torch.device, codec: str, aggregate_at: str
) -> None:
    """``--features-on device``: each featured type's own rows and cache slots on the trainer's
    device (int8: the fused layer 0 sums them there; owner sums: combined on the host); the
    counters, bytes and weights are those of host rows."""
    from gnnsys.train.layer0.base import FirstLayerConfig
    from tests.train.run_configs import host_and_device_rows

    cfg = replace(_config(stores[2], 2, epochs=2, batch=256), codec=CodecConfig(name=codec))
    cfg = replace(cfg, layer0=FirstLayerConfig(placement=aggregate_at))
    cfg = replace(cfg, cluster=replace(cfg.cluster, device=device.type))
    runs = host_and_device_rows(cfg, tmp_path)
    (hist_a, state_a), (hist_b, state_b) = runs["host"], runs["device"]
    assert [m["cache"]["rows_hit"] for m in hist_a] == [m["cache"]["rows_hit"] for m in hist_b]
    assert hist_a[-1]["cache"]["rows_hit"] > 0
    assert [m["bytes_by_type"] for m in hist_a] == [m["bytes_by_type"] for m in hist_b]
    for key, value in state_a.items():  # one device, the same sums: the same weights
        torch.testing.assert_close(value, state_b[key], rtol=0, atol=0)


@pytest.mark.parametrize("model", ["rgcn", "gat"])
def test_other_models_train_and_metrics_line_has_every_type(
    stores: dict[int, Path], tmp_path: Path, model: str
) -> None:
    cfg = _config(stores[2], 2, epochs=2, batch=256)
    cfg = replace(cfg, node_types=replace(cfg.node_types, model=model))
    history = train_local(cfg, tmp_path).history
    assert history[1]["loss"] < history[0]["loss"]
    assert set(history[0]["bytes_by_type"]) == {"paper", *FEATURELESS}
    assert {"val_acc", "test_acc", "train_acc"} <= set(history[-1])
    config = json.loads((tmp_path / "summary.json").read_text())["config"]
    assert config["node_types"]["model"] == model


def test_per_type_codecs_and_cache_cut_the_typed_bytes(
    stores: dict[int, Path], tmp_path: Path
) -> None:
    base = replace(_config(stores[4], 4, batch=128), eval=replace(RunConfig().eval, every=0))
    plain = train_local(base, tmp_path / "plain").history[0]["bytes_by_type"]
    cfg = replace(
        base,
        codec=replace(base.codec, name="paper=int8,author=fp16"),
        cache=replace(base.cache, policy="degree", ratio=0.5),
    )
    line = train_local(cfg, tmp_path / "coded").history[0]
    coded = line["bytes_by_type"]
    assert coded["author"]["feature_response"] * 2 == plain["author"]["feature_response"]
    assert coded["paper"]["feature_response"] < plain["paper"]["feature_response"] / 4
    assert coded["institution"] == plain["institution"]  # fp32, no cache: unchanged
    assert line["cache"]["rows_hit"] > 0
    assert line["cache"]["bytes_wire"] == line["cache"]["bytes_received"]  # no wire stage
    zstd = replace(cfg, codec=replace(cfg.codec, wire="zstd"))
    wired = train_local(zstd, tmp_path / "wired").history[0]
    assert wired["loss"] == line["loss"] and wired["bytes_by_type"] == coded  # lossless
    assert 0 < wired["cache"]["bytes_wire"] < wired["cache"]["bytes_received"]


def test_rank_that_raises_aborts_naming_it(stores: dict[int, Path], tmp_path: Path) -> None:
    from gnnsys.train.control import run as run_module

    cfg = _config(stores[2], 2, epochs=2, batch=256)
    prepared = run_module._prepare(cfg, tmp_path)
    with pytest.raises(WorkerFailedError, match="injected fault at rank 1"):
        run_module._run(
            cfg, tmp_path, prepared, executor="local", fault=FaultSpec("raise", 1, 1, 0)
        )


# ---- CLI ----------------------------------------------------------------------------------------
def test_cli_names_options_that_do_not_apply(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gnnsys.cli import main

    code = main(["train", "synthetic:mag", "--out", str(tmp_path), "--model", "GIN"])
    assert code == 2
    err = capsys.readouterr().err
    assert "do not apply to heterogeneous" in err and "--model GIN (a PyG model" in err


def test_cli_gcn_on_a_typed_graph_names_the_relation_that_joins_two_types(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI passes ``--model gcn`` to the typed runtime, whose check names the relation."""
    from gnnsys.cli import main

    argv = ["train", "synthetic:mag", "-D", "scale=0.002", "--executor", "local", "--out"]
    assert main([*argv, str(tmp_path), "--model", "gcn", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "model gcn needs every relation to lead from a node type to itself" in err
    assert "joins two types" in err and "do not apply" not in err


@pytest.mark.parametrize(
    ("dataset", "flags", "named"),
    [
        ("synthetic:mag", ["--task", "link"], "--target-edge SRC__REL__DST"),
        ("synthetic:sbm", ["--task", "link", "--target-edge", "a__b__c"], "homogeneous graph"),
        ("synthetic:mag", ["--target-edge", "paper__cites__paper"], "add --task link"),
    ],
)
def test_cli_link_task_names_its_relation(
    dataset: str, flags: list[str], named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gnnsys.cli import main

    assert main(["train", dataset, "--out", str(tmp_path), *flags]) == 2
    assert named in capsys.readouterr().err


def test_codec_auto_is_resolved_per_type(stores: dict[int, Path]) -> None:
    from gnnsys.cache.codecs import PerTypeCodecConfig
    from gnnsys.train.control.run import resolved_per_type_codec

    base = _config(stores[2], 2)
    info = store_info(stores[2])
    for spec, want in (("auto", "int4"), ("paper=auto,*=fp16", "int4"), ("paper=int8", "int8")):
        cfg = replace(base, codec=replace(base.codec, name=spec, lossy="int4"))
        got = PerTypeCodecConfig.parse(
            resolved_per_type_codec(cfg, stores[2], info).name, info.node_types
        )
        assert got.for_type("paper").name == want, spec  # the features fit no lossless codec
        other = "fp16" if "*=fp16" in spec else "fp32"  # featureless: auto is fp32
        assert {got.for_type(t).name for t in FEATURELESS} == {other}, spec


def test_cli_rgcn_needs_a_hetero_dataset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gnnsys.cli import main

    assert main(["train", "synthetic:sbm", "--model", "rgcn", "--out", str(tmp_path)]) == 2
    assert "heterogeneous dataset" in capsys.readouterr().err


def test_cli_config_of_per_relation_fanouts_and_type_codecs() -> None:
    import argparse

    from gnnsys.commands.train import add_parser, build_config

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(
        [
            "train",
            "synthetic:mag",
            "-D",
            "scale=0.01",
            "--fanouts",
            "8,4;paper__cites__paper=3,2",
            "--codec",
            "paper=int8,author=fp16",
            "--model",
            "rgcn",
        ]  # fmt: skip
    )
    cfg = build_config(args)
    assert cfg.node_types.model == "rgcn"
    assert cfg.sampler.fanouts == (8, 4)
    assert cfg.node_types.fanouts == (("paper__cites__paper", (3, 2)),)
    assert cfg.codec.name == "paper=int8,author=fp16"
    assert dict(cfg.data.dataset_params)["scale"] == 0.01


@pytest.mark.ray
@pytest.mark.slow  # CI: test_halo_runtime's test_owner_reads_local_equals_remote (one runtime)
@pytest.mark.timeout(300)
def test_owner_reads_local_equals_remote_on_ray(
    ray_session: Any, stores: dict[int, Path], tmp_path: Path
) -> None:
    from gnnsys.train.control.run import train

    cfg = _config(stores[2], 2, batch=512)
    runs = {}
    for reads in ("remote", "local"):
        run_cfg = replace(cfg, cluster=replace(cfg.cluster, owner_reads=reads))
        runs[reads] = train(run_cfg, tmp_path / reads).history
    for a, b in zip(runs["remote"], runs["local"], strict=True):
        assert a["loss"] == b["loss"] and a["test_acc"] == b["test_acc"]
        assert a["bytes_by_type"] == b["bytes_by_type"]


@pytest.mark.ray
@pytest.mark.slow  # CI: the restart machinery is shared with the homogeneous runtime's tests
@pytest.mark.timeout(600)
def test_cli_on_ray_restarts_a_rank_that_exits(stores: dict[int, Path], tmp_path: Path) -> None:
    out = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "gnnsys", "train", "--store", str(stores[2]), "--parts", "2",
        "--fanouts", "6,4", "--hidden", "16", "--batch-size", "512", "--epochs", "3",
        "--deadline", "120", "--out", str(out), "--codec", "paper=int8",
        "--inject-fault", "exit:1:1:0",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=580)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in lines] == [0, 1, 2]
    assert lines[-1]["restarts"] == 1
    assert set(lines[-1]["bytes_by_type"]) == {"paper", *FEATURELESS}
    assert "author MiB" in proc.stdout


def test_cli_trains_synthetic_mag_in_process(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
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
            "2",
            "--batch-size",
            "512",
            "--executor",
            "local",
            "--no-progress",
            "--out",
            str(out),
        ]  # fmt: skip
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "best val_acc" in printed and "author MiB" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["executor"] == "local" and summary["partition"]["num_parts"] == 2
    assert (out / "run.json").exists() and (out / "store" / "manifest.json").exists()
    assert main(["train", "synthetic:mag", "-D", "scale=0.002", "-D", "reverse=true", "--parts",
                 "2", "--partitioner", "random", "--fanouts", "4,3", "--hidden", "8", "--epochs",
                 "3", "--batch-size", "512", "--executor", "local", "--no-progress", "--resume",
                 "--out", str(out)]) == 0  # fmt: skip
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["epoch"] for x in lines] == [0, 1, 2]
