"""The whole path on a 1k-node graph with 2 local Ray workers: dataset -> partition -> store ->
remote sampling and fetch -> DDP training -> metrics, checkpoint and summary, via the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gnnsys.cli import main


@pytest.mark.ray
@pytest.mark.timeout(180)
def test_cli_trains_two_workers_end_to_end(ray_session: Any, tmp_path: Path, capsys: Any) -> None:
    code = main(
        [
            "train", "synthetic:sbm", "--num-nodes", "1000", "--parts", "2",
            "--partitioner", "metis", "--fanouts", "5,5", "--hidden", "32",
            "--batch-size", "16", "--lr", "0.01", "--epochs", "3",
            "--topology", "partitioned", "--out", str(tmp_path), "--no-progress",
        ]
    )  # fmt: skip
    assert code == 0
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    history = [json.loads(line) for line in lines]
    assert [m["epoch"] for m in history] == [0, 1, 2]
    assert history[-1]["loss"] < history[0]["loss"]
    for key in ("loss", "train_acc", "val_acc", "test_acc", "seconds", "bytes", "messages"):
        assert key in history[0]
    assert history[0]["bytes"]["feature_response"] > 0 and history[0]["bytes"]["allreduce"] > 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["final"]["epoch"] == 2 and summary["partition"]["strategy"] == "metis"
    assert (tmp_path / "checkpoint.pt").exists()
    out = capsys.readouterr().out
    assert "best val_acc" in out and "epoch" in out
