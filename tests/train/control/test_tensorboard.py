"""``--tensorboard DIR``: every metrics.jsonl line as TensorBoard scalars, read back by
TensorBoard's own event reader."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from gnnsys.train.control import tensorboard as tb
from gnnsys.train.control.coordinator import Coordinator
from gnnsys.train.control.run import train_local
from tests.train.run_configs import sbm_run

pytestmark = pytest.mark.usefixtures("shared_stores")  # runs share their stores (conftest)

pytest.importorskip("tensorboard", reason="tensorboard is a dev extra: pip install -e '.[dev]'")


def _scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _run(tmp_path: Path, epochs: int, *, resume: bool = False) -> None:
    cfg = sbm_run(
        num_nodes=600,
        num_features=8,
        parts=2,
        fanouts=(4, 3),
        hidden=8,
        batch_size=64,
        epochs=epochs,
        loop={"tensorboard": str(tmp_path / "tb"), "resume": resume},
    )
    train_local(cfg, tmp_path / "run")


@pytest.mark.timeout(240)
def test_scalars_equal_the_metrics_lines_after_a_resume(tmp_path: Path) -> None:
    _run(tmp_path, 2)
    _run(tmp_path, 3, resume=True)
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    got = _scalars(tmp_path / "tb")
    # every epoch once, in order, although two processes wrote event files
    assert [step for step, _ in got["train/loss"]] == [0, 1, 2]
    for line in lines:
        expected = tb.scalars_of(line)
        for tag, value in expected.items():
            assert got[tag][line["epoch"]] == (line["epoch"], pytest.approx(value, rel=1e-6))
    assert set(got) == set(tb.scalars_of(lines[-1]))
    for tag in ("eval/val_acc", "seconds/stall", "pipeline/overlap", "bytes/feature_response"):
        assert tag in got
    assert "eval/batch_train_acc" not in got  # it is train/batch_acc


def test_scalars_of_names_every_number() -> None:
    line = {
        "epoch": 4,
        "loss": 0.5,
        "batch_train_acc": 0.75,
        "val_acc": 0.5,
        "test_acc": None,
        "val_hits@50": 0.25,
        "seconds": {"total": 2.0, "stall": 0.5, "overlap": 1.5},
        "bytes": {"feature_response": 10},
        "eval": {"bytes": {"feature_response": 3}, "halo_rows": 7},
        "bytes_by_type": {"paper": {"feature_response": 6}},
        "cache": {"hit_rate": 0.5},
        "peak_rss_bytes": [2**20, 3 * 2**20],
    }
    assert tb.scalars_of(line) == {
        "train/loss": 0.5,
        "train/batch_acc": 0.75,
        "eval/val_acc": 0.5,
        "eval/val_hits@50": 0.25,
        "seconds/total": 2.0,
        "seconds/stall": 0.5,
        "pipeline/overlap": 1.5,
        "bytes/feature_response": 10.0,
        "eval_bytes/feature_response": 3.0,
        "bytes_by_type/paper/feature_response": 6.0,
        "cache/hit_rate": 0.5,
        "memory/peak_rss_mib": 3.0,
    }


def test_missing_package_is_refused_before_training(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_tensorboard(name: str, *args: object, **kwargs: object) -> object:
        if name == "tensorboard":
            raise ImportError("No module named 'tensorboard'")
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_tensorboard)
    with pytest.raises(
        ValueError, match=r"tensorboard='runs/tb'.*pip install 'gnnsys\[tensorboard\]'"
    ):
        replace(Coordinator.Config(), tensorboard="runs/tb")
    Coordinator.Config(tensorboard=None)  # unset: nothing is imported
