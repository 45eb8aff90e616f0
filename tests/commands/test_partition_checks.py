"""`gnnsys partition` refuses bad arguments before it loads anything: one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from gnnsys.cli import main


@pytest.mark.parametrize(
    ("argv", "expect"),
    [
        (["--parts", "0"], "--parts 0: must be an integer >= 1"),
        (["--parts", "2", "--hops", "0"], "--hops 0: must be an integer >= 1"),
        (["--parts", "2", "--seed", "-3"], "--seed -3: must be an integer >= 0"),
    ],
)
def test_bad_numbers(
    argv: list[str], expect: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "s"
    assert main(["partition", "nope:never-loaded", *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert expect in err and "Traceback" not in err and not out.exists()


def test_out_exists_or_unwritable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "f").write_text("x")
    assert main(["partition", "nope:x", "--parts", "2", "--out", str(tmp_path / "f")]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["partition", "nope:x", "--parts", "2", "--out", "/proc/gnnsys/x"]) == 2
    assert "cannot be created" in capsys.readouterr().err


def test_verify_of_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "f").write_text("x")
    assert main(["store", "verify", str(tmp_path / "f")]) == 1
    assert "is a file, not a partition directory" in capsys.readouterr().err
