"""Disk errors of the store writer and ``gnnsys.store.diskio``: one clear error, nothing left.

Most tests inject an ``OSError`` with monkeypatch; the ``tmpfs`` ones write into a real 256 KiB
tmpfs (needs root and ``mount``; skipped with the reason otherwise).
"""

from __future__ import annotations

import errno
import pickle
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import gnnsys.store.diskio as diskio
import gnnsys.store.writer as writer_mod
from gnnsys.datasets.synthetic import sbm
from gnnsys.errors import DiskError, GnnsysError
from gnnsys.partitioners import partition
from gnnsys.store import load_partition, npy_files, write_partitions
from gnnsys.types import Graph
from tests.tmpfs import mount_tmpfs


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs mounted at ``tmp_path/tiny`` (unmounted afterwards)."""
    yield from mount_tmpfs(tmp_path / "tiny", "size=256k")


def test_disk_error_pickles_with_its_fields() -> None:
    err = DiskError("no space left on device writing /x", "/x", errno.ENOSPC, 10, 3)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is DiskError and isinstance(back, OSError | GnnsysError)
    assert (back.message, back.path, back.errno, back.needed_bytes, back.free_bytes) == (
        "no space left on device writing /x",
        "/x",
        errno.ENOSPC,
        10,
        3,
    )
    assert str(back) == str(err) == "no space left on device writing /x"


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (errno.ENOSPC, ["no space left on device writing", "needs ~2.0 MiB", "free at least"]),
        (errno.EDQUOT, ["disk quota exceeded writing", "needs ~2.0 MiB"]),
        (errno.EROFS, ["read-only file system: cannot write", "mounted read-only"]),
        (errno.EACCES, ["permission denied writing", "writable for this user"]),
        (errno.EPERM, ["permission denied writing"]),
        (errno.ENOENT, ["vanished while writing", "recreate it"]),
        (errno.EIO, ["cannot write", "EIO"]),
    ],
)
def test_disk_error_names_path_and_fix(
    code: int, words: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(diskio, "free_bytes", lambda path: 1 << 20)
    target = tmp_path / "run" / "file.bin"
    err = diskio.disk_error(OSError(code, "boom"), target, needed=2 << 20)
    assert isinstance(err, DiskError) and err.errno == code and err.path == str(target)
    text = str(err)
    assert str(target) in text and "choose another --out" in text
    for word in words:
        assert word in text, text
    assert diskio.disk_error(err, target) is err  # already converted: passed through


def test_check_free_refuses_before_writing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(diskio, "free_bytes", lambda path: 1000)
    with pytest.raises(DiskError, match=r"needs ~2\.0 KiB, 1000 bytes free") as info:
        diskio.check_free(tmp_path / "store", 2000)
    assert info.value.errno == errno.ENOSPC and info.value.needed_bytes == 2000
    diskio.check_free(tmp_path / "store", 500)


def test_store_precheck_writes_nothing(
    tiny_graph: Graph, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(diskio, "free_bytes", lambda path: 4096)
    with pytest.raises(DiskError, match="no space left on device writing .*out") as info:
        write_partitions(tiny_graph, partition(tiny_graph, "range", 2), tmp_path / "out")
    assert info.value.needed_bytes is not None and info.value.needed_bytes > 4096
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EACCES, errno.ENOENT])
def test_store_write_error_removes_staged_dir(
    code: int, tiny_graph: Graph, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = writer_mod.save_rows
    calls = []

    def fail_second(*args: object) -> object:
        calls.append(1)
        if len(calls) == 2:
            raise OSError(code, "injected")
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(writer_mod, "save_rows", fail_second)
    root = tmp_path / "out"
    with pytest.raises(DiskError) as info:
        write_partitions(tiny_graph, partition(tiny_graph, "range", 2), root)
    assert info.value.errno == code and info.value.path == str(root)
    assert str(root) in str(info.value) and "choose another --out" in str(info.value)
    assert list(tmp_path.iterdir()) == []  # no .out.tmp-*, no out


def test_failed_overwrite_keeps_old_store(
    tiny_graph: Graph, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "out"
    write_partitions(tiny_graph, partition(tiny_graph, "range", 2), root)

    def full(*args: object) -> object:
        raise OSError(errno.ENOSPC, "injected")

    monkeypatch.setattr(writer_mod, "save_rows", full)
    with pytest.raises(DiskError, match="no space left"):
        write_partitions(tiny_graph, partition(tiny_graph, "random", 2), root, overwrite=True)
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    assert len(load_partition(root)) == 2  # the old store, intact


def test_save_rows_matches_np_save(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The chunked writer's file is byte for byte ``np.save`` of the gathered rows."""
    monkeypatch.setattr(npy_files, "_ROWS_PER_CHUNK", 7)
    rng = np.random.default_rng(0)
    rows = rng.permutation(50)[:33]
    for src in (
        rng.random((50, 5), dtype=np.float32),
        rng.integers(0, 4, 50),
        rng.random(50) > 0.5,
    ):
        npy_files.save_rows(tmp_path, "a.npy", src, rows)
        np.save(tmp_path / "b.npy", src[rows])
        assert (tmp_path / "a.npy").read_bytes() == (tmp_path / "b.npy").read_bytes()


def test_append_whole_truncates_a_partial_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "lines.txt"
    diskio.append_whole(path, b"first\n")
    real = diskio.os.write
    calls = []

    def half_then_full(fd: int, data: memoryview) -> int:
        calls.append(1)
        if len(calls) == 1:
            return real(fd, data[: len(data) // 2])  # a full disk takes part of it ...
        raise OSError(errno.ENOSPC, "injected")  # ... then refuses the rest

    monkeypatch.setattr(diskio.os, "write", half_then_full)
    with pytest.raises(DiskError, match="no space left on device writing .*lines.txt"):
        diskio.append_whole(path, b"second line\n")
    assert path.read_bytes() == b"first\n"


def test_atomic_write_leaves_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "f.json"
    diskio.atomic_write(path, b"old\n")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "injected")

    monkeypatch.setattr(diskio.os, "fsync", full)
    with pytest.raises(DiskError, match=r"writing .*f\.json \(needs ~4 bytes"):
        diskio.atomic_write(path, b"new\n")
    assert path.read_bytes() == b"old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]


_REAL_FULL_DISK = """
import sys
from pathlib import Path
import gnnsys.store.writer as w
from gnnsys.datasets.synthetic import sbm
from gnnsys.errors import DiskError
from gnnsys.partitioners import partition
w._store_bytes = lambda graph, assignment: 0  # skip the pre-check: let write() hit ENOSPC
g = sbm(num_nodes=2000, avg_degree=2, num_features=256, seed=0)
try:
    w.write_partitions(g, partition(g, "range", 2), Path(sys.argv[1]) / "store")
except DiskError as err:
    print("DiskError", err.errno, err)
"""


def test_full_tmpfs_is_an_error_not_a_signal(tiny_fs: Path) -> None:
    """A store larger than the file system: ENOSPC from write, never SIGBUS from a mapping.

    Runs in a subprocess so that a regression (a SIGBUS) fails this test, not the session.
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_REAL_FULL_DISK), str(tiny_fs)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"rc={done.returncode} (a signal is negative): {done.stderr}"
    assert done.stdout.startswith(f"DiskError {errno.ENOSPC} no space left on device writing")
    assert f"{tiny_fs}/store" in done.stdout and "choose another --out" in done.stdout
    assert list(tiny_fs.iterdir()) == []


def test_read_only_tmpfs(tiny_fs: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_fs)], check=True)
    small = sbm(num_nodes=100, num_features=4, seed=0)  # fits: the pre-check passes
    with pytest.raises(DiskError, match="read-only file system: cannot write") as info:
        write_partitions(small, partition(small, "range", 2), tiny_fs / "store")
    assert info.value.errno == errno.EROFS and "choose another --out" in str(info.value)
