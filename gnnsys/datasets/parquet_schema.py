"""The schema side of ``parquet:DIR``: the records, and :func:`open_parquet` (footers only).

``gnnsys.datasets.parquet`` describes the layout and reads the row groups; this module checks
every file's footer and schema (columns present, of the right types, the same in every node
file), reads ``gnnsys.json``, and lists the row groups. Names are re-exported from there.

Shape legend: ``N`` nodes, ``F`` features.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gnnsys.datasets.parquet_write import EDGES_DIR, MASK_COLUMNS, META_FILE, NODES_DIR
from gnnsys.errors import DatasetFileError, DatasetNotFoundError

__all__ = ["NodeRows", "ParquetGraph", "RowGroup", "open_parquet"]

_T = TypeVar("_T")
_X_COLUMN = re.compile(r"x_(\d+)")
_META_KEYS: dict[str, type] = {"name": str, "num_nodes": int, "num_classes": int}
_FEATURE_TYPES: dict[Any, np.dtype[Any]] = {
    pa.float32(): np.dtype(np.float32),
    pa.float16(): np.dtype(np.float16),
}


@dataclass(frozen=True, slots=True)
class RowGroup:
    """One row group of one file: the unit every read works on.

    Attributes:
        path: The Parquet file.
        index: Row group index inside it.
        num_rows: Rows in the group (from the footer).
    """

    path: Path
    index: int
    num_rows: int

    @property
    def where(self) -> str:
        """``"edges/part-0.parquet row group 3"``, for messages."""
        return f"{rel_path(self.path)} row group {self.index}"


@dataclass(frozen=True, slots=True)
class ParquetGraph:
    """What :func:`open_parquet` learned from footers and schemas; no data was read.

    Attributes:
        root: The directory.
        name: ``gnnsys.json``'s name, else ``"parquet:<directory name>"``.
        num_nodes: ``N``.
        num_features: ``F`` (0: no features).
        feature_dtype: float32 or float16 as stored (columns ``x_i`` read as float32); None.
        num_classes: From ``gnnsys.json``, else None (derived from ``y`` by ``Graph``).
        has_labels: Node tables have ``y``.
        has_split: Node tables have ``split`` or ``*_mask`` columns; then all three masks are
            read (a ``*_mask`` column that is absent reads as all False).
        edge_groups: Every row group of ``edges/``, files in name order.
        node_groups: Likewise for ``nodes/`` (empty without it).
        num_edge_rows: Rows of the edge tables (before duplicates are dropped).
        feature_columns: The feature columns read: ``("x",)`` or ``("x_0", ..., "x_{F-1}")``.
        split_columns: ``("split",)``, the ``*_mask`` columns present, or ``()``.
    """

    root: Path
    name: str
    num_nodes: int
    num_features: int
    feature_dtype: np.dtype[Any] | None
    num_classes: int | None
    has_labels: bool
    has_split: bool
    edge_groups: tuple[RowGroup, ...]
    node_groups: tuple[RowGroup, ...]
    num_edge_rows: int
    feature_columns: tuple[str, ...] = ()
    split_columns: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeRows:
    """The validated rows of one node row group (``id`` is the node's gid).

    Attributes:
        id: ``[K]`` int64 node ids, each in ``[0, N)``.
        x: ``[K, F]`` float32 or float16 (as stored), finite; None without features.
        y: ``[K]`` int64 labels in ``[-1, num_classes)``; None without labels.
        train_mask: ``[K]`` bool, or None; likewise ``val_mask`` and ``test_mask``.
    """

    id: np.ndarray
    x: np.ndarray | None
    y: np.ndarray | None
    train_mask: np.ndarray | None
    val_mask: np.ndarray | None
    test_mask: np.ndarray | None


def rel_path(path: Path) -> str:
    """``"edges/part-0.parquet"``: a table file as messages name it (relative to ``DIR``)."""
    return f"{path.parent.name}/{path.name}"


def fail(where: str, column: str | None, problem: str) -> DatasetFileError:
    """The error to raise: ``"<where>, column <column>: <problem and fix>"``."""
    at = f"{where}, column {column}" if column else where
    return DatasetFileError(f"{at}: {problem}")


@contextmanager
def opened(path: Path, where: str) -> Iterator[pq.ParquetFile]:
    """``ParquetFile(path)``; pyarrow's errors (truncated, corrupt) become a DatasetFileError."""
    try:
        with pq.ParquetFile(path) as pf:
            yield pf
    except (pa.ArrowException, OSError) as err:
        raise fail(
            where,
            None,
            f"cannot be read as Parquet ({type(err).__name__}: {err}); the file is truncated, "
            "corrupt or not Parquet. Write it again or replace it with an intact copy",
        ) from err


# ---- schemas ----------------------------------------------------------------------------------
def _column_type(schema: pa.Schema, name: str, where: str, need: str) -> pa.DataType | None:
    """The type of column ``name`` (None when absent); a repeated name is an error."""
    found = schema.get_all_field_indices(name)
    if len(found) > 1:
        raise fail(where, name, "appears more than once; keep one column of that name")
    if not found and need:
        raise fail(where, None, f"no column {name!r} (columns: {schema.names}); {need}")
    return schema.field(found[0]).type if found else None


def require_int(dtype: pa.DataType, where: str, column: str, what: str) -> None:
    """Refuse a non-integer column (or uint64, which may not fit int64) naming the cast."""
    if not pa.types.is_integer(dtype) or dtype == pa.uint64():
        raise fail(
            where,
            column,
            f"type {dtype}; {what} must be integers (int32 or int64): cast the column, e.g. "
            "pyarrow.compute.cast(column, pyarrow.int64())",
        )


def _check_edge_schema(schema: pa.Schema, where: str) -> None:
    for column in ("src", "dst"):
        need = "edge tables need integer columns src and dst"
        dtype = _column_type(schema, column, where, need)
        assert dtype is not None
        require_int(dtype, where, column, "node ids")


@dataclass(frozen=True, slots=True)
class _NodeSchema:
    """The columns one node file defines (every node file must define the same)."""

    feature_columns: tuple[str, ...]
    feature_dtype: np.dtype[Any] | None
    num_features: int
    has_labels: bool
    split_columns: tuple[str, ...]

    def __str__(self) -> str:
        cols = self.feature_columns
        feats = ", ".join(cols) if len(cols) < 3 else f"{cols[0]} .. {cols[-1]}"
        labels = "y" if self.has_labels else "no y"
        split = ", ".join(self.split_columns) or "no split"
        return f"{feats or 'no x'} ({self.feature_dtype}); {labels}; {split}"


def _node_schema(schema: pa.Schema, where: str) -> _NodeSchema:
    need = "node tables need an integer id column (every id in [0, N) once)"
    id_type = _column_type(schema, "id", where, need)
    assert id_type is not None
    require_int(id_type, where, "id", "node ids")
    columns, dtype, width = _feature_schema(schema, where)
    y_type = _column_type(schema, "y", where, "")
    if y_type is not None:
        require_int(y_type, where, "y", "labels (-1 = unlabeled)")
    return _NodeSchema(columns, dtype, width, y_type is not None, _split_schema(schema, where))


def _feature_schema(
    schema: pa.Schema, where: str
) -> tuple[tuple[str, ...], np.dtype[Any] | None, int]:
    """Feature columns, dtype and ``F``: one ``x`` list column or ``x_0 .. x_{F-1}``."""
    indexed = {n for n in schema.names if _X_COLUMN.fullmatch(n)}
    x_type = _column_type(schema, "x", where, "")
    if x_type is not None and indexed:
        raise fail(where, "x", f"and {sorted(indexed)[0]} both exist; keep one feature format")
    if x_type is not None:
        if not pa.types.is_fixed_size_list(x_type) or x_type.list_size < 1:
            raise fail(
                where,
                "x",
                f"type {x_type}; write features as fixed_size_list<float32>[F] (pyarrow."
                "FixedSizeListArray.from_arrays(values, F)) or as columns x_0 .. x_{F-1}",
            )
        if x_type.value_type not in _FEATURE_TYPES:
            raise fail(
                where, "x", f"values of type {x_type.value_type}; store float32 (or float16)"
            )
        return ("x",), _FEATURE_TYPES[x_type.value_type], int(x_type.list_size)
    names = tuple(f"x_{i}" for i in range(len(indexed)))
    if set(names) != indexed:
        gap = next(n for n in names if n not in indexed)
        raise fail(where, gap, f"missing; feature columns must be x_0 .. x_{len(names) - 1}")
    for name in names:
        dtype = _column_type(schema, name, where, "")
        if not (pa.types.is_floating(dtype) or pa.types.is_integer(dtype)):
            raise fail(where, name, f"type {dtype}; feature columns must be numeric (float32)")
    return names, (np.dtype(np.float32) if names else None), len(names)


def _split_schema(schema: pa.Schema, where: str) -> tuple[str, ...]:
    split_type = _column_type(schema, "split", where, "")
    masks = tuple(n for n in MASK_COLUMNS if _column_type(schema, n, where, "") is not None)
    if split_type is not None and masks:
        raise fail(where, "split", f"and {masks[0]} both exist; keep one split format")
    if split_type is not None:
        value_type = split_type.value_type if pa.types.is_dictionary(split_type) else split_type
        if not (pa.types.is_string(value_type) or pa.types.is_large_string(value_type)):
            raise fail(where, "split", f"type {split_type}; store strings train/val/test/null")
        return ("split",)
    for name in masks:
        if schema.field(name).type != pa.bool_():
            raise fail(where, name, f"type {schema.field(name).type}; masks must be bool")
    return masks


# ---- open -------------------------------------------------------------------------------------
def _read_meta(root: Path) -> dict[str, Any]:
    path = root / META_FILE
    if not path.exists():
        return {}
    try:
        meta = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise fail(META_FILE, None, f"not valid JSON ({err}); fix or delete it") from err
    if not isinstance(meta, dict):
        raise fail(META_FILE, None, 'must be a JSON object like {"num_nodes": 1000}')
    for key, value in meta.items():
        kind = _META_KEYS.get(key)
        if kind is None:
            raise fail(META_FILE, None, f"unknown key {key!r}; known: {sorted(_META_KEYS)}")
        low = 1 if key == "num_classes" else 0
        bad_int = kind is int and (
            isinstance(value, bool) or not isinstance(value, int) or value < low
        )
        if bad_int or not isinstance(value, kind):
            what = "a string" if kind is str else f"an integer >= {low}"
            raise fail(META_FILE, None, f"{key} is {value!r}; it must be {what}")
    return meta


def _files(folder: Path) -> list[Path]:
    files = sorted(p for p in folder.glob("*.parquet") if p.is_file())
    if not files:
        raise fail(
            f"{folder.name}/", None, "holds no .parquet files; add the tables or remove the folder"
        )
    return files


def _groups(path: Path, check: Callable[[pa.Schema, str], _T]) -> tuple[tuple[RowGroup, ...], _T]:
    """Every row group of ``path`` and ``check(schema, where)``'s result."""
    with opened(path, rel_path(path)) as pf:
        facts = check(pf.schema_arrow, rel_path(path))
        md = pf.metadata
        groups = tuple(
            RowGroup(path, i, md.row_group(i).num_rows) for i in range(md.num_row_groups)
        )
    return groups, facts


def _node_tables(root: Path) -> tuple[tuple[RowGroup, ...], _NodeSchema | None]:
    if not (root / NODES_DIR).is_dir():
        return (), None
    groups: list[RowGroup] = []
    first: tuple[str, _NodeSchema] | None = None
    for path in _files(root / NODES_DIR):
        file_groups, facts = _groups(path, _node_schema)
        groups += file_groups
        if first is None:
            first = (rel_path(path), facts)
        elif facts != first[1]:
            raise fail(
                rel_path(path),
                None,
                f"its columns ({facts}) differ from {first[0]}'s ({first[1]}); every node file "
                "needs the same columns and types",
            )
    return tuple(groups), None if first is None else first[1]


def _num_nodes(meta: dict[str, Any], node_groups: tuple[RowGroup, ...], has_nodes: bool) -> int:
    rows = sum(g.num_rows for g in node_groups)
    given = meta.get("num_nodes")
    if not has_nodes:
        if given is None:
            raise fail(
                META_FILE, None, f"there is no {NODES_DIR}/ folder, so num_nodes must be given"
            )
        return int(given)
    if given is not None and given != rows:
        problem = "node ids are missing" if rows < given else "there are more rows than nodes"
        raise fail(
            f"{NODES_DIR}/",
            "id",
            f"{rows} node rows but {META_FILE} says num_nodes={given}: {problem}; every id in "
            f"[0, {given}) needs exactly one row",
        )
    return rows


def open_parquet(root: str | os.PathLike[str]) -> ParquetGraph:
    """Check a Parquet graph directory's files and schemas; read no data.

    Args:
        root: The directory (layout in the module docstring).

    Returns:
        Its :class:`ParquetGraph`.

    Raises:
        DatasetNotFoundError: ``root`` is not a directory.
        DatasetFileError: A file is unreadable, a column is missing or has the wrong type, node
            files disagree, ``gnnsys.json`` is malformed, or the node count does not match it.
    """
    root = Path(root)
    if not root.is_dir():
        raise DatasetNotFoundError(
            f"Parquet graph directory {root} not found; pass an existing directory holding "
            f"{EDGES_DIR}/*.parquet (see docs/datasets.md, or write one with `gnnsys export`)"
        )
    meta = _read_meta(root)
    if not (root / EDGES_DIR).is_dir():
        raise fail(str(root), None, f"no {EDGES_DIR}/ folder; put the edge tables (src, dst) there")
    edge_groups: list[RowGroup] = []
    for path in _files(root / EDGES_DIR):
        edge_groups += _groups(path, _check_edge_schema)[0]
    node_groups, node = _node_tables(root)
    num_nodes = _num_nodes(meta, node_groups, node is not None)
    return ParquetGraph(
        root=root,
        name=meta.get("name", f"parquet:{root.resolve().name}"),
        num_nodes=num_nodes,
        num_features=0 if node is None else node.num_features,
        feature_dtype=None if node is None else node.feature_dtype,
        num_classes=meta.get("num_classes"),
        has_labels=node is not None and node.has_labels,
        has_split=node is not None and bool(node.split_columns),
        edge_groups=tuple(edge_groups),
        node_groups=node_groups,
        num_edge_rows=sum(g.num_rows for g in edge_groups),
        feature_columns=() if node is None else node.feature_columns,
        split_columns=() if node is None else node.split_columns,
    )
