from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gnnsys.config import RunConfig
from gnnsys.errors import CheckpointError
from gnnsys.train.control.checkpoint import (
    CHECKPOINT_NAME,
    PREVIOUS_NAME,
    Checkpoint,
    RunIdentity,
    identity_of,
    load_checkpoint,
    read_identity,
    remove_checkpoints,
    resume_differences,
    save_checkpoint,
    write_identity,
)


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


# ---- rotation, corruption and fallback --------------------------------------------------------
def _ckpt(epoch: int, identity: RunIdentity | None = None) -> Checkpoint:
    model = torch.nn.Linear(4, 3)
    return Checkpoint(
        epoch=epoch,
        model_state=model.state_dict(),
        optimizer_state=torch.optim.SGD(model.parameters(), lr=0.1).state_dict(),
        rng_by_rank=[{"torch": torch.get_rng_state()}],
        identity=identity,
    )


def test_keeps_the_last_two(tmp_path: Path) -> None:
    for epoch in range(3):
        save_checkpoint(tmp_path, _ckpt(epoch))
    assert sorted(p.name for p in tmp_path.iterdir()) == [PREVIOUS_NAME, CHECKPOINT_NAME]
    got = load_checkpoint(tmp_path)
    assert got is not None and got.epoch == 2 and got.notice is None


def _flip(path: Path, pos: int) -> None:
    data = bytearray(path.read_bytes())
    data[pos % len(data)] ^= 0x10
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "garbage", "missing"])
def test_corrupt_newest_falls_back_to_previous(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    save_checkpoint(tmp_path, _ckpt(0))
    save_checkpoint(tmp_path, _ckpt(1))
    newest = tmp_path / CHECKPOINT_NAME
    if damage == "flip":
        _flip(newest, newest.stat().st_size // 2)
    elif damage == "truncate":
        newest.write_bytes(newest.read_bytes()[:100])
    elif damage == "empty":
        newest.write_bytes(b"")
    elif damage == "garbage":
        newest.write_bytes(b"PK\x03\x04 not a zip")
    else:
        newest.unlink()
    got = load_checkpoint(tmp_path)
    assert got is not None and got.epoch == 0
    assert got.notice is not None and "previous checkpoint (epoch 0)" in got.notice
    assert "previous checkpoint" in caplog.text


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage"])
def test_a_corrupt_newest_never_replaces_an_intact_previous(tmp_path: Path, damage: str) -> None:
    save_checkpoint(tmp_path, _ckpt(0))
    save_checkpoint(tmp_path, _ckpt(1))
    newest = tmp_path / CHECKPOINT_NAME
    if damage == "flip":
        _flip(newest, newest.stat().st_size // 2)
    elif damage == "truncate":
        newest.write_bytes(newest.read_bytes()[:100])
    else:
        newest.write_bytes(b"PK\x03\x04 not a zip")
    save_checkpoint(tmp_path, _ckpt(2))  # the damaged epoch-1 file is replaced, not rotated
    newest.write_bytes(b"")  # and the new one is lost too
    got = load_checkpoint(tmp_path)
    assert got is not None and got.epoch == 0 and got.notice is not None


def test_every_bit_flip_is_refused(tmp_path: Path) -> None:
    save_checkpoint(tmp_path, _ckpt(0))
    path = tmp_path / CHECKPOINT_NAME
    clean = path.read_bytes()
    for pos in range(0, len(clean), max(1, len(clean) // 97)):
        _flip(path, pos)
        with pytest.raises(CheckpointError, match="checkpoint.pt"):
            load_checkpoint(tmp_path)
        path.write_bytes(clean)


def test_all_corrupt_is_one_clear_error(tmp_path: Path) -> None:
    save_checkpoint(tmp_path, _ckpt(0))
    save_checkpoint(tmp_path, _ckpt(1))
    for name in (CHECKPOINT_NAME, PREVIOUS_NAME):
        (tmp_path / name).write_bytes(b"junk")
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(tmp_path)
    msg = str(info.value)
    assert CHECKPOINT_NAME in msg and PREVIOUS_NAME in msg and "fresh run directory" in msg


def test_legacy_checkpoint_still_loads(tmp_path: Path) -> None:
    c = _ckpt(4)
    payload = {
        "format_version": 1,
        "epoch": 4,
        "model_state": c.model_state,
        "optimizer_state": c.optimizer_state,
        "rng_by_rank": c.rng_by_rank,
        "best_val_acc": 0.25,
    }
    torch.save(payload, tmp_path / CHECKPOINT_NAME)
    got = load_checkpoint(tmp_path)
    assert got is not None and got.epoch == 4 and got.identity is None


def test_remove_checkpoints(tmp_path: Path) -> None:
    save_checkpoint(tmp_path, _ckpt(0))
    save_checkpoint(tmp_path, _ckpt(1))
    remove_checkpoints(tmp_path)
    assert load_checkpoint(tmp_path) is None


# ---- identity ---------------------------------------------------------------------------------
STORE = {"store.dataset": "planetoid:cora", "store.graph": "abc", "store.content": "c1"}


def _config(**over: object) -> dict:
    cfg = RunConfig().to_json()
    for dotted, value in over.items():
        section, key = dotted.split("__")
        cfg[section][key] = value
    return cfg


def test_identity_ignores_paths_and_logging() -> None:
    a = identity_of(_config(), STORE)
    b = identity_of(_config(loop__progress=False, loop__resume=True, cluster__address="x:1"), STORE)
    assert resume_differences(a, b) == []
    assert a.as_dict()["model.num_layers"] == "2"


def test_identity_ignores_where_evaluation_keeps_its_memory() -> None:
    """A run resumed under another memory limit may change how evaluation holds its tables."""
    a = identity_of(_config(), STORE)
    knobs = {"eval__halo_mb": 64.0, "eval__spill_mb": 16.0, "eval__block_mb": 48.0}
    b = identity_of(_config(**knobs, eval__message_mb=4.0), STORE)
    assert resume_differences(a, b) == []
    c = identity_of(_config(eval__codec="int8"), STORE)  # changes the reported metrics
    assert [d.field for d in resume_differences(a, c)] == ["eval.codec"]


def test_differences_name_field_and_both_values() -> None:
    old = identity_of(_config(), STORE)
    new = identity_of(
        _config(model__hidden=7, sampler__fanouts=[5, 5], loop__epochs=9, trainer__lr=0.5),
        STORE | {"store.dataset": "musae:facebook"},
    )
    diffs = {d.field: d for d in resume_differences(old, new, frozenset({"trainer.lr"}))}
    assert set(diffs) == {
        "model.hidden",
        "sampler.fanouts",
        "loop.epochs",
        "trainer.lr",
        "store.dataset",
        "run.dataset",
    }
    assert not diffs["model.hidden"].allowed and not diffs["store.dataset"].allowed
    assert diffs["loop.epochs"].allowed and diffs["trainer.lr"].allowed
    assert not diffs["sampler.fanouts"].allowed
    assert str(diffs["store.dataset"]) == 'store.dataset "planetoid:cora" -> "musae:facebook"'


def test_never_allowed_fields_stay_refused() -> None:
    old = identity_of(_config(), STORE)
    new = identity_of(_config(model__hidden=7), STORE)
    (diff,) = resume_differences(old, new, frozenset({"model.hidden"}))
    assert not diff.allowed


def test_identity_travels_in_run_json_and_checkpoints(tmp_path: Path) -> None:
    ident = identity_of(_config(), STORE)
    write_identity(tmp_path, ident)
    assert read_identity(tmp_path) == ident
    save_checkpoint(tmp_path, _ckpt(0))
    got = load_checkpoint(tmp_path)
    assert got is not None and got.identity == ident


def test_an_identity_written_before_a_rename_reads_under_the_new_names(tmp_path: Path) -> None:
    """A checkpoint's ``hetero.model`` (``RunConfig.hetero`` before it became ``node_types``)
    is compared as ``node_types.model``, so a changed typed model is still refused on resume."""
    import json

    ident = identity_of(_config(), STORE)
    old = {k.replace("node_types", "hetero", 1): v for k, v in ident.as_dict().items()}
    assert "hetero" in old and "node_types" not in old
    (tmp_path / "run.json").write_text(json.dumps({"identity": old}))
    assert read_identity(tmp_path) == ident


def test_dataset_is_compared_even_without_a_store_on_one_side() -> None:
    old = identity_of(_config(), {})  # a fresh run: no store yet
    new_cfg = _config()
    new_cfg["data"]["store"] = "/some/store"
    new = identity_of(new_cfg, STORE)
    (diff,) = resume_differences(old, new, frozenset({"run.dataset"}))
    assert diff.field == "run.dataset" and not diff.allowed
    assert str(diff) == 'run.dataset "synthetic:sbm" -> "planetoid:cora"'
