from __future__ import annotations

from pathlib import Path

import torch

from gnnsys.train.control.checkpoint import Checkpoint, load_checkpoint, save_checkpoint


def test_roundtrip_is_exact(tmp_path: Path) -> None:
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    ckpt = Checkpoint(
        epoch=2,
        model_state=model.state_dict(),
        optimizer_state=opt.state_dict(),
        rng_by_rank=[{"torch": torch.get_rng_state()}],
        best_val_acc=0.5,
    )
    path = save_checkpoint(tmp_path, ckpt)
    assert path.name == "checkpoint.pt"
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]  # no temp file left
    got = load_checkpoint(tmp_path)
    assert got is not None
    assert got.epoch == 2 and got.best_val_acc == 0.5
    for key, value in model.state_dict().items():
        assert torch.equal(got.model_state[key], value)
    assert torch.equal(got.rng_by_rank[0]["torch"], torch.get_rng_state())
    opt2 = torch.optim.Adam(torch.nn.Linear(4, 3).parameters())
    opt2.load_state_dict(got.optimizer_state)


def test_missing_returns_none(tmp_path: Path) -> None:
    assert load_checkpoint(tmp_path) is None
