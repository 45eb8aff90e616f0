"""Fixtures for dataset tests: the shared data root, or a skip saying why it is absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED = Path(
    os.environ.get("GNNSYS_DATA") or Path(__file__).resolve().parents[3] / "shared" / "datasets"
)


@pytest.fixture(scope="session")
def shared_root() -> Path:
    """``$GNNSYS_DATA``, else ``../shared/datasets`` next to the repository; skip when absent."""
    if not SHARED.is_dir():
        pytest.skip(f"real datasets not present at {SHARED}; set GNNSYS_DATA to a copy of them")
    return SHARED
