"""``gnnsys info`` on the datasets of this stage (JSON output, --param, clean errors)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gnnsys.cli import main


def info_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    assert main(["info", *argv, "--json"]) == 0
    return dict(json.loads(capsys.readouterr().out))


def test_planetoid_cora_acceptance(shared_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = info_json(capsys, "planetoid:cora", "--root", str(shared_root))
    expected = dict(num_nodes=2708, num_edges=10556, num_features=1433, num_classes=7)
    assert {k: out[k] for k in expected} == expected
    assert (out["num_train"], out["num_val"], out["num_test"]) == (140, 500, 1000)


def test_params_reach_the_generator(capsys: pytest.CaptureFixture[str]) -> None:
    out = info_json(
        capsys, "synthetic:rmat", "-p", "num_nodes=2000", "-p", "num_features=0", "-p", "seed=3"
    )
    assert out["num_nodes"] == 2000 and out["num_features"] == 0


def test_bad_param_and_missing_data_are_clean_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["info", "synthetic:rmat", "-p", "colour=3"]) == 2
    assert "does not take that --param" in capsys.readouterr().err
    assert main(["info", "planetoid:cora", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "not found" in err and str(tmp_path / "planetoid") in err
