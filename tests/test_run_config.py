"""``RunConfig.from_json`` inverts ``to_json`` through JSON, for every kind of run."""

from __future__ import annotations

import json

import pytest

from gnnsys.cli import build_parser
from gnnsys.commands.train import build_config
from gnnsys.config import RunConfig
from gnnsys.presets import PRESETS

ARGV = [
    [],
    ["planetoid:cora", "--model", "gcn", "--fanouts=-1,-1", "--codec", "int8", "--wire", "zstd"],
    ["planetoid:cora", "--task", "link", "--decoder", "mlp", "--val-edges", "0.1"],
    ["synthetic:mag", "-D", "scale=0.01", "--fanouts", "5,5;paper__cites__paper=3,2"],
    ["synthetic:mag", "--task", "link", "--target-edge", "paper__cites__paper", "--model", "rgcn"],
    ["synthetic:sbm", "--cache-policy", "presample", "--cache-ratio", "0.1", "--eval-every", "2"],
]


@pytest.mark.parametrize("argv", ARGV, ids=lambda a: " ".join(a) or "default")
def test_round_trip_of_cli_configs(argv: list[str]) -> None:
    cfg = build_config(build_parser().parse_args(["train", *argv]))
    assert RunConfig.from_json(json.loads(json.dumps(cfg.to_json()))) == cfg


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_round_trip_of_presets(name: str) -> None:
    cfg = PRESETS[name]()
    assert RunConfig.from_json(json.loads(json.dumps(cfg.to_json()))) == cfg


def test_missing_fields_take_defaults_and_bad_values_are_refused() -> None:
    obj = RunConfig().to_json()
    del obj["model"]["dropout"]
    assert RunConfig.from_json(obj).model.dropout == RunConfig().model.dropout
    obj["model"]["hidden"] = 0
    with pytest.raises(ValueError, match="hidden=0"):
        RunConfig.from_json(obj)
