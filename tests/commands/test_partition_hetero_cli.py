"""`gnnsys partition|bench partition|store verify` on a tiny synthetic:mag."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gnnsys.cli import main

TINY = ["synthetic:mag", "-D", "scale=0.002", "-D", "reverse=true"]


def test_partition_writes_a_hetero_store_and_verify_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "st"
    assert (
        main(["partition", *TINY, "--parts", "2", "--method", "metis", "--out", str(out), "--json"])
        == 0
    )
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["parts"] == 2 and "balance[paper]" in summary
    assert "cut[paper__cites__paper]" in summary
    assert main(["store", "verify", str(out)]) == 0
    assert "heterogeneous synthetic:mag" in capsys.readouterr().out
    x = out / "part-0" / "nodes" / "paper" / "x.npy"
    raw = bytearray(x.read_bytes())
    raw[-1] ^= 1
    x.write_bytes(bytes(raw))
    assert main(["store", "verify", str(out)]) == 1
    assert "part-0/nodes/paper/x.npy" in capsys.readouterr().err


def test_bench_partition_reports_per_type_and_relation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench"
    args = [
        "bench",
        "partition",
        *TINY,
        "--parts",
        "2",
        "--methods",
        "random,fennel",
        "--fanouts",
        "5,5",
        "--batch-size",
        "64",
        "--out",
        str(out),
    ]
    assert main(args) == 0
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["method"] for r in rows] == ["random", "fennel"]
    for row in rows:
        assert set(row["node_types"]) == {"paper", "author", "institution", "field_of_study"}
        assert "paper__cites__paper" in row["relations"]
        assert row["remote_fetches_source"] == "simulated_sampling"
        assert row["remote_fetches_per_epoch"]["paper"] >= 0
    assert "bal paper" in (out / "results.md").read_text()


def test_bench_refuses_a_homogeneous_only_method(tmp_path: Path) -> None:
    args = [
        "bench",
        "partition",
        *TINY,
        "--parts",
        "2",
        "--methods",
        "kahip",
        "--out",
        str(tmp_path / "b"),
    ]
    assert main(args) == 2


def test_partition_refuses_an_out_of_core_budget_for_a_typed_dataset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "st"
    argv = ["partition", *TINY, "--parts", "2", "--out", str(out), "--memory-budget", "2G"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--memory-budget" in err and "heterogeneous" in err
    assert not out.exists()


def test_partition_prints_parts_per_type(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "st"
    assert main(["partition", *TINY, "--parts", "2", "--method", "random", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "institution" in text and "balance[paper]" in text and "files:" in text
