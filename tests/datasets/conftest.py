"""Fixtures for dataset tests: the shared data root, or a skip saying why it is absent."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[3] / "shared" / "datasets"


@pytest.fixture(scope="session")
def shared_root() -> Path:
    """``../shared/datasets`` next to the repository; skip the test when it is absent."""
    if not SHARED.is_dir():
        pytest.skip(f"real datasets not present at {SHARED} (only on the shared CI machine)")
    return SHARED
