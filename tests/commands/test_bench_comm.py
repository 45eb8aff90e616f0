"""``gnnsys bench comm``: grid, best-row choice and the files it writes (tiny synthetic graph)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gnnsys.cli import main
from gnnsys.commands.bench_comm import CommConfig, grid, pick_best

REQUIRED = {
    "policy",
    "ratio",
    "codec",
    "aggregate_at",
    "remote_feature_bytes_per_epoch",
    "remote_vertices_per_epoch",
    "hit_rate",
    "test_acc",
    "epoch_seconds",
}


def test_grid_lists_the_no_cache_case_once_per_codec() -> None:
    configs = grid(["none", "degree"], [0.0, 0.1], ["fp32", "int8"])
    assert configs == [
        CommConfig("none", 0.0, "fp32"),
        CommConfig("none", 0.0, "int8"),
        CommConfig("degree", 0.1, "fp32"),
        CommConfig("degree", 0.1, "int8"),
    ]


def test_best_is_cheapest_within_half_a_point_at_ratio_at_most_a_quarter() -> None:
    def row(ratio: float, acc: float, nbytes: float) -> dict[str, object]:
        return {
            "aggregate_at": "requester",
            "ratio": ratio,
            "test_acc": acc,
            "remote_feature_bytes_per_epoch": nbytes,
        }

    base = row(0.0, 0.900, 100.0)
    rows = [base, row(0.25, 0.896, 10.0), row(0.1, 0.890, 1.0), row(0.5, 0.9, 0.5)]
    assert pick_best(rows, base) is rows[1]


@pytest.mark.timeout(240)
def test_bench_comm_writes_table_jsonl_and_plots(tmp_path: Path) -> None:
    out = tmp_path / "comm"
    argv = [
        "bench", "comm", "synthetic:sbm", "-D", "num_nodes=800", "-D", "num_features=8",
        "--parts", "2", "--policies", "none,presample", "--ratios", "0,0.25",
        "--codecs", "fp32,int8,binary", "--aggregate-at", "requester,owner", "--epochs", "1",
        "--fanouts", "4,4", "--batch-size", "32", "--confirm-seeds", "0", "--out", str(out),
    ]  # fmt: skip
    assert main(argv) == 0
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert all(REQUIRED <= set(r) for r in rows)
    assert {r["codec"] for r in rows} == {"fp32", "int8"}  # sbm features are not 0/1
    base = [r for r in rows if r["baseline"]]
    assert len(base) == 1 and base[0]["bytes_reduction"] == 1.0 and base[0]["hit_rate"] == 0.0
    assert sum(r["best"] for r in rows) <= 1
    owner = [r for r in rows if r["aggregate_at"] == "owner"]
    assert owner and all(r["acc_source"] == "trained" for r in owner)
    cached = [r for r in rows if r["policy"] == "presample"]
    assert cached and all(r["hit_rate"] > 0 for r in cached)
    assert "(baseline)" in (out / "results.md").read_text()
    assert (out / "pareto.png").stat().st_size > 0 and (out / "hit_rate.png").stat().st_size > 0


def test_bench_comm_link_task_reports_bytes_with_and_without_cache_and_int8(
    tmp_path: Path,
) -> None:
    out = tmp_path / "comm-link"
    argv = [
        "bench", "comm", "synthetic:sbm", "-D", "num_nodes=600", "-D", "num_features=8",
        "--task", "link", "--eval-negatives", "10", "--parts", "2", "--policies", "adaptive",
        "--ratios", "0.25", "--codecs", "fp32,int8", "--epochs", "1", "--fanouts", "4,4",
        "--batch-size", "32", "--threads", "1", "--out", str(out),
    ]  # fmt: skip
    assert main(argv) == 0
    rows = {
        (r["policy"], r["codec"]): r
        for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())
    }
    assert set(rows) == {
        ("none", "fp32"),
        ("none", "int8"),
        ("adaptive", "fp32"),
        ("adaptive", "int8"),
    }
    assert all(r["task"] == "link" for r in rows.values())
    base, best = rows[("none", "fp32")], rows[("adaptive", "int8")]
    assert base["bytes_reduction"] == 1.0 and best["hit_rate"] > 0
    assert (
        best["remote_feature_bytes_per_epoch"]
        < rows[("none", "int8")]["remote_feature_bytes_per_epoch"]
    )
    assert (out / "store" / "part-0" / "link_train.npy").exists()


def test_bench_comm_on_a_heterogeneous_dataset(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "comm"
    argv = [
        "bench", "comm", "synthetic:mag", "-D", "scale=0.002", "-D", "reverse=true",
        "--parts", "2", "--policies", "none,degree,presample", "--ratios", "0,0.1",
        "--codecs", "fp32,int8,binary", "--aggregate-at", "requester,owner", "--epochs", "1",
        "--fanouts", "4,4", "--batch-size", "256", "--confirm-seeds", "0", "--out", str(out),
    ]  # fmt: skip
    with caplog.at_level("WARNING", logger="gnnsys.commands.bench_comm"):
        assert main(argv) == 0
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "binary" in warned and "owner" not in warned
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert all(REQUIRED <= set(r) for r in rows)
    requester = [r for r in rows if r["aggregate_at"] == "requester"]
    assert {(r["policy"], r["codec"]) for r in requester} == {
        (p, c) for p in ("none", "degree", "presample") for c in ("fp32", "int8")
    }
    owner = [r for r in rows if r["aggregate_at"] == "owner"]
    assert owner and all(r["acc_source"] == "trained" for r in owner)
    by = {(r["policy"], r["codec"]): r for r in requester}
    assert (
        by["none", "int8"]["remote_feature_bytes_per_epoch"]
        < by["none", "fp32"]["remote_feature_bytes_per_epoch"]
    )
    assert by["degree", "fp32"]["hit_rate"] > 0 and by["presample", "int8"]["hit_rate"] > 0
    assert main([*argv[:-2], "--model", "gcn", "--out", str(tmp_path / "x")]) == 2
