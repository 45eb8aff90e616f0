"""``gnnsys export``: the chunked R-MAT path, the load-then-write path, and its refusals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gnnsys.cli import main
from gnnsys.datasets import load
from gnnsys.datasets.rmat import rmat
from gnnsys.datasets.synthetic import sbm

FIELDS = ("indptr", "indices", "x", "y", "train_mask", "val_mask", "test_mask")


def test_export_rmat_chunked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "rmat"
    argv = ["export", "synthetic:rmat", "--format", "parquet", "--out", str(out)]
    argv += ["--num-nodes", "2000", "-D", "num_features=8", "-D", "chunk_edges=5000"]
    assert main([*argv, "--rows-per-group", "3000", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["num_nodes"] == 2000 and summary["files"] == 2 and summary["row_groups"] > 10
    got = load(f"parquet:{out}")
    want = rmat(num_nodes=2000, num_features=8, chunk_edges=5000)
    for key in FIELDS:
        assert np.array_equal(getattr(got, key), getattr(want, key)), key


def test_export_npz_then_info(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    g = sbm(num_nodes=300, num_classes=3, avg_degree=4, num_features=5, seed=1)
    path = tmp_path / "g.npz"
    np.savez(path, indptr=g.indptr, indices=g.indices, x=g.x, y=g.y, train_mask=g.train_mask)
    out = tmp_path / "pq"
    assert main(["export", str(path), "--out", str(out)]) == 0
    assert main(["info", f"parquet:{out}", "--json"]) == 0
    info = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (info["num_nodes"], info["num_edges"], info["num_features"]) == (300, g.num_edges, 5)
    assert info["num_train"] == int(g.train_mask.sum())  # type: ignore[union-attr]


def test_export_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "x"
    out.mkdir()
    assert main(["export", "synthetic:rmat", "--out", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err
    argv = ["export", "synthetic:rmat", "--out", str(tmp_path / "y"), "-D", "colour=1"]
    assert main(argv) == 2
    assert "does not take that -D option" in capsys.readouterr().err
    assert (
        main(["export", "synthetic:rmat", "--out", str(tmp_path / "z"), "--rows-per-group", "0"])
        == 2
    )
    assert "--rows-per-group 0" in capsys.readouterr().err
    (out / "keep.txt").write_text("mine")
    assert (
        main(["export", "synthetic:rmat", "--out", str(out), "--overwrite", "--num-nodes", "100"])
        == 2
    )
    assert "not a Parquet graph directory" in capsys.readouterr().err
    assert (out / "keep.txt").exists()
