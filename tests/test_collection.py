"""Every ``tests/**/test_*.py`` on disk yields at least one collected test.

pytest's default ``norecursedirs`` (``build``, ``dist``, dot folders, ...) and ruff's default
excludes skip folders silently; a test file under such a name, or one whose tests all vanish
(a renamed fixture module, a ``collect_ignore`` entry), would never run and never fail. This
test names every file that gave no item: in a session that collected all of ``tests/`` (as CI's
does), from what that session collected (``conftest.COLLECTED``, before ``-m``/``-k``);
otherwise it collects the whole suite in a fresh process.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(240)
def test_every_test_file_yields_a_collected_item(request: pytest.FixtureRequest) -> None:
    on_disk = {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "tests").rglob("test_*.py")
        if "__pycache__" not in p.parts
    }
    assert on_disk, "no test file found under tests/"
    whole, files = request.config.stash.get(_collected_key(request), (False, set()))
    if whole:
        _assert_none_missing(on_disk, files)
        return
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=220,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    _assert_none_missing(
        on_disk, {line.split("::", 1)[0] for line in proc.stdout.splitlines() if "::" in line}
    )


def _collected_key(request: pytest.FixtureRequest) -> pytest.StashKey[tuple[bool, set[str]]]:
    """The stash key of ``tests/conftest.py``, as pytest loaded it (one module object)."""
    conftest = ROOT / "tests" / "conftest.py"
    for plugin in request.config.pluginmanager.get_plugins():
        if Path(getattr(plugin, "__file__", "") or "").resolve() == conftest:
            return plugin.COLLECTED  # type: ignore[no-any-return]
    raise AssertionError(f"{conftest} is not loaded")


def _assert_none_missing(on_disk: set[str], collected: set[str]) -> None:
    missing = sorted(on_disk - collected)
    assert not missing, (
        f"{len(missing)} test file(s) yield no collected test: {', '.join(missing)}; "
        "rename a folder pytest skips by default (e.g. build, dist) or fix their collection"
    )
