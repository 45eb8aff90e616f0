"""Out of core: a Parquet graph (``gnnsys.datasets.parquet``) -> a CSR graph on disk, on Ray Data.

A graph too large for one process is never loaded whole. Its tables are turned, by a Ray Data
pipeline whose tasks each hold one chunk, into the arrays of a :class:`~gnnsys.types.Graph`
saved as ``.npy`` files; :func:`open_disk_graph` then maps them read-only, so the partitioners
and the store writer read them through the page cache (``indptr``, labels and masks, O(N), are
read into memory). The same command runs on a laptop and on a Ray cluster whose nodes see the
files on shared storage.

Steps (each a Ray Data ``map`` over a list of work items, results streamed to the driver)::

    edges: one task per edge row group       -> spill/<seq>.npy  sorted int64 keys dst * N + src
    split: the driver picks G destination ranges of about equal edge counts from 1/1024 samples
    sort:  one task per destination range     -> csr/indices-<g>.npy, csr/deg-<g>.npy (deduplicated)
    join:  the driver: indptr (O(N)), and the G index files appended into indices.npy
    nodes: one task per node row group        -> its rows written into x/y/masks at their ids

The CSR is exactly ``coo_to_csr``'s (sorted by ``(dst, src)``, duplicates dropped, ``int32``
indices when ``N < 2**31``), so the graph equals the one ``load("parquet:DIR")`` builds in
memory, and so does the store written from it (tested file for file).

Memory: ``memory_budget`` bytes are split between Ray's object store (an eighth; the tasks
return only small records, so it holds little), the driver's O(N) arrays and the tasks: the
number of concurrent tasks and the edges per sort task follow from it (:class:`Plan`). Rows
are written with ``pwrite`` into files sized up front, never through a writable memory map (a
full disk is then ``ENOSPC``, not a SIGBUS).

Layout of the directory written::

    DIR/graph.json            name, sizes, dtypes, the source tables' names/sizes/mtimes, and
                              the xxh3_128 of every array file below
    DIR/indptr.npy            [N + 1] int64
    DIR/indices.npy           [E] int32 (int64 when N >= 2**31)
    DIR/x.npy y.npy train_mask.npy val_mask.npy test_mask.npy   when the tables have them

Shape legend: ``N`` nodes, ``E`` directed edges after deduplication, ``F`` features, ``G`` sort
ranges, ``K`` rows in one row group.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from gnnsys.datasets.parquet import (
    NodeIdCheck,
    ParquetGraph,
    RowGroup,
    read_edges,
    read_nodes,
)
from gnnsys.errors import DatasetFileError
from gnnsys.out_of_core.runtime import Plan, cluster_cpus, run_tasks, start_ray, stop_ray
from gnnsys.partitioners.base import dedupe_sorted
from gnnsys.types import Graph

__all__ = [
    "GRAPH_JSON",
    "build_disk_graph",
    "disk_graph_bytes",
    "open_disk_graph",
    "source_of",
]

log = logging.getLogger(__name__)

GRAPH_JSON = "graph.json"
FORMAT = "gnnsys-disk-graph/1"
_SAMPLE_STRIDE = 1024  # one key in this many is sampled to choose the sort ranges
_COPY_BLOCK = 1 << 24  # bytes per read when appending the sorted ranges into indices.npy
_NODE_ARRAYS = ("x", "y", "train_mask", "val_mask", "test_mask")


def disk_graph_bytes(pg: ParquetGraph) -> int:
    """Bytes of the CSR and node arrays of ``pg`` (the graph's size; an upper bound for E)."""
    e = pg.num_edge_rows
    index = 4 if pg.num_nodes < 2**31 else 8
    feat = 0 if pg.feature_dtype is None else pg.num_features * np.dtype(pg.feature_dtype).itemsize
    return 8 * (pg.num_nodes + 1) + index * e + pg.num_nodes * (feat + 8 + 3)


# ---- the build -------------------------------------------------------------------------------


def build_disk_graph(
    pg: ParquetGraph,
    out: str | os.PathLike[str],
    *,
    memory_budget: int,
    overwrite: bool = False,
    progress: bool = True,
) -> Path:
    """Write the CSR graph of ``pg`` to ``out`` without holding it in any process.

    Ray must be running (``ray.init``) or is started here, loopback-only, sized by the plan.

    Args:
        pg: The opened Parquet graph (``open_parquet``).
        out: Directory to create (written beside, renamed into place when complete).
        memory_budget: Bytes the whole job may use (see :class:`Plan`).
        overwrite: Replace an existing ``out``.
        progress: Show a progress bar per step.

    Returns:
        ``out``.

    Raises:
        DatasetFileError: A row group fails validation (file, row group, column named), or the
            node ids do not cover ``[0, N)`` exactly once; nothing is left behind.
        ValueError: ``out`` exists and ``overwrite`` is false, or the budget is too small.
        DiskError: A write failed (full disk, no permission).
    """
    from gnnsys.store.npy_files import staged

    out = Path(out)
    if out.exists() and not overwrite:
        raise ValueError(f"{out} already exists; choose another directory or overwrite it")
    started = start_ray(memory_budget)
    try:
        plan = Plan.of(memory_budget, pg.num_nodes, cluster_cpus())
        log.info("out-of-core plan: %s", plan)
        with staged(out, needed=disk_graph_bytes(pg)) as tmp:
            meta = _build(pg, tmp, plan, progress)
            (tmp / GRAPH_JSON).write_text(json.dumps(meta, indent=1) + "\n")
    finally:
        if started:
            stop_ray()
    return out


def _build(pg: ParquetGraph, tmp: Path, plan: Plan, progress: bool) -> dict[str, Any]:
    n = pg.num_nodes
    (tmp / "spill").mkdir()
    (tmp / "csr").mkdir()
    edge_items = [_item(g, seq) for seq, g in enumerate(pg.edge_groups)]
    spilled = run_tasks(
        _spill_edges, edge_items, {"pg": pg, "work": str(tmp)}, plan, "edges", progress
    )
    seqs = sorted(int(r["seq"]) for r in spilled)
    ranges = _ranges(tmp, seqs, n, plan.sort_edges)
    sort_items = [{"g": g, "lo": lo, "hi": hi} for g, (lo, hi) in enumerate(ranges)]
    kwargs = {"work": str(tmp), "num_nodes": n, "seqs": seqs}
    sorted_ = run_tasks(_sort_range, sort_items, kwargs, plan, "sort", progress)
    num_edges = sum(int(r["edges"]) for r in sorted_)
    shutil.rmtree(tmp / "spill")
    _join(tmp, ranges, n, num_edges)
    shutil.rmtree(tmp / "csr")
    arrays = _node_files(pg, tmp)
    if pg.node_groups:
        (tmp / "ids").mkdir()
        node_items = [_item(g, seq) for seq, g in enumerate(pg.node_groups)]
        kwargs = {"pg": pg, "work": str(tmp), "arrays": arrays}
        run_tasks(_scatter_nodes, node_items, kwargs, plan, "nodes", progress)
        _check_ids(tmp, pg)
        shutil.rmtree(tmp / "ids")
    return _meta(pg, tmp, num_edges)


def _item(group: RowGroup, seq: int) -> dict[str, Any]:
    return {"seq": seq, "path": str(group.path), "index": group.index, "rows": group.num_rows}


def _group(item: dict[str, Any]) -> RowGroup:
    return RowGroup(Path(item["path"]), int(item["index"]), int(item["rows"]))


# ---- tasks (run in Ray workers) ----------------------------------------------------------------


def _spill_edges(item: dict[str, Any], *, pg: ParquetGraph, work: str) -> dict[str, Any]:
    """Read and check one edge row group; save its keys ``dst * N + src`` sorted, and a sample."""
    src, dst = read_edges(pg, _group(item))
    key = dst * max(pg.num_nodes, 1)
    key += src
    del src, dst
    key.sort()
    seq = int(item["seq"])
    np.save(Path(work) / "spill" / f"{seq:06d}.npy", key, allow_pickle=False)
    np.save(Path(work) / "spill" / f"{seq:06d}.sample.npy", key[::_SAMPLE_STRIDE].copy())
    return {"seq": seq, "edges": int(key.shape[0])}


def _sort_range(
    item: dict[str, Any], *, work: str, num_nodes: int, seqs: list[int]
) -> dict[str, Any]:
    """Merge every spill's keys of destinations ``[lo, hi)``; save their deduplicated CSR."""
    n = max(num_nodes, 1)
    lo, hi, g = int(item["lo"]), int(item["hi"]), int(item["g"])
    pieces = []
    for seq in seqs:
        keys = np.load(Path(work) / "spill" / f"{seq:06d}.npy", mmap_mode="r", allow_pickle=False)
        a, b = np.searchsorted(keys, [lo * n, hi * n])
        if b > a:
            pieces.append(np.array(keys[a:b]))
    key = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
    del pieces
    key.sort()  # in place: one array of the range's edges, not two
    key = dedupe_sorted(key)
    dst = key // n
    indices = (key - dst * n).astype(np.int32 if num_nodes < 2**31 else np.int64)
    deg = np.bincount(dst - lo, minlength=hi - lo).astype(np.int64)
    np.save(Path(work) / "csr" / f"indices-{g:06d}.npy", indices, allow_pickle=False)
    np.save(Path(work) / "csr" / f"deg-{g:06d}.npy", deg, allow_pickle=False)
    return {"g": g, "edges": int(indices.shape[0])}


def _scatter_nodes(
    item: dict[str, Any], *, pg: ParquetGraph, work: str, arrays: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """Read and check one node row group; write its rows at their ids into the node arrays."""
    group = _group(item)
    rows = read_nodes(pg, group)
    order = np.argsort(rows.id, kind="stable")
    ids = rows.id[order]  # a repeated id is reported by the driver's NodeIdCheck
    # runs of consecutive ids are written with one pwrite each
    breaks = np.flatnonzero(np.diff(ids) != 1) + 1 if ids.shape[0] > 1 else np.zeros(0, int)
    starts = np.concatenate([[0], breaks]).astype(np.int64)
    ends = np.concatenate([breaks, [ids.shape[0]]]).astype(np.int64)
    for name, spec in arrays.items():
        value = getattr(rows, name)
        if value is None:
            raise DatasetFileError(f"{group.where}: column(s) for {name} missing")
        data = np.ascontiguousarray(np.asarray(value)[order], dtype=np.dtype(spec["dtype"]))
        row_bytes = int(spec["row_bytes"])
        flat = data.reshape(data.shape[0], -1).view(np.uint8).reshape(data.shape[0], row_bytes)
        fd = os.open(Path(work) / f"{name}.npy", os.O_WRONLY)
        try:
            for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
                _pwrite_all(fd, flat[s:e], int(spec["offset"]) + int(ids[s]) * row_bytes)
        finally:
            os.close(fd)
    np.save(Path(work) / "ids" / f"{int(item['seq']):06d}.npy", rows.id, allow_pickle=False)
    return {"seq": int(item["seq"]), "rows": int(ids.shape[0])}


def _pwrite_all(fd: int, block: np.ndarray, offset: int) -> None:
    view = memoryview(np.ascontiguousarray(block).reshape(-1).view(np.uint8).data)
    while view.nbytes:
        done = os.pwrite(fd, view, offset)
        view, offset = view[done:], offset + done


# ---- driver steps ------------------------------------------------------------------------------


def _ranges(tmp: Path, seqs: list[int], num_nodes: int, sort_edges: int) -> list[tuple[int, int]]:
    """Destination ranges ``[lo, hi)`` covering ``[0, N)``, each about ``sort_edges`` edges.

    Quantiles of the spilled samples (one key in ``_SAMPLE_STRIDE``); a range never splits a
    destination, so a node with more in-edges than ``sort_edges`` is a range of its own.
    """
    n = max(num_nodes, 1)
    samples = [np.load(tmp / "spill" / f"{s:06d}.sample.npy", allow_pickle=False) for s in seqs]
    sample = np.sort(np.concatenate(samples)) if samples else np.zeros(0, dtype=np.int64)
    step = max(sort_edges // _SAMPLE_STRIDE, 1)
    cuts = np.unique(sample[step::step] // n) if sample.size else np.zeros(0, dtype=np.int64)
    bounds = [0, *[int(c) for c in cuts if 0 < c < num_nodes], num_nodes]
    return [(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True) if hi > lo] or [
        (0, num_nodes)
    ]


def _join(tmp: Path, ranges: list[tuple[int, int]], num_nodes: int, num_edges: int) -> None:
    """``indptr.npy`` from the per-range degrees; ``indices.npy`` = the ranges appended."""
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    for g, (lo, hi) in enumerate(ranges):
        indptr[lo + 1 : hi + 1] = np.load(tmp / "csr" / f"deg-{g:06d}.npy", allow_pickle=False)
    np.cumsum(indptr, out=indptr)
    if int(indptr[-1]) != num_edges:
        raise RuntimeError(f"internal: {int(indptr[-1])} edges counted, {num_edges} sorted")
    np.save(tmp / "indptr.npy", indptr, allow_pickle=False)
    dtype = np.dtype(np.int32 if num_nodes < 2**31 else np.int64)
    with open(tmp / "indices.npy", "wb") as fh:
        _header(fh, dtype, (num_edges,))
        for g in range(len(ranges)):
            part = np.load(tmp / "csr" / f"indices-{g:06d}.npy", mmap_mode="r", allow_pickle=False)
            raw = part.reshape(-1).view(np.uint8)
            for lo in range(0, raw.shape[0], _COPY_BLOCK):
                fh.write(np.ascontiguousarray(raw[lo : lo + _COPY_BLOCK]).data)


def _header(fh: Any, dtype: np.dtype, shape: tuple[int, ...]) -> int:
    """Write a ``.npy`` header as ``np.save`` would; returns its length in bytes."""
    from gnnsys.store.npy_files import write_npy_header

    write_npy_header(fh, shape, dtype)
    return int(fh.tell())


def _node_files(pg: ParquetGraph, tmp: Path) -> dict[str, dict[str, Any]]:
    """Create ``x``/``y``/mask ``.npy`` files at full size; their dtype, row bytes, offsets."""
    n = pg.num_nodes
    shapes: dict[str, tuple[np.dtype, tuple[int, ...]]] = {}
    if pg.num_features and pg.feature_dtype is not None:
        shapes["x"] = (np.dtype(pg.feature_dtype), (n, pg.num_features))
    if pg.has_labels:
        shapes["y"] = (np.dtype(np.int64), (n,))
    if pg.has_split:
        for mask in ("train_mask", "val_mask", "test_mask"):
            shapes[mask] = (np.dtype(np.bool_), (n,))
    out: dict[str, dict[str, Any]] = {}
    for name, (dtype, shape) in shapes.items():
        with open(tmp / f"{name}.npy", "wb") as fh:
            offset = _header(fh, dtype, shape)
            row_bytes = dtype.itemsize * (shape[1] if len(shape) > 1 else 1)
            fh.truncate(offset + row_bytes * n)
        out[name] = {"dtype": dtype.str, "row_bytes": row_bytes, "offset": offset}
    return out


def _check_ids(tmp: Path, pg: ParquetGraph) -> None:
    """Every id in ``[0, N)`` exactly once over all node row groups (``NodeIdCheck``)."""
    check = NodeIdCheck(pg.num_nodes)
    for seq, group in enumerate(pg.node_groups):
        check.see(np.load(tmp / "ids" / f"{seq:06d}.npy", allow_pickle=False), group.where)
    check.finish()


def _meta(pg: ParquetGraph, tmp: Path, num_edges: int) -> dict[str, Any]:
    from gnnsys.store.integrity import file_digests

    files = {}
    for path in sorted(tmp.glob("*.npy")):
        _, fast = file_digests(path)
        files[path.name] = {"bytes": path.stat().st_size, "xxh3": fast}
    return {
        "format": FORMAT,
        "name": pg.name,
        "num_nodes": pg.num_nodes,
        "num_edges": num_edges,
        "num_features": pg.num_features,
        "num_classes": pg.num_classes,
        "source": source_of(pg),
        "files": files,
    }


def source_of(pg: ParquetGraph) -> list[dict[str, Any]]:
    """Name, size and mtime of every source table (to tell a stale build from a current one)."""
    paths = sorted({g.path for g in (*pg.edge_groups, *pg.node_groups)})
    out = []
    for path in paths:
        st = path.stat()
        out.append({"path": str(path), "bytes": st.st_size, "mtime_ns": st.st_mtime_ns})
    return out


# ---- reading it back ---------------------------------------------------------------------------


def open_disk_graph(path: str | os.PathLike[str], *, verify: bool = False) -> Graph:
    """The :class:`Graph` in ``path``: ``indices`` and ``x`` memory-mapped, the rest in RAM.

    Args:
        path: A directory written by :func:`build_disk_graph`.
        verify: Also check every file's xxh3_128 (reads every byte once).

    Raises:
        DatasetFileError: Not such a directory, a file missing, of the wrong size, or (with
            ``verify``) a checksum that differs.
    """
    from gnnsys.store.integrity import file_digests

    root = Path(path)
    try:
        meta = json.loads((root / GRAPH_JSON).read_text())
    except (OSError, ValueError) as err:
        raise DatasetFileError(
            f"{root}: no readable {GRAPH_JSON} ({err}); build it again (`gnnsys partition "
            "parquet:DIR --memory-budget ...` writes one)"
        ) from err
    if meta.get("format") != FORMAT:
        raise DatasetFileError(f"{root / GRAPH_JSON}: format {meta.get('format')!r} unknown")
    arrays: dict[str, np.ndarray] = {}
    for name, entry in meta["files"].items():
        file = root / name
        if not file.is_file() or file.stat().st_size != entry["bytes"]:
            raise DatasetFileError(f"{file}: missing or not {entry['bytes']} bytes; build again")
        if verify and file_digests(file)[1] != entry["xxh3"]:
            raise DatasetFileError(f"{file}: checksum differs from {GRAPH_JSON}; build again")
        mapped = name in ("indices.npy", "x.npy")
        arr = np.load(file, mmap_mode="r" if mapped else None, allow_pickle=False)
        arrays[name.removesuffix(".npy")] = arr
    return Graph(
        indptr=arrays.pop("indptr"),
        indices=arrays.pop("indices"),
        num_nodes=int(meta["num_nodes"]),
        name=str(meta["name"]),
        num_classes_hint=meta.get("num_classes"),
        **{k: arrays.get(k) for k in _NODE_ARRAYS},
    )
