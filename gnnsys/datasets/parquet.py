"""``parquet:DIR``: a graph that arrives as Parquet tables, read one row group at a time.

Layout of ``DIR``::

    DIR/
      edges/*.parquet   src, dst: integer node ids (int32 or int64), no nulls; one row per
                        directed edge src -> dst. Other columns are allowed and never read.
      nodes/*.parquet   optional. id: integer; over all files every id in [0, N) exactly once,
                        in any order. Optional columns:
                          x          fixed_size_list<float32|float16>[F] (dtype kept), or
                          x_0..x_{F-1}  F numeric columns (read as float32);
                          y          integer label, -1 = unlabeled;
                          split      string or dictionary<string>: "train", "val", "test" or
                                     null, or bool columns train_mask / val_mask / test_mask
                                     (one absent reads as all False).
                        Other columns are allowed and never read.
      gnnsys.json       optional: {"name": str, "num_nodes": int, "num_classes": int};
                        num_nodes is required when there is no nodes/ folder.

``N`` is the number of node rows (or ``num_nodes``; both must agree when both are given). Files
are read in name order, each one row group at a time (``ParquetFile.read_row_group``), never
whole. Edges mean what ``Graph.from_edge_index`` makes of them by default: directed, duplicates
dropped, self-loops kept.

API, for callers that stream (an out-of-core builder) and for ``load``: :func:`open_parquet`
reads only footers and schemas and returns a :class:`ParquetGraph` listing every
:class:`RowGroup`; :func:`read_edges` and :func:`read_nodes` read and validate one row group;
:func:`load_parquet` assembles a ``Graph`` in memory; :func:`write_parquet` writes any graph in
this layout (``parquet_write``); :class:`NodeIdCheck` finds repeated and missing node ids
across row groups. The records and the footer checks live in ``parquet_schema`` and are
re-exported here. Every problem with the files is one ``DatasetFileError`` naming the file, the
row group, the column and the fix, e.g. ``edges/part-1.parquet row group 2, column dst: node
id 1000 out of range [0, 1000) (row 17); ...``.

Shape legend: ``N`` nodes, ``E`` edge rows, ``F`` features, ``K`` rows of one row group.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gnnsys.datasets.base import candidate_roots
from gnnsys.datasets.parquet_schema import (
    NodeRows,
    ParquetGraph,
    RowGroup,
    fail,
    open_parquet,
    opened,
    require_int,
)
from gnnsys.datasets.parquet_write import (
    MASK_COLUMNS,
    META_FILE,
    NODES_DIR,
    SPLIT_NAMES,
    write_parquet,
)
from gnnsys.errors import DatasetNotFoundError
from gnnsys.types import Graph, coo_to_csr

__all__ = [
    "NodeIdCheck",
    "NodeRows",
    "ParquetGraph",
    "RowGroup",
    "load_parquet",
    "open_parquet",
    "parquet_dir",
    "read_edges",
    "read_nodes",
    "write_parquet",
]


def _read_group(group: RowGroup, columns: list[str]) -> pa.Table:
    with opened(group.path, group.where) as pf:
        table: pa.Table = pf.read_row_group(group.index, columns=columns)
    return table


# ---- row groups -------------------------------------------------------------------------------
def _first(flags: np.ndarray) -> int:
    return int(np.flatnonzero(flags)[0])


def _no_nulls(column: pa.ChunkedArray, where: str, name: str) -> None:
    if column.null_count:
        row = _first(column.is_null().to_numpy(zero_copy_only=False))
        raise fail(where, name, f"null at row {row}; fill it or drop the row")


def _ids(table: pa.Table, name: str, where: str, num_nodes: int) -> np.ndarray:
    """``[K]`` int64 node ids of column ``name``, checked to lie in ``[0, N)``."""
    column = table.column(name)
    require_int(column.type, where, name, "node ids")
    _no_nulls(column, where, name)
    ids: np.ndarray = column.to_numpy().astype(np.int64, copy=False)
    bad = (ids < 0) | (ids >= num_nodes)
    if bad.any():
        row = _first(bad)
        fix = (
            "ids must lie in [0, N), N = node rows"
            if name == "id"
            else f"fix the id, or add the node (to {NODES_DIR}/, or num_nodes in {META_FILE})"
        )
        raise fail(
            where, name, f"node id {ids[row]} out of range [0, {num_nodes}) (row {row}); {fix}"
        )
    return ids


def read_edges(pg: ParquetGraph, group: RowGroup) -> tuple[np.ndarray, np.ndarray]:
    """Read one edge row group: ``(src, dst)``, each ``[K]`` int64 in ``[0, N)``.

    Raises:
        DatasetFileError: Unreadable, nulls, a non-integer column, or an id out of range.
    """
    table = _read_group(group, ["src", "dst"])
    src = _ids(table, "src", group.where, pg.num_nodes)
    return src, _ids(table, "dst", group.where, pg.num_nodes)


def _features(table: pa.Table, pg: ParquetGraph, where: str) -> np.ndarray | None:
    """``[K, F]`` features as stored (list column) or float32 (``x_i`` columns), finite."""
    if not pg.feature_columns:
        return None
    k, f = table.num_rows, pg.num_features
    if pg.feature_columns == ("x",):
        column = table.column("x")
        _no_nulls(column, where, "x")
        values = column.combine_chunks().flatten()
        if values.null_count:
            nulls = values.is_null().to_numpy(zero_copy_only=False)
            raise fail(where, "x", f"null value in row {_first(nulls) // f}")
        x: np.ndarray = values.to_numpy(zero_copy_only=False).reshape(k, f)
    else:
        x = np.empty((k, f), dtype=np.float32)
        for j, name in enumerate(pg.feature_columns):
            column = table.column(name)
            _no_nulls(column, where, name)
            with np.errstate(over="ignore"):  # a float64 beyond float32 -> inf, reported below
                x[:, j] = column.to_numpy()
    finite = np.isfinite(x)
    if not finite.all():
        row, col = (int(i) for i in np.argwhere(~finite)[0])
        name = "x" if pg.feature_columns == ("x",) else pg.feature_columns[col]
        raise fail(
            where,
            name,
            f"{x[row, col]} at row {row}, feature {col}; features must be finite: clean them "
            "(e.g. numpy.nan_to_num) before writing",
        )
    return x


def _labels(table: pa.Table, pg: ParquetGraph, where: str) -> np.ndarray | None:
    if not pg.has_labels:
        return None
    column = table.column("y")
    require_int(column.type, where, "y", "labels")
    _no_nulls(column, where, "y")
    y: np.ndarray = column.to_numpy().astype(np.int64, copy=False)
    high = pg.num_classes
    bad = (y < -1) | (y >= high if high is not None else False)
    if bad.any():
        row = _first(bad)
        limit = f"[-1, {high}) ({META_FILE} num_classes={high})" if high else ">= -1"
        raise fail(where, "y", f"label {y[row]} at row {row}; labels must be {limit}")
    return y


def _masks(table: pa.Table, pg: ParquetGraph, where: str) -> dict[str, np.ndarray]:
    if not pg.split_columns:
        return {}
    if pg.split_columns != ("split",):
        out = {name: np.zeros(table.num_rows, dtype=bool) for name in MASK_COLUMNS}
        for name in pg.split_columns:
            _no_nulls(table.column(name), where, name)
            out[name] = table.column(name).to_numpy(zero_copy_only=False)
        return out
    split = table.column("split").cast(pa.string())
    known = pc.or_kleene(pc.is_in(split, value_set=pa.array(SPLIT_NAMES)), pc.is_null(split))
    if not pc.all(known).as_py():
        row = _first(~known.to_numpy(zero_copy_only=False))
        raise fail(
            where,
            "split",
            f"value {split[row].as_py()!r} at row {row}; use 'train', 'val', 'test' or null",
        )
    return {
        mask: pc.fill_null(pc.equal(split, value), False).to_numpy(zero_copy_only=False)
        for mask, value in zip(MASK_COLUMNS, SPLIT_NAMES, strict=True)
    }


def read_nodes(pg: ParquetGraph, group: RowGroup) -> NodeRows:
    """Read one node row group, validated (ids in range, finite ``x``, labels and split known).

    Duplicate and missing ids span row groups; :class:`NodeIdCheck` finds them.

    Raises:
        DatasetFileError: Unreadable, a null, a bad type, or a value out of its range.
    """
    columns = ["id", *pg.feature_columns, *(["y"] if pg.has_labels else []), *pg.split_columns]
    table = _read_group(group, columns)
    masks = _masks(table, pg, group.where)
    return NodeRows(
        id=_ids(table, "id", group.where, pg.num_nodes),
        x=_features(table, pg, group.where),
        y=_labels(table, pg, group.where),
        train_mask=masks.get("train_mask"),
        val_mask=masks.get("val_mask"),
        test_mask=masks.get("test_mask"),
    )


class NodeIdCheck:
    """Checks, one row group at a time, that node rows name every id once (``N`` bytes).

    Args:
        num_nodes: ``N``.
    """

    def __init__(self, num_nodes: int) -> None:
        self._seen_N = np.zeros(num_nodes, dtype=np.uint8)

    def see(self, gid_K: np.ndarray, where: str) -> None:
        """Record a row group's ids (already in range).

        Raises:
            DatasetFileError: An id repeats inside the group or was seen in an earlier one.
        """
        ordered = np.sort(gid_K)
        repeat = ordered[1:] == ordered[:-1]
        if repeat.any():
            gid = ordered[1:][repeat][0]
            raise fail(where, "id", f"node id {gid} appears twice; give every id one row")
        again = self._seen_N[gid_K] != 0
        if again.any():
            gid = gid_K[_first(again)]
            raise fail(
                where, "id", f"node id {gid} already appeared in an earlier row group or file"
            )
        self._seen_N[gid_K] = 1

    def finish(self) -> None:
        """Raises ``DatasetFileError`` naming missing ids, when some were never seen."""
        missing = np.flatnonzero(self._seen_N == 0)
        if missing.size:
            raise fail(
                f"{NODES_DIR}/",
                "id",
                f"node ids {missing[:5].tolist()} missing ({missing.size} in all); every id in "
                f"[0, {self._seen_N.shape[0]}) needs exactly one row",
            )


# ---- load -------------------------------------------------------------------------------------
def parquet_dir(variant: str, root: str | os.PathLike[str] | None = None) -> Path:
    """The directory ``parquet:DIR`` names: ``DIR`` as given, else under a data root.

    Args:
        variant: ``DIR``: absolute, or relative to the working directory, else relative to
            ``root``, ``$GNNSYS_DATA`` or ``../shared/datasets`` (tried in that order).
        root: Data root for a relative ``DIR``.

    Raises:
        DatasetNotFoundError: No such directory; the message lists every place tried.
    """
    given = Path(variant).expanduser()
    tried = [given] if given.is_absolute() else [given, *(r / given for r in candidate_roots(root))]
    for path in tried:
        if path.is_dir():
            return path
    raise DatasetNotFoundError(
        f"Parquet graph directory {variant!r} not found; looked in "
        f"{', '.join(str(p) for p in tried)}. Pass parquet:DIR with DIR an existing directory "
        "(absolute, relative to the working directory, or under --root)"
    )


def _load_csr(pg: ParquetGraph) -> tuple[np.ndarray, np.ndarray]:
    """In-edge CSR of every edge row (int32 buffers when ids fit: half the memory)."""
    dtype = np.int32 if pg.num_nodes < 2**31 else np.int64
    src_E = np.empty(pg.num_edge_rows, dtype=dtype)
    dst_E = np.empty(pg.num_edge_rows, dtype=dtype)
    lo = 0
    for group in pg.edge_groups:
        src, dst = read_edges(pg, group)
        if src.shape[0] != group.num_rows:
            raise fail(group.where, None, f"{src.shape[0]} rows, its footer says {group.num_rows}")
        src_E[lo : lo + src.shape[0]], dst_E[lo : lo + dst.shape[0]] = src, dst
        lo += src.shape[0]
    return coo_to_csr(src_E[:lo], dst_E[:lo], pg.num_nodes)


def _load_nodes(pg: ParquetGraph) -> dict[str, np.ndarray]:
    """``x``, ``y`` and masks in id order, from every node row group."""
    if not pg.node_groups:
        return {}
    n = pg.num_nodes
    masks = MASK_COLUMNS if pg.has_split else ()
    fields: dict[str, np.ndarray] = {name: np.zeros(n, dtype=bool) for name in masks}
    if pg.feature_dtype is not None:
        fields["x"] = np.empty((n, pg.num_features), dtype=pg.feature_dtype)
    if pg.has_labels:
        fields["y"] = np.empty(n, dtype=np.int64)
    check = NodeIdCheck(n)
    for group in pg.node_groups:
        rows = read_nodes(pg, group)
        check.see(rows.id, group.where)
        for name, array in fields.items():
            array[rows.id] = getattr(rows, name)
    check.finish()
    return fields


def load_parquet(variant: str, root: Path | None = None, **params: Any) -> Graph:
    """Registry entry of ``parquet:DIR``: the whole graph in memory.

    Args:
        variant: ``DIR``: absolute, relative to the working directory, or relative to a data
            root (``root``, ``$GNNSYS_DATA``, ``../shared/datasets``), tried in that order.
        root: Data root for a relative ``DIR``.
        **params: None are taken.

    Returns:
        The graph: CSR by ``coo_to_csr`` (deduplicated, int32 indices when ``N < 2**31``),
        named by ``gnnsys.json`` or ``"parquet:<directory name>"``.

    Raises:
        TypeError: A parameter was given.
        DatasetNotFoundError: ``DIR`` does not exist.
        DatasetFileError: Any problem with the files (see :func:`open_parquet`, ...).
    """
    if params:
        raise TypeError(
            f"load_parquet() got an unexpected keyword argument {next(iter(params))!r}; "
            "parquet:DIR takes no parameters"
        )
    pg = open_parquet(parquet_dir(variant, root))
    indptr, indices = _load_csr(pg)
    return Graph(
        indptr=indptr,
        indices=indices,
        num_nodes=pg.num_nodes,
        name=pg.name,
        num_classes_hint=pg.num_classes,
        **_load_nodes(pg),
    )
