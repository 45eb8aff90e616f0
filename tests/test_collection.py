"""Every ``tests/**/test_*.py`` on disk yields at least one collected test.

pytest's default ``norecursedirs`` (``build``, ``dist``, dot folders, ...) and ruff's default
excludes skip folders silently; a test file under such a name, or one whose tests all vanish
(a renamed fixture module, a ``collect_ignore`` entry), would never run and never fail. This
test collects the whole suite in a fresh process, as CI does, and names every file that gave
no item.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(240)
def test_every_test_file_yields_a_collected_item() -> None:
    on_disk = {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "tests").rglob("test_*.py")
        if "__pycache__" not in p.parts
    }
    assert on_disk, "no test file found under tests/"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=220,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    collected = {line.split("::", 1)[0] for line in proc.stdout.splitlines() if "::" in line}
    missing = sorted(on_disk - collected)
    assert not missing, (
        f"{len(missing)} test file(s) yield no collected test: {', '.join(missing)}; "
        "rename a folder pytest skips by default (e.g. build, dist) or fix their collection"
    )
