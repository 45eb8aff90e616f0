"""A real small or read-only file system for the disk-error tests: a tmpfs mount (needs root)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def mount_tmpfs(mnt: Path, options: str) -> Iterator[Path]:
    """Mount a tmpfs with ``options`` (``size=1m``, ``ro,size=1m``) at ``mnt``; unmount after.

    Skips the test, with the reason, where ``mount`` is refused (not root, no privileges).
    """
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root): {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
