"""Damaged dataset files end in one ``DatasetFileError`` naming the dataset, never a raw error.

Each case copies the real file into a temporary data root and damages the copy.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from gnnsys.cli import main
from gnnsys.datasets import load
from gnnsys.errors import DatasetFileError


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _garbage(path: Path) -> None:
    path.write_bytes(b"\x00\x01not an archive" * 10)


DAMAGE: dict[str, Callable[[Path], None]] = {
    "truncated": _truncate,
    "empty": _empty,
    "garbage": _garbage,
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize(
    ("name", "rel"),
    [
        ("npz:cora", "gnn_benchmark_npz/cora.npz"),
        ("planetoid:cora", "planetoid/ind.cora.graph"),
        ("planetoid:cora", "planetoid/ind.cora.x"),
    ],
)
def test_damaged_file_is_one_clear_error(
    shared_root: Path, tmp_path: Path, name: str, rel: str, damage: str
) -> None:
    folder = rel.split("/")[0]
    shutil.copytree(shared_root / folder, tmp_path / folder)
    DAMAGE[damage](tmp_path / rel)
    with pytest.raises((DatasetFileError, ValueError)) as info:
        load(name, root=tmp_path)
    assert name in str(info.value) or rel.split("/")[-1] in str(info.value), info.value


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_partition_of_a_damaged_npz(
    tmp_path: Path, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "g.npz"
    np.savez(path, indptr=np.array([0, 1, 2, 2]), indices=np.array([1, 2, 0]))
    DAMAGE[damage](path)
    out = tmp_path / "store"
    assert main(["partition", str(path), "--parts", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"gnnsys partition: error: {path}: " in err and "intact copy" in err
    assert "Traceback" not in err and not out.exists()
