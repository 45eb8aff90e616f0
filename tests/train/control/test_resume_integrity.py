"""Ray test: a run whose newest checkpoint is corrupt resumes from the previous one."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

import pytest

from gnnsys.config import RunConfig
from gnnsys.train.control.checkpoint import CHECKPOINT_NAME, PREVIOUS_NAME, load_checkpoint
from gnnsys.train.control.run import train_local
from tests.train.run_configs import sbm_run

# The checkpoint fallback is the driver's, whatever the executor: in-process ranks here.


def _config(epochs: int) -> RunConfig:
    return sbm_run(
        num_nodes=600, num_features=8, parts=2, fanouts=(4, 4), hidden=16, batch_size=64,
        epochs=epochs,
    )  # fmt: skip


@pytest.mark.timeout(240)
def test_corrupt_newest_checkpoint_falls_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run = tmp_path / "run"
    train_local(_config(epochs=2), run)
    assert (run / CHECKPOINT_NAME).exists() and (run / PREVIOUS_NAME).exists()
    data = bytearray((run / CHECKPOINT_NAME).read_bytes())
    data[len(data) // 2] ^= 0x40  # torch.load alone would accept this flip
    (run / CHECKPOINT_NAME).write_bytes(bytes(data))
    cfg = _config(epochs=3)
    with caplog.at_level(logging.WARNING, logger="gnnsys.train.control.checkpoint"):
        train_local(replace(cfg, loop=replace(cfg.loop, resume=True)), run)
    assert "resuming from the previous checkpoint (epoch 0)" in caplog.text
    epochs = [
        json.loads(line)["epoch"] for line in (run / "metrics.jsonl").read_text().splitlines()
    ]
    assert epochs == [0, 1, 2]  # epoch 1 retrained from epoch 0's checkpoint
    final = load_checkpoint(run)
    assert final is not None and final.epoch == 2 and final.notice is None
