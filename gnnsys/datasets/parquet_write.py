"""Writing a graph as a Parquet directory (the layout ``gnnsys.datasets.parquet`` reads).

Two writers produce the layout: :func:`write_parquet` (any in-memory ``Graph``) and
``gnnsys.datasets.rmat.write_rmat_parquet`` (an R-MAT graph drawn chunk by chunk). Both use the
pieces here:

- :func:`staged_dir`: the directory is filled as a hidden sibling and renamed into place when
  every file is closed, so ``out`` is absent, the old directory, or the complete new one; on any
  failure the sibling is removed (the pattern of the partition store's writer).
- :class:`TableWriter`: cuts the rows it is handed into row groups of ``rows_per_group`` rows and
  starts a new file every ``rows_per_file`` rows, so a writer holds one row group plus the block
  it was handed, whatever the graph's size.
- :func:`edge_table` / :func:`node_table`: one block of rows in the layout's column types.

A file-system ``OSError`` (full disk, read-only, no permission) ends as one ``DiskError`` naming
the path, after the partial output is removed.

Shape legend: ``N`` nodes, ``E`` edge rows, ``F`` features, ``K`` rows of one block.
"""

from __future__ import annotations

import contextlib
import errno as errno_codes
import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gnnsys.errors import DiskError, GnnsysError
from gnnsys.types import Graph

__all__ = ["ProgressFn", "TableWriter", "edge_table", "node_table", "staged_dir", "write_parquet"]

EDGES_DIR = "edges"
NODES_DIR = "nodes"
META_FILE = "gnnsys.json"
SPLIT_NAMES = ("train", "val", "test")
MASK_COLUMNS = ("train_mask", "val_mask", "test_mask")
NODE_GROUP_BYTES = 64 << 20
"""Upper bound on the bytes of one node row group (features make node rows wide)."""

ProgressFn: TypeAlias = Callable[[int, int], None]
"""Called as ``progress(done, total)`` while a writer runs (units are the writer's own)."""

MaskKind: TypeAlias = Literal["split", "bool", "none"]
"""How masks are stored: one ``split`` dictionary column, bool ``*_mask`` columns, or not."""


def part_name(index: int) -> str:
    """File name of the ``index``-th file of a table (zero-padded, so name order is file order)."""
    return f"part-{index:05d}.parquet"


def check_sizes(rows_per_group: int, rows_per_file: int) -> None:
    """Refuse non-positive row-group and file sizes.

    Raises:
        ValueError: Naming the value and the fix.
    """
    for name, value in (("rows_per_group", rows_per_group), ("rows_per_file", rows_per_file)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r}; choose an integer >= 1 (default 2**20 / 2**24)")


def check_out(out: Path, overwrite: bool) -> None:
    """Refuse an ``out`` that exists (unless ``overwrite``) or that is not a graph directory.

    ``overwrite`` replaces only an empty directory or one that holds this layout, so a wrong
    ``out`` (a home directory, a dataset root) is never deleted.

    Raises:
        ValueError: ``out`` exists and ``overwrite`` is false, is a file, or holds other files.
    """
    if not out.exists():
        return
    if not out.is_dir():
        raise ValueError(f"{out} is a file; choose a directory path for the Parquet graph")
    if not overwrite:
        raise ValueError(f"{out} already exists; choose another directory or overwrite it")
    names = {p.name for p in out.iterdir()}
    if names and not names & {EDGES_DIR, META_FILE}:
        raise ValueError(
            f"refusing to replace {out}: it is not empty and holds no {EDGES_DIR}/ or "
            f"{META_FILE}, so it is not a Parquet graph directory; choose another directory"
        )


def disk_error(err: OSError, path: Path) -> DiskError:
    """The ``DiskError`` of a failed write of ``path``, naming the reason and the fix.

    ``gnnsys.store.diskio`` builds richer ones (free space, mount point) but lies in a later
    stage, which datasets may not import.
    """
    if isinstance(err, DiskError):
        return err
    code = err.errno or 0
    reasons = {
        errno_codes.ENOSPC: "no space left on device",
        errno_codes.EDQUOT: "disk quota exceeded",
        errno_codes.EROFS: "read-only file system",
        errno_codes.EACCES: "permission denied",
        errno_codes.EPERM: "permission denied",
    }
    reason = reasons.get(code, f"{type(err).__name__}: {err.strerror or err}")
    return DiskError(
        f"cannot write {path}: {reason}; nothing was left behind. Free space or choose another "
        "--out on a writable file system",
        str(path),
        code,
    )


@contextlib.contextmanager
def staged_dir(out: Path, *, overwrite: bool) -> Iterator[Path]:
    """A fresh hidden sibling of ``out`` to write into; it replaces ``out`` when the block ends.

    Raises:
        DiskError: An ``OSError`` of the block or of the rename (the sibling is removed first).
    """
    tmp = out.parent / f".{out.name}.tmp-{uuid.uuid4().hex[:12]}"
    try:
        tmp.mkdir(parents=True)
    except OSError as err:
        raise disk_error(err, out) from err
    try:
        yield tmp
        _replace(tmp, out, overwrite)
    except BaseException as err:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(err, OSError) and not isinstance(err, GnnsysError):
            raise disk_error(err, out) from err
        raise


def _replace(tmp: Path, out: Path, overwrite: bool) -> None:
    """Rename ``tmp`` to ``out``; an existing ``out`` is renamed aside first, then deleted."""
    if not out.exists():
        os.rename(tmp, out)
        return
    check_out(out, overwrite)  # again: it may have appeared while we wrote
    trash = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:12]}"
    os.rename(out, trash)
    try:
        os.rename(tmp, out)
    except OSError:
        os.rename(trash, out)  # a failed replace changes nothing
        raise
    shutil.rmtree(trash, ignore_errors=True)


class TableWriter:
    """Writes blocks of rows as ``folder/part-NNNNN.parquet`` files of fixed-size row groups.

    Rows are buffered until a full row group is there, so groups have ``rows_per_group`` rows
    (the last of each file and of the table may have fewer) whatever the blocks' sizes. Use as
    a context manager: a clean exit writes the rest and closes the file; at least one file is
    written, so an empty table is a file with no row group.

    Args:
        folder: Created if missing.
        schema: Every block must have it.
        rows_per_group: Rows per row group.
        rows_per_file: Rows per file.
    """

    def __init__(
        self, folder: Path, schema: pa.Schema, *, rows_per_group: int, rows_per_file: int
    ) -> None:
        check_sizes(rows_per_group, rows_per_file)
        folder.mkdir(parents=True, exist_ok=True)
        self.folder, self.schema = folder, schema
        self.rows_per_group, self.rows_per_file = rows_per_group, rows_per_file
        self.num_files = 0
        self._writer: pq.ParquetWriter | None = None
        self._rows_in_file = 0
        self._pending: list[pa.Table] = []
        self._num_pending = 0

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if exc_type is None:
                while self._num_pending:
                    self._emit(min(self._num_pending, self._group_size()))
                if self._writer is None:
                    self._open()
        finally:
            if self._writer is not None:
                self._writer.close()

    def write(self, table: pa.Table) -> None:
        """Queue ``table``'s rows; full row groups are written at once."""
        if table.schema != self.schema:
            raise ValueError(f"block schema {table.schema} differs from the table's {self.schema}")
        self._pending.append(table)
        self._num_pending += table.num_rows
        while self._num_pending and self._num_pending >= self._group_size():
            self._emit(self._group_size())

    def _group_size(self) -> int:
        room = self.rows_per_file - self._rows_in_file
        return min(self.rows_per_group, room if room > 0 else self.rows_per_file)

    def _emit(self, num_rows: int) -> None:
        pending = pa.concat_tables(self._pending)  # zero-copy: chunks are kept
        group, rest = pending.slice(0, num_rows), pending.slice(num_rows)
        self._pending, self._num_pending = [rest], rest.num_rows
        if self._writer is None or self._rows_in_file >= self.rows_per_file:
            self._open()
        assert self._writer is not None
        self._writer.write_table(group, row_group_size=num_rows)
        self._rows_in_file += num_rows

    def _open(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._writer = pq.ParquetWriter(self.folder / part_name(self.num_files), self.schema)
        self.num_files += 1
        self._rows_in_file = 0


class Ticker:
    """Counts work done and reports it to an optional :data:`ProgressFn`."""

    def __init__(self, progress: ProgressFn | None, total: int) -> None:
        self.progress, self.total, self.done = progress, total, 0

    def advance(self, count: int) -> None:
        """Add ``count`` done and report."""
        self.done += count
        if self.progress is not None:
            self.progress(self.done, self.total)


def id_type(num_nodes: int) -> pa.DataType:
    """int32 node ids when ``N < 2**31`` (as the CSR's ``indices``), else int64."""
    return pa.int32() if num_nodes < 2**31 else pa.int64()


def edge_table(src_E: np.ndarray, dst_E: np.ndarray, num_nodes: int) -> pa.Table:
    """Edge rows ``src -> dst`` in the layout's types (int32 when ``N < 2**31``)."""
    dtype = np.int32 if num_nodes < 2**31 else np.int64
    return pa.table(
        {"src": src_E.astype(dtype, copy=False), "dst": dst_E.astype(dtype, copy=False)},
        schema=edge_schema(num_nodes),
    )


def edge_schema(num_nodes: int) -> pa.Schema:
    """``src``, ``dst`` node ids."""
    return pa.schema([("src", id_type(num_nodes)), ("dst", id_type(num_nodes))])


def node_schema(
    num_nodes: int,
    feature_dtype: np.dtype[Any] | None,
    num_features: int,
    *,
    labels: bool,
    masks: MaskKind,
    mask_columns: tuple[str, ...] = MASK_COLUMNS,
) -> pa.Schema:
    """``id``, then ``x`` (fixed_size_list), ``y`` (int64) and the masks, as present."""
    fields: list[tuple[str, pa.DataType]] = [("id", id_type(num_nodes))]
    if feature_dtype is not None:
        fields.append(("x", pa.list_(pa.from_numpy_dtype(feature_dtype), num_features)))
    if labels:
        fields.append(("y", pa.int64()))
    if masks == "split":
        fields.append(("split", pa.dictionary(pa.int8(), pa.string())))
    elif masks == "bool":
        fields += [(name, pa.bool_()) for name in mask_columns]
    return pa.schema(fields)


def node_table(
    schema: pa.Schema,
    gid_K: np.ndarray,
    x_KF: np.ndarray | None,
    y_K: np.ndarray | None,
    masks_K: tuple[np.ndarray | None, ...],
) -> pa.Table:
    """One block of node rows for ``schema`` (from :func:`node_schema`).

    ``masks_K`` are train/val/test; a ``split`` column needs all three (disjoint), bool columns
    take those named in the schema.
    """
    columns: dict[str, Any] = {"id": gid_K.astype(schema.field("id").type.to_pandas_dtype())}
    if x_KF is not None:
        values = pa.array(np.ascontiguousarray(x_KF).reshape(-1))
        columns["x"] = pa.FixedSizeListArray.from_arrays(values, x_KF.shape[1])
    if y_K is not None:
        columns["y"] = y_K.astype(np.int64, copy=False)
    if "split" in schema.names:
        columns["split"] = _split_array(masks_K)
    for name, mask in zip(MASK_COLUMNS, masks_K, strict=True):
        if name in schema.names:
            columns[name] = mask
    return pa.table(columns, schema=schema)


def _split_array(masks_K: tuple[np.ndarray | None, ...]) -> pa.DictionaryArray:
    """``"train"``/``"val"``/``"test"``/null per row, dictionary-encoded (no Python strings)."""
    assert all(m is not None for m in masks_K)
    code_K = np.full(masks_K[0].shape[0], -1, dtype=np.int8)  # type: ignore[union-attr]
    for code, mask in enumerate(masks_K):
        code_K[mask] = code
    codes = pa.array(code_K, mask=code_K < 0, type=pa.int8())
    return pa.DictionaryArray.from_arrays(codes, pa.array(SPLIT_NAMES))


def mask_kind(masks: tuple[np.ndarray | None, ...]) -> MaskKind:
    """``split`` when all three masks exist and are disjoint, ``bool`` for any other set."""
    if all(m is None for m in masks):
        return "none"
    if any(m is None for m in masks):
        return "bool"
    count = np.zeros(masks[0].shape[0], dtype=np.int8)  # type: ignore[union-attr]
    for mask in masks:
        count += mask  # type: ignore[arg-type]
    return "split" if count.size == 0 or int(count.max()) <= 1 else "bool"


def node_group_rows(rows_per_group: int, schema: pa.Schema) -> int:
    """``rows_per_group``, or fewer so a node row group stays under ``NODE_GROUP_BYTES``."""
    row_bytes = 1
    for field in schema:
        t = field.type
        width = t.value_type.bit_width * t.list_size if pa.types.is_fixed_size_list(t) else 64
        row_bytes += width // 8
    return max(1, min(rows_per_group, NODE_GROUP_BYTES // row_bytes))


def write_meta(folder: Path, *, name: str, num_nodes: int, num_classes: int | None) -> None:
    """``gnnsys.json``: the graph's name, ``N`` and (when known) the number of classes."""
    meta: dict[str, Any] = {"name": name, "num_nodes": int(num_nodes)}
    if num_classes is not None:
        meta["num_classes"] = int(num_classes)
    (folder / META_FILE).write_text(json.dumps(meta, indent=1) + "\n")


def write_parquet(
    graph: Graph,
    out: str | os.PathLike[str],
    *,
    rows_per_group: int = 1 << 20,
    rows_per_file: int = 1 << 24,
    overwrite: bool = False,
    progress: ProgressFn | None = None,
) -> Path:
    """Write ``graph`` as a Parquet graph directory (layout: ``gnnsys.datasets.parquet``).

    Edges come from the CSR (``src = indices``, ``dst`` = each edge's row), in CSR order, so
    loading the directory gives back the same arrays. Nodes are written in id order with ``x``
    as ``fixed_size_list`` (dtype kept), ``y``, and the masks as a ``split`` column when all
    three exist and are disjoint (else as bool ``*_mask`` columns; a missing mask is not
    written and loads as all False). ``gnnsys.json`` keeps the graph's name, ``N`` and
    ``num_classes_hint``.

    Args:
        graph: Any graph with single-label (or no) ``y``.
        out: The directory to create (atomically: written beside it, then renamed).
        rows_per_group: Rows per row group (node groups are cut below 64 MiB when rows are
            wide).
        rows_per_file: Rows per file.
        overwrite: Replace an existing Parquet graph directory at ``out``.
        progress: Called with ``(rows done, edge rows + node rows)``.

    Returns:
        ``out`` as a ``Path``.

    Raises:
        ValueError: Multi-label ``y``, zero-width ``x``, bad sizes, or an ``out`` that exists
            (without ``overwrite``) or is not a Parquet graph directory.
        DiskError: A write failed (full disk, read-only, no permission); nothing is left.
    """
    out = Path(out)
    check_sizes(rows_per_group, rows_per_file)
    _check_graph(graph)
    check_out(out, overwrite)
    ticker = Ticker(progress, graph.num_edges + graph.num_nodes)
    with staged_dir(out, overwrite=overwrite) as tmp:
        _write_edges(tmp / EDGES_DIR, graph, rows_per_group, rows_per_file, ticker)
        _write_nodes(tmp / NODES_DIR, graph, rows_per_group, rows_per_file, ticker)
        write_meta(
            tmp, name=graph.name, num_nodes=graph.num_nodes, num_classes=graph.num_classes_hint
        )
    return out


def _check_graph(graph: Graph) -> None:
    if graph.y is not None and graph.y.ndim == 2:
        raise ValueError(
            f"graph {graph.name!r} has multi-label y {graph.y.shape}; the Parquet layout holds "
            "one int label per node: export it without y or pick one label per node"
        )
    if graph.x is not None and graph.x.shape[1] == 0:
        raise ValueError(f"graph {graph.name!r} has x of width 0; drop it (x=None) to export")


def _write_edges(
    folder: Path, graph: Graph, rows_per_group: int, rows_per_file: int, ticker: Ticker
) -> None:
    """Edge rows in CSR order, one row group at a time (``dst`` found by binary search)."""
    schema = edge_schema(graph.num_nodes)
    with TableWriter(
        folder, schema, rows_per_group=rows_per_group, rows_per_file=rows_per_file
    ) as writer:
        for lo in range(0, graph.num_edges, rows_per_group):
            hi = min(lo + rows_per_group, graph.num_edges)
            dst = np.searchsorted(graph.indptr, np.arange(lo, hi), side="right") - 1
            writer.write(edge_table(np.asarray(graph.indices[lo:hi]), dst, graph.num_nodes))
            ticker.advance(hi - lo)


def _write_nodes(
    folder: Path, graph: Graph, rows_per_group: int, rows_per_file: int, ticker: Ticker
) -> None:
    """Node rows in id order, one row group at a time."""
    masks = (graph.train_mask, graph.val_mask, graph.test_mask)
    kind = mask_kind(masks)
    present = tuple(name for name, m in zip(MASK_COLUMNS, masks, strict=True) if m is not None)
    x = graph.x
    schema = node_schema(
        graph.num_nodes,
        None if x is None else x.dtype,
        graph.num_features,
        labels=graph.y is not None,
        masks=kind,
        mask_columns=present,
    )
    step = node_group_rows(rows_per_group, schema)
    with TableWriter(folder, schema, rows_per_group=step, rows_per_file=rows_per_file) as writer:
        for lo in range(0, graph.num_nodes, step):
            hi = min(lo + step, graph.num_nodes)
            block = tuple(None if m is None else m[lo:hi] for m in masks)
            y = None if graph.y is None else graph.y[lo:hi]
            xb = None if x is None else np.asarray(x[lo:hi])
            writer.write(node_table(schema, np.arange(lo, hi), xb, y, block))
            ticker.advance(hi - lo)
