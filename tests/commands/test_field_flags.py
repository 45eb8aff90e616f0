"""``gnnsys train``'s flags come from ``RunConfig``'s fields: type, help, default and check.

``commands/train.py`` names only which flag sets which field (``FIELD_FLAGS``); the rest is
the field's (``gnnsys.flags``), and a flag and its ``--config`` key set the same field.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from gnnsys.commands.train import CACHE_TUNING, FIELD_FLAGS, add_parser, build_config
from gnnsys.config import RunConfig
from gnnsys.flags import field_doc, field_flags
from gnnsys.train.trainer import Trainer

TABLE = {flag: path for table in FIELD_FLAGS.values() for flag, path in table.items()}
TABLE |= CACHE_TUNING


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    return parser


def test_a_flags_help_is_its_fields_docstring_with_its_toml_key_and_default() -> None:
    [flag] = field_flags(RunConfig(), {"--prefetch": "trainer.prefetch"})
    doc = field_doc(Trainer.Config, "prefetch")
    assert doc.startswith("Batches prepared (sampled, fetched) ahead of the step")
    assert flag.help.startswith("Batches prepared (sampled, fetched) ahead of the step")
    assert "--prefetch" not in flag.help  # the field's mention of its own flag is dropped
    assert "on producer threads (0: the synchronous step)." in flag.help
    assert flag.help.endswith("([trainer] prefetch, default 2)")
    assert (flag.kind, flag.dest) == (int, "prefetch")
    [off] = field_flags(RunConfig(), {"--decode-halo": "!layer0.fused_dequant"})
    assert off.help.endswith("(sets [layer0] fused_dequant = false)")


def test_every_flag_names_a_field_and_reaches_it() -> None:
    values = {int: "3", float: "0.25", str: "x"}
    for flag in field_flags(RunConfig(), TABLE):
        path = ".".join(flag.path)
        if flag.kind is bool:
            continue
        args = _parser().parse_args(["train", f"{flag.flag}={values[flag.kind]}"])
        assert getattr(args, flag.dest) == flag.kind(values[flag.kind]), path


@pytest.mark.parametrize(
    ("argv", "toml"),
    [
        (["--batch-size", "64"], "[trainer]\nbatch_size = 64\n"),
        (["--deadline", "30"], "[loop]\ndeadline_s = 30\n"),
        (["--cache-policy", "degree", "--cache-mb", "4"], '[cache]\npolicy = "degree"\nmb = 4\n'),
        (["--cache-decay", "0.9"], "[cache.adaptive]\ndecay = 0.9\n"),
        (["--decode-halo"], "[layer0]\nfused_dequant = false\n"),
        (["--test-at-end"], "[eval]\ntest_at_end = true\n"),
        (["--aggregate-at", "owner"], '[layer0]\nplacement = "owner"\n'),
        (["--max-restarts", "0"], "[failure]\nmax_restarts = 0\n"),
    ],
)
def test_a_flag_and_its_config_key_set_the_same_field(
    argv: list[str], toml: str, tmp_path: Path
) -> None:
    path = tmp_path / "run.toml"
    path.write_text(toml)
    by_flag = build_config(_parser().parse_args(["train", *argv]))
    by_file = build_config(_parser().parse_args(["train", "--config", str(path)]))
    assert by_flag == by_file != build_config(_parser().parse_args(["train"]))


def test_a_table_naming_no_field_is_refused() -> None:
    with pytest.raises(ValueError, match="Config has no field 'batchsize'"):
        field_flags(RunConfig(), {"--batch-size": "trainer.batchsize"})
    with pytest.raises(ValueError, match="cannot be one flag's value"):
        field_flags(RunConfig(), {"--fanouts": "sampler.fanouts"})
