"""``gnnsys train --config run.toml``: the settings from a file, flags over it, written back.

A file's tables and keys are ``RunConfig``'s fields; a wrong table, key, type or value is
refused with the key's path and what it takes; every run writes ``RUN_DIR/config.toml``, and a
run repeated from it trains the same.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import pytest

from gnnsys.cli import main
from gnnsys.commands.train import add_parser, build_config
from gnnsys.config import RunConfig
from gnnsys.train.link.config import LinkConfig
from gnnsys.train.node_types import NodeTypesConfig


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    return parser.parse_args(["train", *argv])


def test_every_setting_round_trips_through_toml(tmp_path: Path) -> None:
    base = RunConfig()
    cfg = replace(
        base,
        data=replace(base.data, dataset_params=(("scale", 0.01), ("reverse", True))),
        model=replace(base.model, name="GIN", args=(("jk", "cat"), ("heads", "4"))),
        node_types=NodeTypesConfig(model="gat", fanouts=(("paper__cites__paper", (10, 5)),)),
        link=LinkConfig(neg_per_pos=3),
        loop=replace(base.loop, heartbeat_s=5.0),
    )
    path = tmp_path / "run.toml"
    path.write_text(cfg.to_toml("a header\nof two lines"))
    assert RunConfig.from_toml(path) == cfg
    text = path.read_text()
    assert text.startswith("# a header\n# of two lines\n")
    assert "# tensorboard: not set" in text  # TOML has no null: a None is left out, named
    assert 'args = { jk = "cat", heads = "4" }' in text
    assert "fanouts = { paper__cites__paper = [10, 5] }" in text


def test_keys_left_out_keep_the_base_and_model_args_take_toml_values(tmp_path: Path) -> None:
    path = tmp_path / "run.toml"
    path.write_text('[model]\nname = "GIN"\nargs = { num_layers = 3, jk = "cat" }\n')
    base = replace(RunConfig(), trainer=replace(RunConfig().trainer, lr=0.5))
    cfg = RunConfig.from_toml(path, base)
    assert cfg.model.args == (("num_layers", "3"), ("jk", "cat"))  # JSON text, as --model-arg
    assert cfg.trainer == base.trainer and cfg.model.hidden == base.model.hidden


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[trainer]\nbatchsize = 3\n", "unknown key [trainer] batchsize; table [trainer] takes "
         "the keys: lr, weight_decay, batch_size, schedule, seed, prefetch"),
        ("[traner]\n", "unknown table [traner]; the file takes the tables: data, cluster, "
         "sampler, model, trainer, loop"),
        ('[trainer]\nbatch_size = "512"\n',
         '[trainer] batch_size = "512": expected an integer, got str'),
        ("[loop]\nepochs = true\n", "[loop] epochs = true: expected an integer, got bool"),
        ('[sampler]\nfanouts = [15, "x"]\n',
         '[sampler] fanouts[1] = "x": expected an integer, got str'),
        ("[trainer]\nbatch_size = 0\n", "[trainer] batch_size = 0: batch_size=0; choose "
         "batch_size >= 1"),
        ('[layer0]\nplacement = "peer"\n',
         '[layer0] placement = "peer": choose one of requester, owner, auto'),
        ('[cache]\npolicy = "lru"\n', "[cache] policy = \"lru\": cache policy='lru'; choose one"
         " of ['adaptive', 'degree', 'none', 'presample']"),
        ("[cache.adaptive]\ndecay = 2\n", "[cache.adaptive] decay = 2: decay=2.0"),
        ("[trainer]\nseed = -1\n", "[trainer] seed = -1: seed=-1; choose a seed >= 0"),
        ("[trainer]\nlr = inf\n", "[trainer] lr = inf: lr=inf; choose a positive"),
        ("[loop]\nstartup_deadline_s = inf\n", "startup_deadline_s=inf; choose a positive"),
        ("[trainer\n", "not a TOML file: Expected ']'"),
        ("trainer = 3\n", "table [trainer] must be a table, got 3"),
    ],
)  # fmt: skip
def test_a_wrong_file_is_refused_with_the_keys_path(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "run.toml"
    path.write_text(text)
    with pytest.raises(ValueError) as err:
        RunConfig.from_toml(path)
    assert str(err.value).startswith(f"{path}: ")
    assert message in str(err.value)


def test_flags_override_the_file_and_the_file_the_preset(tmp_path: Path) -> None:
    path = tmp_path / "run.toml"
    path.write_text(
        "[trainer]\nbatch_size = 64\nlr = 0.01\n[sampler]\nfanouts = [5, 5]\n"
        "[loop]\nepochs = 7\nresume = true\n"
    )
    cfg = build_config(_args("--config", str(path), "--lr", "0.2", "--epochs", "2"))
    assert (cfg.trainer.batch_size, cfg.trainer.lr) == (64, 0.2)
    assert (cfg.sampler.fanouts, cfg.loop.epochs, cfg.loop.resume) == ((5, 5), 2, True)
    cora = build_config(_args("--preset", "cora_4parts", "--config", str(path)))
    assert cora.cluster.parts == 4 and cora.trainer.batch_size == 64  # the preset, then the file


def test_a_typed_table_on_a_one_type_dataset_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "run.toml"
    path.write_text('[node_types]\nmodel = "rgcn"\n')
    with pytest.raises(ValueError, match=r"table \[node_types\] applies to heterogeneous datasets"):
        build_config(_args("synthetic:sbm", "--config", str(path)))


def test_a_typed_table_and_flags_meet_on_a_typed_dataset(tmp_path: Path) -> None:
    path = tmp_path / "run.toml"
    path.write_text('[node_types]\nmodel = "rgcn"\nembedding_dim = 8\n')
    mag = ("synthetic:mag", "-D", "scale=0.004", "--config", str(path))
    cfg = build_config(_args(*mag))
    assert cfg.node_types is not None and (cfg.node_types.model, cfg.node_types.embedding_dim) == (
        "rgcn",
        8,
    )
    cfg = build_config(_args(*mag, "--model", "gat"))
    assert cfg.node_types is not None and (cfg.node_types.model, cfg.node_types.embedding_dim) == (
        "gat",
        8,
    )


def test_cli_refuses_a_bad_file_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "run.toml"
    path.write_text("[trainer]\nbatch_size = -4\n")
    out = tmp_path / "run"
    assert main(["train", "--config", str(path), "--out", str(out)]) == 2
    assert "[trainer] batch_size = -4: batch_size=-4" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.timeout(180)
def test_a_run_repeated_from_its_config_toml_trains_the_same(tmp_path: Path) -> None:
    flags = ["synthetic:sbm", "--num-nodes", "400", "--parts", "2", "--partitioner", "random",
             "--fanouts", "4,3", "--hidden", "16", "--batch-size", "32", "--epochs", "2",
             "--executor", "local", "--no-progress", "--lr", "0.02"]  # fmt: skip
    first, again = tmp_path / "first", tmp_path / "again"
    assert main(["train", *flags, "--out", str(first)]) == 0
    written = first / "config.toml"
    assert written.read_text().startswith("# The settings of the gnnsys train run in ")
    assert (
        main(["train", "--config", str(written), "--executor", "local", "--out", str(again)]) == 0
    )
    lines = [
        [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        for run in (first, again)
    ]
    assert [m["loss"] for m in lines[0]] == [m["loss"] for m in lines[1]]
    assert RunConfig.from_run_dir(again) == RunConfig.from_run_dir(first)
    assert RunConfig.from_toml(again / "config.toml") == RunConfig.from_toml(written)


def test_files_and_summaries_of_runs_before_the_rename_still_read(tmp_path: Path) -> None:
    """``RunConfig.node_types`` was ``RunConfig.hetero``: an older ``config.toml``'s ``[hetero]``
    table and an older ``summary.json``'s ``hetero`` object give the same settings."""
    typed = NodeTypesConfig(model="rgcn", input_type="paper", embedding_dim=8)
    want = replace(RunConfig(), node_types=typed)
    path = tmp_path / "old.toml"
    path.write_text('[hetero]\nmodel = "rgcn"\ninput_type = "paper"\nembedding_dim = 8\n')
    assert RunConfig.from_toml(path) == want
    old = want.to_json()
    old["hetero"] = old.pop("node_types")
    assert RunConfig.from_json(json.loads(json.dumps(old))) == want
