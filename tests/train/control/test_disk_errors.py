"""Disk errors of a run directory's writers: one clear error, nothing half-written left behind.

Each writer (checkpoint, ``run.json``, ``metrics.jsonl`` begin and append, ``summary.json``, the
partitioning child) gets an injected ``OSError``; the ``tmpfs`` tests run ``gnnsys train`` end
to end on a real 1 MiB (or read-only) tmpfs (need root and ``mount``; skipped otherwise).
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import gnnsys.store.diskio as diskio
import gnnsys.train.control.prepare as prepare_mod
from gnnsys.config import RunConfig
from gnnsys.errors import DiskError, ProcessDiedError
from gnnsys.store.source import DataConfig
from gnnsys.train.control.checkpoint import (
    CHECKPOINT_NAME,
    PREVIOUS_NAME,
    RUN_NAME,
    RunIdentity,
    load_checkpoint,
    read_identity,
    save_checkpoint,
    write_identity,
)
from gnnsys.train.control.prepare import PreparedStore
from gnnsys.train.control.recorder import EpochMetrics, Recorder
from gnnsys.train.device import DevicePlan
from gnnsys.train.remote.ledger import LedgerSnapshot
from tests.tmpfs import mount_tmpfs
from tests.train.control.test_checkpoint import _ckpt


def _full(*args: object) -> Any:
    raise OSError(errno.ENOSPC, "No space left on device (injected)")


def _metrics(epoch: int) -> EpochMetrics:
    return EpochMetrics(
        epoch=epoch,
        loss=1.0 / (epoch + 1),
        batch_train_acc=0.5,
        evaluation={"val_acc": 0.5},
        seconds={"total": 1.0},
        traffic=LedgerSnapshot(),
        eval_traffic=LedgerSnapshot(),
        eval_cache={},
        warmup_bytes={},
    )


def _hidden(run_dir: Path) -> list[str]:
    """Temporary files and directories left in ``run_dir`` (names starting with a dot)."""
    return sorted(p.name for p in run_dir.iterdir() if p.name.startswith("."))


def _assert_disk_error(err: DiskError, path: Path) -> None:
    text = str(err)
    assert err.errno == errno.ENOSPC and err.path == str(path)
    assert text.startswith(f"no space left on device writing {path} (needs ~"), text
    assert "choose another --out" in text and err.needed_bytes


# ---- injected errors, one writer at a time ------------------------------------------------------
def test_checkpoint_write_keeps_both_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    save_checkpoint(tmp_path, _ckpt(0))
    save_checkpoint(tmp_path, _ckpt(1))
    before = {n: (tmp_path / n).read_bytes() for n in (CHECKPOINT_NAME, PREVIOUS_NAME)}
    monkeypatch.setattr(diskio.os, "fsync", _full)
    with pytest.raises(DiskError) as info:
        save_checkpoint(tmp_path, _ckpt(2))
    _assert_disk_error(info.value, tmp_path / CHECKPOINT_NAME)
    assert info.value.needed_bytes is not None and info.value.needed_bytes > 1000  # its size
    assert _hidden(tmp_path) == []
    assert {n: (tmp_path / n).read_bytes() for n in before} == before
    monkeypatch.undo()
    got = load_checkpoint(tmp_path)
    assert got is not None and got.epoch == 1 and got.notice is None


def test_checkpoint_rotation_failure_keeps_newest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    save_checkpoint(tmp_path, _ckpt(0))
    monkeypatch.setattr("gnnsys.train.control.checkpoint.os.replace", _full)
    with pytest.raises(DiskError, match="no space left on device writing .*checkpoint.pt"):
        save_checkpoint(tmp_path, _ckpt(1))
    monkeypatch.undo()
    assert _hidden(tmp_path) == []
    got = load_checkpoint(tmp_path)
    assert got is not None and got.epoch == 0


def test_identity_write_keeps_old_run_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = RunIdentity((("model.hidden", "16"),))
    write_identity(tmp_path, old)
    monkeypatch.setattr(diskio.os, "fsync", _full)
    with pytest.raises(DiskError) as info:
        write_identity(tmp_path, RunIdentity((("model.hidden", "32"),)))
    _assert_disk_error(info.value, tmp_path / RUN_NAME)
    assert _hidden(tmp_path) == [] and read_identity(tmp_path) == old


def test_metrics_append_never_leaves_half_a_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = Recorder(tmp_path)
    recorder.begin(resume=False)
    recorder.append(_metrics(0))
    real = diskio.os.write

    def half_then_full(fd: int, data: memoryview) -> int:
        if len(data) > 10:
            return real(fd, data[: len(data) // 2])  # a nearly full disk takes part ...
        raise OSError(errno.ENOSPC, "injected")  # ... and refuses the rest

    monkeypatch.setattr(diskio.os, "write", half_then_full)
    with pytest.raises(DiskError) as info:
        recorder.append(_metrics(1))
    _assert_disk_error(info.value, recorder.metrics_path)
    text = recorder.metrics_path.read_text()
    assert text.endswith("\n") and [json.loads(ln)["epoch"] for ln in text.splitlines()] == [0]


def test_metrics_append_in_vanished_dir(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path / "run")
    recorder.begin(resume=False)
    for path in (tmp_path / "run").iterdir():
        path.unlink()
    (tmp_path / "run").rmdir()
    with pytest.raises(DiskError, match="run vanished while writing .*metrics.jsonl") as info:
        recorder.append(_metrics(0))
    assert info.value.errno == errno.ENOENT and "recreate it or choose another --out" in str(
        info.value
    )


def test_metrics_begin_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder(tmp_path)
    recorder.begin(resume=False)
    recorder.append(_metrics(0))
    recorder.append(_metrics(1))
    recorder.save(_ckpt(0))
    before = recorder.metrics_path.read_bytes()
    monkeypatch.setattr(diskio.os, "fsync", _full)
    with pytest.raises(DiskError) as info:
        Recorder(tmp_path).begin(resume=True)  # would keep only epoch 0's line
    _assert_disk_error(info.value, recorder.metrics_path)
    assert recorder.metrics_path.read_bytes() == before and _hidden(tmp_path) == []


def test_summary_write_is_atomic(
    store4: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gnnsys.train.control import run as run_mod

    coordinator: Any = SimpleNamespace(
        run=lambda: [], best=lambda: None, metric="acc", restarts=0, failures=[]
    )
    args = (
        RunConfig(), tmp_path, PreparedStore(store4), coordinator, "partitioned", "local", 0.0,
        DevicePlan("cpu"),
    )  # fmt: skip
    run_mod._finish(*args)
    before = (tmp_path / "summary.json").read_bytes()
    monkeypatch.setattr(diskio.os, "fsync", _full)
    with pytest.raises(DiskError) as info:
        run_mod._finish(*args)
    _assert_disk_error(info.value, tmp_path / "summary.json")
    assert (tmp_path / "summary.json").read_bytes() == before and _hidden(tmp_path) == []


# ---- the partitioning child --------------------------------------------------------------------
def raise_disk_error(spec: DataConfig, *args: Any) -> int:
    """A child that fails to write (module level: the spawned child imports it)."""
    raise DiskError("no space left on device writing X", "X", errno.ENOSPC, 123, 45)


def die_by_sigbus(spec: DataConfig, *args: Any) -> int:
    """A child killed mid-write, as a store into a mapped page of a full tmpfs was."""
    target: Path = args[-1]
    (target.parent / f".{target.name}.tmp-0123456789ab" / "part-0").mkdir(parents=True)
    os.kill(os.getpid(), signal.SIGBUS)
    return 0


@pytest.mark.timeout(120)
def test_child_disk_error_arrives_as_itself(tmp_path: Path) -> None:
    with pytest.raises(DiskError) as info:
        prepare_mod._in_child(raise_disk_error, DataConfig(), 2, 2, 0, tmp_path / "store")
    err = info.value
    assert (err.errno, err.path, err.needed_bytes, err.free_bytes) == (errno.ENOSPC, "X", 123, 45)
    assert str(err) == "no space left on device writing X"


@pytest.mark.timeout(120)
def test_child_killed_by_signal(tmp_path: Path) -> None:
    target = tmp_path / "store"
    with pytest.raises(ProcessDiedError) as info:
        prepare_mod._in_child(die_by_sigbus, DataConfig(), 2, 2, 0, target)
    text = str(info.value)
    assert info.value.exitcode == -signal.SIGBUS and info.value.path == str(target)
    assert f"into {target} was killed by SIGBUS (signal {int(signal.SIGBUS)})" in text, text
    assert "partial store was removed" in text and "choose another --out" in text
    assert list(tmp_path.iterdir()) == []  # its .store.tmp-* removed


@pytest.mark.parametrize("with_checkpoint", [False, True])
def test_failed_store_forgets_a_fresh_run(
    with_checkpoint: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_identity(tmp_path, RunIdentity((("model.hidden", "16"),)))
    if with_checkpoint:
        save_checkpoint(tmp_path, _ckpt(0))
    monkeypatch.setattr(prepare_mod, "_in_child", lambda *a: raise_disk_error(*a))
    with pytest.raises(DiskError):
        prepare_mod.prepare_store(
            DataConfig(), num_parts=2, num_hops=2, seed=0, run_dir=tmp_path, reuse=False
        )
    assert (tmp_path / RUN_NAME).exists() == with_checkpoint  # kept only for a resumable run


# ---- real file systems, end to end -------------------------------------------------------------
@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs at ``tmp_path/tiny``."""
    yield from mount_tmpfs(tmp_path / "tiny", "size=1m")


@pytest.fixture
def read_only_fs(tmp_path: Path) -> Iterator[Path]:
    """A read-only tmpfs at ``tmp_path/ro``."""
    yield from mount_tmpfs(tmp_path / "ro", "ro,size=1m")


def _train(out: Path, *flags: str) -> tuple[int, list[str]]:
    """``gnnsys train`` on a synthetic graph; its exit code and its ``error:`` lines."""
    done = subprocess.run(
        [sys.executable, "-m", "gnnsys", "train", "synthetic:sbm", "--parts", "2", "--epochs"]
        + ["1", "--out", str(out), *flags],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    return done.returncode, [ln for ln in done.stderr.splitlines() if " error: " in ln]


def _leftovers(root: Path) -> list[str]:
    return sorted(str(p) for p in root.rglob(".*") if ".tmp" in p.name)


@pytest.mark.timeout(300)
def test_cli_store_larger_than_disk(tiny_fs: Path) -> None:
    """Fails before any byte is written; no ``run.json``, no ``.store.tmp-*``."""
    out = tiny_fs / "run"
    rc, errors = _train(out, "--num-nodes", "4000")
    assert rc == 1, errors
    assert len(errors) == 1 and "internal error" not in errors[0]
    size = r"[\d.]+ (KiB|MiB)"
    assert re.fullmatch(
        f"gnnsys train: error: no space left on device writing {out}/store "
        rf"\(needs ~{size}, {size} free on {tiny_fs}\); free at least {size} more on {tiny_fs} "
        "or choose another --out",
        errors[0],
    ), errors[0]
    assert _leftovers(tiny_fs) == [] and not (out / RUN_NAME).exists()


@pytest.mark.timeout(300)
def test_cli_disk_fills_during_training(tiny_fs: Path) -> None:
    """The store fits, a later file does not: one line, whole files only (in-process ranks)."""
    out = tiny_fs / "run"
    rc, errors = _train(out, "--num-nodes", "1000", "--executor", "local")
    assert rc == 1, errors
    assert len(errors) == 1 and "internal error" not in errors[0]
    assert errors[0].startswith(f"gnnsys train: error: no space left on device writing {out}/")
    assert errors[0].endswith("or choose another --out")
    assert _leftovers(tiny_fs) == []
    metrics = out / "metrics.jsonl"
    if metrics.exists():
        text = metrics.read_text()
        assert text == "" or text.endswith("\n")
        [json.loads(ln) for ln in text.splitlines()]  # every line whole
    if (out / CHECKPOINT_NAME).exists():
        assert load_checkpoint(out) is not None


@pytest.mark.timeout(120)
def test_cli_read_only_out(read_only_fs: Path) -> None:
    rc, errors = _train(read_only_fs / "run", "--num-nodes", "1000")
    assert rc == 2 and len(errors) == 1, errors
    assert errors[0] == (
        f"gnnsys train: error: --out {read_only_fs}/run: cannot be created in {read_only_fs} "
        "(Read-only file system); choose a directory you can write to"
    )


def test_read_only_run_dir_writers(read_only_fs: Path) -> None:
    """Past the pre-flight (a file system remounted read-only): each writer names the fix."""
    for write in (
        lambda: save_checkpoint(read_only_fs, _ckpt(0)),
        lambda: write_identity(read_only_fs, RunIdentity(())),
        lambda: Recorder(read_only_fs).begin(resume=False),
        lambda: Recorder(read_only_fs).append(_metrics(0)),
    ):
        with pytest.raises(DiskError, match="read-only file system: cannot write") as info:
            write()
        assert info.value.errno == errno.EROFS
        assert str(info.value).endswith("choose another --out on a writable file system")
    assert list(read_only_fs.iterdir()) == []
