"""The Python API checks a resume against its checkpoint, as ``gnnsys train --resume`` does."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from gnnsys.errors import CheckpointError
from tests.train.run_configs import sbm_run

pytestmark = pytest.mark.usefixtures("shared_stores")  # runs share their stores (conftest)


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


@pytest.mark.timeout(120)
def test_an_allowed_new_learning_rate_is_the_one_that_trains(tmp_path: Path) -> None:
    """torch's ``load_state_dict`` restores each group's lr; the resumed run's config wins."""
    import shutil

    from gnnsys.train.control.checkpoint import load_checkpoint
    from gnnsys.train.control.run import train_local

    base = _config()
    train_local(base, tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    longer = replace(base, loop=replace(base.loop, epochs=2, resume=True))
    train_local(longer, tmp_path / "a")
    faster = replace(longer, trainer=replace(longer.trainer, lr=0.05))
    train_local(faster, tmp_path / "b", allow_change=["trainer.lr"])
    same, changed = (load_checkpoint(tmp_path / run) for run in ("a", "b"))
    assert same is not None and changed is not None
    assert [g["lr"] for g in changed.optimizer_state["param_groups"]] == [0.05]
    assert [g["lr"] for g in same.optimizer_state["param_groups"]] == [0.01]
    differs = [not torch.equal(v, changed.model_state[k]) for k, v in same.model_state.items()]
    assert any(differs)  # the epoch-1 step took the new learning rate
