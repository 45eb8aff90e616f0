"""Dataset registry interface and data-root resolution.

A loader is any callable ``(variant, root, **params) -> Graph``; the registry in
``gnnsys.datasets`` maps a family name (the part before ``:``) to one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol

from gnnsys.errors import DatasetNotFoundError
from gnnsys.types import Graph

DATA_ENV = "GNNSYS_DATA"
"""Environment variable naming a data root laid out like ``../shared/datasets``."""


class DatasetSource(Protocol):
    """Loads one family of datasets (``planetoid``, ``synthetic``, ...)."""

    def __call__(self, variant: str, root: Path | None, **params: Any) -> Graph:
        """Return the graph ``family:variant``; raise ``DatasetNotFoundError`` if files lack."""
        ...


def candidate_roots(root: str | os.PathLike[str] | None) -> list[Path]:
    """Data roots in priority order: ``root`` > ``$GNNSYS_DATA`` > ``../shared/datasets``."""
    if root is not None:
        return [Path(root)]
    found: list[Path] = []
    if os.environ.get(DATA_ENV):
        found.append(Path(os.environ[DATA_ENV]))
    repo = Path(__file__).resolve().parents[2]
    for base in (Path.cwd(), repo):
        shared = (base / ".." / "shared" / "datasets").resolve()
        if shared.is_dir() and shared not in found:
            found.append(shared)
    return found


def find_dir(root: str | os.PathLike[str] | None, subdir: str, dataset: str) -> Path:
    """The first ``<root>/<subdir>`` that exists, else a ``DatasetNotFoundError`` saying where."""
    roots = candidate_roots(root)
    for r in roots:
        if (r / subdir).is_dir():
            return r / subdir
    looked = (
        ", ".join(str(r / subdir) for r in roots) or "(no root: none given, $GNNSYS_DATA unset)"
    )
    raise DatasetNotFoundError(
        f"dataset {dataset!r} not found; looked in {looked}. Pass --root DIR (a directory laid out "
        f"like shared/datasets, with a {subdir}/ folder) or set {DATA_ENV}=DIR"
    )
