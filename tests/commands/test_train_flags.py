"""Each codec / cache / placement flag of ``gnnsys train`` walks to its stage's own ``Config``.

A bad value is rejected once, by the ``__post_init__`` of the ``Config`` of the stage that uses
it (argparse takes the raw value: no ``choices`` duplicate the check), and the command exits 2
with that message before anything starts (no Ray, no run directory).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from gnnsys.cli import main
from gnnsys.commands.train import add_parser, build_config

# flag, bad value, module of the Config that rejects it, its class, the message it gives
BAD = [
    ("--codec", "int9", "gnnsys/cache/codecs/config.py", "CodecConfig", "codec name='int9'"),
    ("--lossy-codec", "binary", "gnnsys/cache/codecs/config.py", "CodecConfig", "lossy="),
    ("--wire", "gzip", "gnnsys/cache/codecs/config.py", "CodecConfig", "codec wire='gzip'"),
    ("--cache-ratio", "-0.1", "gnnsys/cache/config.py", "CacheConfig", "cache ratio=-0.1"),
    ("--cache-ratio", "nan", "gnnsys/cache/config.py", "CacheConfig", "cache ratio=nan"),
    ("--cache-mb", "-1", "gnnsys/cache/config.py", "CacheConfig", "cache mb=-1.0"),
    ("--cache-policy", "lru", "gnnsys/cache/config.py", "CacheConfig", "cache policy='lru'"),
    ("--presample-epochs", "0", "gnnsys/cache/config.py", "CacheConfig", "presample_epochs=0"),
    (
        "--cache-decay",
        "1.5",
        "gnnsys/cache/admission.py",
        "AdaptiveAdmission.Config",
        "decay=1.5",
    ),
    ("--feature-norm", "l2", "gnnsys/store/source.py", "DataConfig", "feature_norm='l2'"),
    (
        "--weight-decay",
        "-0.001",
        "gnnsys/train/trainer.py",
        "Trainer.Config",
        "weight_decay=-0.001; choose a finite value >= 0",
    ),
    ("--weight-decay", "nan", "gnnsys/train/trainer.py", "Trainer.Config", "weight_decay=nan"),
    ("--weight-decay", "inf", "gnnsys/train/trainer.py", "Trainer.Config", "weight_decay=inf"),
    ("--dropout", "1.0", "gnnsys/models/config.py", "ModelConfig", "dropout=1.0; choose"),
    ("--dropout", "-0.1", "gnnsys/models/config.py", "ModelConfig", "dropout=-0.1; choose"),
    ("--dropout", "nan", "gnnsys/models/config.py", "ModelConfig", "dropout=nan; choose"),
    (
        "--eval-spill-mb",
        "-1",
        "gnnsys/train/eval/evaluate.py",
        "EvalConfig",
        "eval spill_mb=-1.0; choose >= 0 (0: tables in memory)",
    ),
    ("--eval-spill-mb", "nan", "gnnsys/train/eval/evaluate.py", "EvalConfig", "eval spill_mb=nan"),
    (
        "--eval-block-mb",
        "-2",
        "gnnsys/train/eval/evaluate.py",
        "EvalConfig",
        "eval block_mb=-2.0; choose >= 0 (0: off)",
    ),
    (
        "--aggregate-at",
        "sideways",
        "gnnsys/train/layer0/base.py",
        "FirstLayerConfig",
        "placement='sideways'; choose one of requester, owner, auto",
    ),
]


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    return parser.parse_args(["train", *argv])


@pytest.mark.parametrize(("flag", "value", "module", "owner", "message"), BAD, ids=lambda v: v)
def test_bad_value_is_rejected_once_by_its_stage_config(
    flag: str, value: str, module: str, owner: str, message: str
) -> None:
    args = _args(f"{flag}={value}")  # argparse takes it as is: the Config is the only check
    with pytest.raises(ValueError, match=re.escape(message)) as info:
        build_config(args)
    raised = info.traceback[-1]  # the frame that raised
    assert raised.name == "__post_init__", raised
    assert Path(str(raised.path)).as_posix().endswith(module), raised.path
    assert type(raised.frame.f_locals["self"]).__qualname__ == owner


# Every flag here reaches only its Config (the pre-flight range-checks the other numbers).
PRECHECKED: set[str] = set()


@pytest.mark.parametrize(
    ("flag", "value", "message"), [(b[0], b[1], b[4]) for b in BAD if b[0] not in PRECHECKED]
)
def test_bad_value_fails_before_anything_starts(
    flag: str,
    value: str,
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    started: list[object] = []
    monkeypatch.setattr("gnnsys.train.control.run.train", lambda *a, **k: started.append(a))
    run_dir = tmp_path / "run"
    assert main(["train", f"{flag}={value}", "--out", str(run_dir)]) == 2
    assert not started and not run_dir.exists()
    assert message in capsys.readouterr().err


def test_good_values_reach_their_configs() -> None:
    cfg = build_config(
        _args(
            "--codec=auto",
            "--lossy-codec=int4",
            "--wire=zstd",
            "--cache-policy=adaptive",
            "--cache-ratio=0.2",
            "--presample-epochs=2",
            "--cache-decay=0.9",
            "--cache-warm-weight=0.5",
            "--cache-margin=2",
            "--aggregate-at=owner",
            "--weight-decay=5e-4",
            "--dropout=0.25",
            "--eval-spill-mb=512",
            "--eval-block-mb=128",
        )
    )
    assert (cfg.eval.spill_mb, cfg.eval.block_mb) == (512.0, 128.0)
    assert (cfg.trainer.weight_decay, cfg.model.dropout) == (5e-4, 0.25)
    assert (cfg.codec.name, cfg.codec.lossy, cfg.codec.wire) == ("auto", "int4", "zstd")
    assert (cfg.cache.policy, cfg.cache.ratio, cfg.cache.presample_epochs) == ("adaptive", 0.2, 2)
    adaptive = cfg.cache.adaptive
    assert (adaptive.decay, adaptive.warm_weight, adaptive.margin) == (0.9, 0.5, 2.0)
    assert cfg.layer0.placement == "owner" and cfg.layer0.fused_dequant
    default = build_config(_args())  # flags left out keep the preset's values
    assert default.cache == type(default.cache)() and default.codec == type(default.codec)()
    assert default.to_json()["layer0"]["placement"] == "requester"
    assert (default.trainer.weight_decay, default.model.dropout) == (0.0, 0.5)
    assert (default.eval.spill_mb, default.eval.block_mb) == (0.0, 0.0)


def test_help_documents_weight_decay_and_dropout(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    assert "--weight-decay" in out and "--dropout" in out


def test_bench_comm_takes_the_adaptive_knobs(tmp_path: Path) -> None:
    from gnnsys.commands.bench_comm import add_parser as add_bench
    from gnnsys.commands.bench_comm import base_config

    parser = argparse.ArgumentParser()
    add_bench(parser.add_subparsers())
    args = parser.parse_args(
        ["comm", "synthetic:sbm", "--out", str(tmp_path), "--cache-decay=0.95", "--cache-margin=0"]
    )
    cache = base_config(args, tmp_path).cache
    assert (cache.adaptive.decay, cache.adaptive.margin, cache.policy) == (0.95, 0.0, "none")


def test_negative_fanouts_are_values_not_options() -> None:
    from gnnsys.cli import _join_negative_lists, build_parser

    argv = _join_negative_lists(["train", "planetoid:cora", "--fanouts", "-1,-1", "--lr", "0.1"])
    assert argv == ["train", "planetoid:cora", "--fanouts=-1,-1", "--lr", "0.1"]
    args = build_parser().parse_args(argv)
    assert build_config(args).sampler.fanouts == (-1, -1)
    assert _join_negative_lists(["--fanouts", "15,10"]) == ["--fanouts", "15,10"]
