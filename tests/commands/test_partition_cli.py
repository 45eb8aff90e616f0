from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from gnnsys.cli import main
from gnnsys.store.layout import shard_file
from gnnsys.types import ONE_TYPE, Graph

REQUIRED = {
    "method",
    "parts",
    "edge_cut",
    "edge_cut_fraction",
    "node_balance",
    "train_balance",
    "halo_factor",
    "remote_fetches_per_epoch",
    "seconds",
    "peak_rss_bytes",
}


@pytest.fixture(scope="module")
def graph_npz(tiny_graph: Graph, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("data") / "tiny.npz"
    g = tiny_graph
    np.savez(
        path,
        indptr=g.indptr,
        indices=g.indices,
        x=g.x,
        y=g.y,
        train_mask=g.train_mask,
        val_mask=g.val_mask,
        test_mask=g.test_mask,
    )
    return path


def test_partition_then_verify(
    graph_npz: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "parts"
    argv = ["partition", str(graph_npz), "--parts", "3", "--method", "fennel", "--out", str(out)]
    assert main([*argv, "--seed", "1", "--json", "-O", "passes=2"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["parts"] == 3 and summary["num_nodes"] == 1000
    assert 0 < summary["edge_cut_fraction"] < 1 and summary["peak_rss_bytes"] > 0
    assert main(["store", "verify", str(out)]) == 0
    text = capsys.readouterr().out
    assert "OK" in text and "3 parts (fennel, seed 1)" in text


def test_partition_table_and_balance(
    graph_npz: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "p"
    argv = ["partition", str(graph_npz), "--parts", "2", "--out", str(out)]
    assert main([*argv, "--balance", "nodes,train"]) == 0
    text = capsys.readouterr().out
    assert "edge_cut_fraction" in text and "owned" in text
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["params"]["balance"] == ["nodes", "train"]


def test_verify_exit_codes_on_corruption(
    graph_npz: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "parts"
    assert (
        main(["partition", str(graph_npz), "--parts", "2", "--method", "hash", "--out", str(out)])
        == 0
    )
    capsys.readouterr()
    data = bytearray((out / shard_file(0, "y")).read_bytes())
    data[-1] ^= 1
    (out / shard_file(0, "y")).write_bytes(bytes(data))
    assert main(["store", "verify", str(out)]) == 1
    err = capsys.readouterr().err
    assert shard_file(0, "y") in err and "sha256 mismatch" in err
    assert main(["store", "verify", str(tmp_path / "missing")]) == 1


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--parts", "5000"], "num_parts=5000"),
        (["--parts", "2", "--method", "ldg", "--balance", "nodes"], "--balance applies"),
        (["--parts", "2", "-O", "passes"], "KEY=VALUE"),
    ],
)
def test_partition_errors_exit_2(
    graph_npz: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    message: str,
) -> None:
    assert main(["partition", str(graph_npz), "--out", str(tmp_path / "o"), *extra]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_bench_partition_outputs(graph_npz: Path, tmp_path: Path) -> None:
    out = tmp_path / "bench"
    argv = ["bench", "partition", str(graph_npz), "--parts", "2,4", "--methods", "random,metis"]
    assert main([*argv, "--fanouts", "5,5", "--batch-size", "64", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [(r["parts"], r["method"]) for r in rows] == [
        (2, "random"),
        (2, "metis"),
        (4, "random"),
        (4, "metis"),
    ]
    for row in rows:
        assert REQUIRED <= row.keys()
        assert row["remote_fetches_per_epoch"] >= 0
    by = {(r["parts"], r["method"]): r for r in rows}
    assert by[(4, "metis")]["edge_cut"] < by[(4, "random")]["edge_cut"]
    assert "| P | method |" in (out / "results.md").read_text()
    for png in ("cut.png", "halo.png", "time.png", "remote.png"):
        assert (out / png).stat().st_size > 0


def test_bench_partition_no_sample_reports_the_halo_bound(graph_npz: Path, tmp_path: Path) -> None:
    out = tmp_path / "bench"
    argv = ["bench", "partition", str(graph_npz), "--parts", "2", "--methods", "random"]
    assert main([*argv, "--fanouts", "5,5", "--no-sample", "--out", str(out)]) == 0
    (row,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert row["remote_fetches_source"] == "khop_halo_upper_bound"
    assert row["remote_fetches_per_epoch"] == row["remote_fetch_upper_bound"]


def test_remote_fetch_simulation_counts_sampled_nodes_owned_elsewhere(tiny_graph: Graph) -> None:
    """One epoch by hand: every part's train seeds in batches, the NeighborSampler's nodes."""
    from gnnsys.sampler import CSRNeighborSource, NeighborSampler, batch_seed
    from gnnsys.sampler.remote_fetches import simulate_remote_fetches

    part_N = (np.arange(tiny_graph.num_nodes) % 3).astype(np.int64)
    train = np.arange(tiny_graph.num_nodes) % 2 == 0
    sampler = NeighborSampler(
        NeighborSampler.Config(fanouts=(4, 3)), source=CSRNeighborSource.from_graph(tiny_graph)
    )
    got = simulate_remote_fetches(sampler.engine, {ONE_TYPE: part_N}, {ONE_TYPE: train}, 3, 50, 7)
    rng, want = np.random.default_rng(7), 0
    for part in range(3):
        seeds = rng.permutation(np.flatnonzero((part_N == part) & train))
        for b, lo in enumerate(range(0, seeds.shape[0], 50)):
            batch = torch.from_numpy(seeds[lo : lo + 50])
            n_id = sampler.sample(batch, seed=batch_seed(7, 0, part * 1_000_003 + b)).n_id
            want += int(np.count_nonzero(part_N[n_id.numpy()] != part))
    assert got == {ONE_TYPE: want} and want > 0
