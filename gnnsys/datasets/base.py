"""Dataset registry interface and data-root resolution.

A loader is any callable ``(variant, root, **params) -> Graph``; the registry in
``gnnsys.datasets`` maps a family name (the part before ``:``) to one.
"""

from __future__ import annotations

import os
import pickle
import struct
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeAlias

import numpy as np

from gnnsys.errors import DatasetFileError, DatasetNotFoundError, GnnsysError
from gnnsys.types import Graph

DATA_ENV = "GNNSYS_DATA"
"""Environment variable naming a data root laid out like ``../shared/datasets``."""


DatasetSource: TypeAlias = Callable[..., Graph]
"""Loads one family of datasets: ``loader(variant, root, **params) -> Graph``.

``root`` is a ``Path`` or ``None``; ``params`` are keyword-only and family-specific, so each
loader spells out its own (an unknown one is a ``TypeError`` naming it). A loader raises
``DatasetNotFoundError`` when files are missing and ``ValueError`` for an unknown variant.
"""


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


def require_file(path: Path, dataset: str, how_to_get: str) -> Path:
    """``path`` if it is a file, else a ``DatasetNotFoundError`` naming it and how to get it.

    Args:
        path: The file a loader needs.
        dataset: Dataset name for the message, e.g. ``"planetoid:cora"``.
        how_to_get: One sentence on where the file comes from.

    Returns:
        ``path`` unchanged.
    """
    if not path.is_file():
        raise DatasetNotFoundError(
            f"dataset {dataset!r} is incomplete: {path} is missing. {how_to_get}"
        )
    return path


def csr_to_dense(
    data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, shape: tuple[int, int]
) -> np.ndarray:
    """``[R, F]`` float32 dense matrix from CSR arrays (duplicates summed, as scipy does).

    Costs one ``[R, F]`` float32 array plus ``nnz`` int64 row ids.
    """
    out = np.zeros(shape, dtype=np.float32)
    counts: np.ndarray = np.diff(indptr.astype(np.int64))
    rows = np.repeat(np.arange(shape[0]), counts)
    np.add.at(out, (rows, indices.astype(np.int64)), data.astype(np.float32))
    return out


def csr_to_coo(indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """``[2, E]`` int64 COO (row 0 = CSR row, row 1 = column) from a CSR pattern."""
    counts: np.ndarray = np.diff(indptr.astype(np.int64))
    rows = np.repeat(np.arange(indptr.shape[0] - 1), counts)
    return np.stack([rows, indices.astype(np.int64)])


def read_edge_csv(path: Path) -> np.ndarray:
    """``[2, E]`` int64 COO from a ``src,dst`` CSV with one header line (numpy's C parser)."""
    pairs = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.int64, ndmin=2)
    if pairs.shape[1] != 2:
        raise ValueError(f"{path} has {pairs.shape[1]} columns; expected two (src,dst)")
    return np.ascontiguousarray(pairs.T)


def lists_to_coo(lists_by_key: dict[str, list[Any]]) -> tuple[np.ndarray, list[Any]]:
    """Rows and flat values of a JSON ``{"<row>": [values, ...]}`` map (one pass, vectorized).

    Returns:
        ``(row_K, values)``: ``[K]`` int64 row of every value, and the ``K`` values in order.
    """
    keys = np.fromiter(map(int, lists_by_key), dtype=np.int64, count=len(lists_by_key))
    lengths = np.fromiter(map(len, lists_by_key.values()), dtype=np.int64, count=keys.shape[0])
    values = [v for vs in lists_by_key.values() for v in vs]
    return np.repeat(keys, lengths), values


_UNREADABLE = (
    OSError,  # gzip.BadGzipFile, short reads
    EOFError,  # an empty or cut .npz/.npy/pickle
    zipfile.BadZipFile,  # a truncated or corrupt .npz
    pickle.UnpicklingError,
    struct.error,
    UnicodeDecodeError,
    KeyError,  # a zip member missing from a damaged archive
    zlib.error,  # a damaged compressed member (np.savez_compressed)
)
"""What reading a damaged dataset file raises (beyond a plain ``ValueError``)."""


@contextmanager
def reading(what: str) -> Iterator[None]:
    """Turn the errors a damaged file raises inside the block into one ``DatasetFileError``.

    Args:
        what: The dataset name or file, for the message.

    Raises:
        DatasetFileError: Naming ``what``, the underlying error and the fix.
    """
    try:
        yield
    except GnnsysError:
        raise  # already says what is wrong (e.g. DatasetNotFoundError)
    except _UNREADABLE as err:
        raise DatasetFileError(
            f"{what}: a file cannot be read ({type(err).__name__}: {err}); it is truncated, "
            "corrupt, empty or not the expected format. Replace it with an intact copy "
            "(download it again, see `gnnsys datasets`, or save it again)"
        ) from err


def open_npz(path: Path) -> Any:
    """``np.load(path, allow_pickle=False)`` of an ``.npz``, refusing anything that is not one.

    ``np.load`` of a file that is neither a zip nor a ``.npy`` falls back to unpickling and then
    blames pickling; this names the real problem instead.

    Raises:
        DatasetFileError: ``path`` is empty, truncated or not a zip archive.
    """
    if not zipfile.is_zipfile(path):
        raise DatasetFileError(
            f"{path}: not an .npz archive (empty, truncated or another format); replace it "
            "with an intact copy (download it again, see `gnnsys datasets`, or save it again)"
        )
    with reading(str(path)):
        return np.load(path, allow_pickle=False)
