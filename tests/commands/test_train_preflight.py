"""`gnnsys train` refuses every bad input before Ray starts: one line, exit 2, nothing written.

``gnnsys.train.control.run.train`` is replaced by a stub, so a test that reaches it proves the
pre-flight passed and one that does not never started Ray.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from gnnsys.cli import main
from gnnsys.datasets import load
from gnnsys.partitioners import partition
from gnnsys.store import write_partitions
from gnnsys.store.integrity import file_digests
from gnnsys.store.layout import manifest_checksum, shard_file
from gnnsys.train.control.checkpoint import (
    CHECKPOINT_NAME,
    PREVIOUS_NAME,
    Checkpoint,
    save_checkpoint,
)


@pytest.fixture()
def calls(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Records every call of the (stubbed) trainer."""
    seen: list[Any] = []

    def fake_train(config: Any, out: Any, **kw: Any) -> Any:
        seen.append(config)
        best = {"val_acc": 0.0, "epoch": 0, "test_acc": 0.0}
        summary = {
            "best": best,
            "final": best,
            "metric": "acc",
            "config": {"cluster": {"topology": "partitioned"}},
        }
        return SimpleNamespace(history=[], summary=summary, run_dir=Path(out))

    monkeypatch.setattr("gnnsys.train.control.run.train", fake_train)
    return seen


@pytest.fixture(scope="module")
def clean_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    graph = load("synthetic:sbm", num_nodes=300, num_features=8, seed=0)
    root = tmp_path_factory.mktemp("pf") / "store"
    write_partitions(graph, partition(graph, "random", 2, seed=0), root, num_hops=2)
    return root


@pytest.fixture()
def store(clean_store: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "store"
    shutil.copytree(clean_store, dst)
    return dst


def _train(*argv: str) -> int:
    return main(["train", "--no-progress", *argv])


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if "gnnsys train: error:" in ln]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# ---- numbers and paths -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "expect"),
    [
        (["--lr", "nan"], "--lr nan: must be a finite number > 0"),
        (["--lr", "inf"], "--lr inf"),
        (["--lr", "-0.1"], "--lr -0.1"),
        (["--deadline", "0"], "--deadline 0.0"),
        (["--epochs", "0"], "--epochs 0: must be an integer >= 1"),
        (["--parts", "-2"], "--parts -2"),
        (["--batch-size", "0"], "--batch-size 0"),
        (["--hidden", "0"], "--hidden 0"),
        (["--max-restarts", "-1"], "--max-restarts -1: must be an integer >= 0"),
        (["--seed", "-1"], "--seed -1"),
        (["--cache-ratio", "nan"], "cache ratio=nan"),
        (["--cache-ratio", "-1"], "cache ratio=-1.0"),
        (["--cache-mb", "inf"], "cache mb=inf"),
        (["--cache-ratio", "0.5"], "has no effect with --cache-policy none"),
        (["--fanouts", "10,x"], "--fanouts '10,x'"),
        (["--fanouts", "0"], "fanouts must be"),
        (["--preset", "nope"], "unknown preset 'nope'"),
        (["nope:x"], "unknown dataset 'nope:x'"),
    ],
)
def test_bad_numbers_are_refused_before_anything(
    argv: list[str],
    expect: str,
    calls: list[Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "run"
    assert _train(*argv, "--out", str(out)) == 2
    assert expect in _one_error_line(capsys)
    assert not calls and not out.exists()


def test_out_is_a_file(
    calls: list[Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "f").write_text("x")
    assert _train("--out", str(tmp_path / "f")) == 2
    assert "is a file, not a directory" in _one_error_line(capsys)
    assert not calls


def test_out_unwritable(calls: list[Any], capsys: pytest.CaptureFixture[str]) -> None:
    assert _train("--out", "/proc/gnnsys-test/run") == 2  # /proc refuses new entries, even root
    assert "cannot be created" in _one_error_line(capsys)
    assert not calls


def test_cache_ratio_above_one_is_explained(
    calls: list[Any], store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--store", str(store), "--cache-policy", "degree", "--cache-ratio", "2"]
    assert _train(*argv, "--out", str(tmp_path / "run")) == 0
    assert "--cache-ratio 2 > 1: the cache may hold 2x" in capsys.readouterr().err
    assert len(calls) == 1


# ---- the store's hand cases --------------------------------------------------------------------
def _flip(path: Path, pos: int) -> None:
    data = bytearray(path.read_bytes())
    data[pos] ^= 0x01
    path.write_bytes(bytes(data))


def _swap(a: Path, b: Path) -> None:
    tmp = a.with_suffix(".tmp")
    a.rename(tmp)
    b.rename(a)
    tmp.rename(b)


CORRUPT = {
    "flipped byte in x": lambda r: _flip(r / shard_file(0, "x"), 200),
    "swapped y": lambda r: _swap(r / shard_file(0, "y"), r / shard_file(1, "y")),
    "flipped train_mask": lambda r: _flip(r / shard_file(1, "train_mask"), 130),
    "flipped local index": lambda r: _flip(r / shard_file(0, "indices_local"), 136),
    "manifest edited": lambda r: (r / "manifest.json").write_text(
        (r / "manifest.json").read_text().replace('"seed": 0', '"seed": 1')
    ),
}


@pytest.mark.parametrize("case", sorted(CORRUPT))
def test_corrupt_store_is_refused(
    case: str, store: Path, calls: list[Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    CORRUPT[case](store)
    out = tmp_path / "run"
    assert _train("--store", str(store), "--out", str(out)) == 2
    line = _one_error_line(capsys)
    assert str(store) in line and "gnnsys partition" in line and "mismatch" in line
    assert not calls and not out.exists()


def test_store_without_labels(
    store: Path, calls: list[Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A consistent store (checksums re-signed) that lacks y: refused by name, no TypeError."""
    path = store / "manifest.json"
    obj = json.loads(path.read_text())
    for part in (0, 1):
        del obj["files"][shard_file(part, "y")]
        (store / shard_file(part, "y")).unlink()
    obj["checksum"] = manifest_checksum(obj)
    path.write_text(json.dumps(obj))
    assert _train("--store", str(store), "--out", str(tmp_path / "run")) == 2
    assert "part 0 has no y; training needs features, labels" in _one_error_line(capsys)
    assert not calls


def test_store_with_foreign_semantics(
    store: Path, calls: list[Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Checksums valid (another tool wrote it) but a local index points past the halo."""
    rel = shard_file(1, "indices_local")
    lid = np.load(store / rel)
    lid[3] = 10**6
    np.save(store / rel, lid)
    sha, fast = file_digests(store / rel)
    obj = json.loads((store / "manifest.json").read_text())
    obj["files"][rel].update(sha256=sha, xxh3=fast)
    obj["checksum"] = manifest_checksum(obj)
    (store / "manifest.json").write_text(json.dumps(obj))
    assert _train("--store", str(store), "--out", str(tmp_path / "run")) == 2
    assert "indices_local.npy: local index out of range" in _one_error_line(capsys)


def test_store_with_other_parts(
    store: Path, calls: list[Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _train("--store", str(store), "--parts", "3", "--out", str(tmp_path / "r")) == 2
    assert "has 2 parts but --parts=3" in _one_error_line(capsys)


def test_typed_store_goes_through_the_same_checks(
    calls: list[Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A heterogeneous store: the same preflight verifies its part count and every checksum."""
    from gnnsys.datasets.mag import synthetic_mag
    from gnnsys.partitioners import partition_hetero
    from gnnsys.store import write_partitions

    mag = synthetic_mag(scale=0.002, seed=0)
    root = tmp_path / "typed"
    write_partitions(mag, partition_hetero(mag, "random", 2, 0), root, num_hops=2)
    assert _train("--store", str(root), "--parts", "3", "--out", str(tmp_path / "a")) == 2
    assert "has 2 parts but --parts=3" in _one_error_line(capsys)
    victim = next(p for p in sorted((root / "part-1").rglob("*.npy")) if p.stat().st_size > 256)
    _flip(victim, victim.stat().st_size - 1)
    assert _train("--store", str(root), "--parts", "2", "--out", str(tmp_path / "b")) == 2
    assert victim.name in _one_error_line(capsys) and not calls


# ---- resume ------------------------------------------------------------------------------------
def _first_run(store: Path, out: Path, *argv: str) -> None:
    """A run that got as far as its first two checkpoints (identity from run.json)."""
    assert _train("--store", str(store), "--out", str(out), *argv) == 0
    model = torch.nn.Linear(2, 2)
    for epoch in (0, 1):
        save_checkpoint(
            out,
            Checkpoint(
                epoch=epoch,
                model_state=model.state_dict(),
                optimizer_state=torch.optim.SGD(model.parameters(), lr=0.1).state_dict(),
                rng_by_rank=[{}, {}],
            ),
        )


def test_resume_refuses_other_model_and_fanouts(
    store: Path, calls: list[Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    _first_run(store, out, "--hidden", "32", "--fanouts", "5,5")
    argv = ["--store", str(store), "--out", str(out), "--resume"]
    assert _train(*argv, "--hidden", "64", "--fanouts", "5,5") == 2
    assert "model.hidden 32 -> 64" in _one_error_line(capsys)
    assert _train(*argv, "--hidden", "32", "--fanouts", "5,3") == 2
    assert "sampler.fanouts [5, 5] -> [5, 3]" in _one_error_line(capsys)
    assert _train(*argv, "--hidden", "32", "--fanouts", "5,5,5") == 2
    line = _one_error_line(capsys)
    assert "model.num_layers 2 -> 3" in line and "sampler.fanouts" in line
    assert len(calls) == 1  # only the first run


def test_resume_allows_epochs_and_explicit_changes(
    store: Path, calls: list[Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    _first_run(store, out, "--epochs", "2")
    argv = ["--store", str(store), "--out", str(out), "--resume", "--epochs", "5"]
    assert _train(*argv) == 0
    assert "resuming with changes: loop.epochs 2 -> 5" in capsys.readouterr().err
    assert _train(*argv, "--lr", "0.5") == 2
    assert "trainer.lr 0.003 -> 0.5" in _one_error_line(capsys)
    assert _train(*argv, "--lr", "0.5", "--allow-change", "lr") == 0
    assert "trainer.lr 0.003 -> 0.5" in capsys.readouterr().err
    assert _train(*argv, "--allow-change", "nonsense") == 2
    assert "--allow-change 'nonsense'" in _one_error_line(capsys)


def test_resume_refuses_another_store(
    store: Path,
    clean_store: Path,
    calls: list[Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "run"
    _first_run(store, out)
    graph = load("synthetic:sbm", num_nodes=200, num_features=8, seed=1)
    other = tmp_path / "other"
    write_partitions(graph, partition(graph, "random", 2, seed=0), other, num_hops=2)
    assert _train("--store", str(other), "--out", str(out), "--resume") == 2
    line = _one_error_line(capsys)
    assert "store.graph" in line and "store.content" in line


def test_resume_refuses_another_dataset_in_the_run_store(
    clean_store: Path, calls: list[Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No --store: --resume would reuse RUN_DIR/store, which holds another dataset."""
    out = tmp_path / "run"
    shutil.copytree(clean_store, out / "store")
    assert _train("planetoid:cora", "--out", str(out), "--resume") == 2
    assert "holds 'synthetic:sbm' but this run asks for 'planetoid:cora'" in _one_error_line(capsys)


def test_corrupt_newest_checkpoint_resumes_from_previous(
    store: Path, calls: list[Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    _first_run(store, out)
    (out / CHECKPOINT_NAME).write_bytes(b"PK\x03\x04 damaged")
    assert _train("--store", str(store), "--out", str(out), "--resume") == 0
    err = capsys.readouterr().err
    assert "resuming from the previous checkpoint (epoch 0)" in err


def test_all_checkpoints_corrupt(
    store: Path, calls: list[Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    _first_run(store, out)
    for name in (CHECKPOINT_NAME, PREVIOUS_NAME):
        (out / name).write_bytes(b"\x00" * 10)
    assert _train("--store", str(store), "--out", str(out), "--resume") == 2
    assert "no intact checkpoint left" in _one_error_line(capsys)
    assert len(calls) == 1
