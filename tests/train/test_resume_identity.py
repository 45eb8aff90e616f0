"""The Python API checks a resume against its checkpoint, as ``gnnsys train --resume`` does."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gnnsys.errors import CheckpointError
from tests.train.run_configs import sbm_run


def _config() -> Any:
    return sbm_run(
        num_nodes=400, num_features=8, parts=2, fanouts=(3, 2), hidden=8, dropout=0.0,
        batch_size=64, epochs=1,
    )  # fmt: skip


@pytest.mark.timeout(120)
def test_train_local_refuses_another_run_and_honours_allow_change(tmp_path: Path) -> None:
    from gnnsys.train.control.run import train_local

    base = _config()
    train_local(base, tmp_path)
    identity = json.loads((tmp_path / "run.json").read_text())["identity"]
    assert "store.content" in identity and identity["trainer.lr"] == "0.01"
    faster = replace(
        base, trainer=replace(base.trainer, lr=0.05), loop=replace(base.loop, epochs=2, resume=True)
    )
    with pytest.raises(CheckpointError, match=r"trainer\.lr.*allow_change=\['trainer\.lr'\]"):
        train_local(faster, tmp_path)
    wider = replace(
        base, model=replace(base.model, hidden=16), loop=replace(base.loop, resume=True)
    )
    with pytest.raises(CheckpointError, match=r"model\.hidden"):
        train_local(wider, tmp_path, allow_change=["model.hidden"])  # never allowed
    with pytest.raises(ValueError, match=r"allow_change names \['trainer\.rate'\]"):
        train_local(faster, tmp_path, allow_change=["trainer.rate"])
    result = train_local(faster, tmp_path, allow_change=["trainer.lr"])
    assert [m["epoch"] for m in result.history] == [0, 1]  # epoch 0 ran before the resume
    assert json.loads((tmp_path / "run.json").read_text())["identity"]["trainer.lr"] == "0.05"
