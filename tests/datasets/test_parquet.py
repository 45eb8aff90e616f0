"""``parquet:DIR``: round trips, hand-written tables, and one clear error per kind of bad file."""

from __future__ import annotations

import dataclasses
import errno
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gnnsys.datasets.rmat as rmat_module
from gnnsys.datasets import load
from gnnsys.datasets.parquet import (
    NodeIdCheck,
    open_parquet,
    read_edges,
    read_nodes,
    write_parquet,
)
from gnnsys.datasets.parquet_write import TableWriter
from gnnsys.datasets.rmat import rmat, write_rmat_parquet
from gnnsys.errors import DatasetFileError, DatasetNotFoundError, DiskError
from gnnsys.types import Graph

FIELDS = ("indptr", "indices", "x", "y", "train_mask", "val_mask", "test_mask")


def assert_same(got: Graph, want: Graph) -> None:
    assert got.num_nodes == want.num_nodes
    for key in FIELDS:
        a, b = getattr(got, key), getattr(want, key)
        assert (a is None) == (b is None), key
        if a is not None:
            assert a.dtype == b.dtype, (key, a.dtype, b.dtype)
            assert np.array_equal(a, b), key
    assert got.num_classes_hint == want.num_classes_hint


def planetoid_like(
    *, x_dtype: Any = np.float32, overlap: bool = False, partial: bool = False
) -> Graph:
    """60 nodes, directed edges with self-loops, unlabeled nodes, a public-style split."""
    rng = np.random.default_rng(0)
    n = 60
    edge_index = rng.integers(0, n, size=(2, 240))
    edge_index[:, :5] = [[3, 4, 5, 6, 7], [3, 4, 5, 6, 7]]  # self-loops are kept
    y = rng.integers(0, 5, n)
    y[rng.random(n) < 0.2] = -1
    train, val, test = (np.zeros(n, dtype=bool) for _ in range(3))
    train[:15], val[15:30], test[30:50] = True, True, True
    if overlap:
        val[10:20] = True
    return Graph.from_edge_index(
        edge_index,
        n,
        x=rng.standard_normal((n, 7)).astype(x_dtype),
        y=y,
        train_mask=train,
        val_mask=None if partial else val,
        test_mask=test,
        name="planetoid-like",
        num_classes_hint=6,
    )


@pytest.mark.parametrize(
    "kind", ["float32", "float16", "overlapping masks", "partial masks", "no nodes"]
)
def test_round_trip_small(tmp_path: Path, kind: str) -> None:
    g = planetoid_like(
        x_dtype=np.float16 if kind == "float16" else np.float32,
        overlap=kind == "overlapping masks",
        partial=kind == "partial masks",
    )
    if kind == "no nodes":
        g = Graph(indptr=g.indptr, indices=g.indices, num_nodes=g.num_nodes, name="bare")
    out = write_parquet(g, tmp_path / "g", rows_per_group=7, rows_per_file=40)
    pg = open_parquet(out)
    assert len(pg.edge_groups) > 5 and pg.num_edge_rows == g.num_edges
    assert len({grp.path for grp in pg.edge_groups}) > 1
    got = load(f"parquet:{out}")
    assert got.name == g.name
    if kind == "partial masks":  # an absent mask comes back all False
        assert got.val_mask is not None and not got.val_mask.any()
        g = dataclasses.replace(g, val_mask=got.val_mask)
    assert_same(got, g)


def test_round_trip_rmat(tmp_path: Path) -> None:
    g = rmat(num_nodes=5000, num_features=16)
    out = write_parquet(g, tmp_path / "rmat", rows_per_group=10_000, rows_per_file=30_000)
    assert_same(load(f"parquet:{out}"), g)
    assert open_parquet(out).split_columns == ("split",)


def test_rmat_writer_gives_rmat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rmat_module, "_FEATURE_ROWS", 1000)  # several feature blocks
    params: dict[str, Any] = {"num_nodes": 5000, "num_features": 16, "chunk_edges": 7000}
    seen: list[tuple[int, int]] = []
    out = write_rmat_parquet(
        tmp_path / "rmat",
        rows_per_group=4096,
        rows_per_file=20_000,
        progress=lambda done, total: seen.append((done, total)),
        **params,
    )
    want = rmat(**params)
    got = load(f"parquet:{out}")
    assert_same(got, want)
    assert got.name == want.name == "synthetic:rmat"
    assert len(seen) > 10 and seen[-1] == (50_000 + 5000, 55_000)  # 8 chunks + 5 node blocks
    pg = open_parquet(out)
    assert pg.num_edge_rows > got.num_edges  # duplicates are written, dropped on load
    assert len({grp.path for grp in pg.edge_groups}) > 1


def _write(path: Path, columns: dict[str, Any], row_group_size: int | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path, row_group_size=row_group_size)


def test_hand_written_tables(tmp_path: Path) -> None:
    """x_i float64 columns, ids shuffled over two files, plain-string split, extra columns."""
    rng = np.random.default_rng(1)
    n = 30
    src, dst = rng.integers(0, n, 100), rng.integers(0, n, 100)
    _write(tmp_path / "edges" / "a.parquet", {"src": src[:60], "dst": dst[:60]}, 16)
    _write(tmp_path / "edges" / "b.parquet", {"src": src[60:], "dst": dst[60:], "w": src[60:]})
    x = rng.standard_normal((n, 3))
    y = rng.integers(-1, 4, n)
    split = np.array(["train", "val", "test", None] * 8)[:n]
    order = rng.permutation(n)
    for name, rows in (("a.parquet", order[:12]), ("b.parquet", order[12:])):
        cols: dict[str, Any] = {"id": rows.astype(np.int32), "y": y[rows], "note": rows}
        cols |= {f"x_{j}": x[rows, j] for j in range(3)}
        cols["split"] = pa.array(split[rows].tolist(), type=pa.string())
        _write(tmp_path / "nodes" / name, cols, 5)
    (tmp_path / "gnnsys.json").write_text(json.dumps({"num_classes": 4}))
    got = load("parquet:" + str(tmp_path))
    want = Graph.from_edge_index(
        np.stack([src, dst]),
        n,
        x=x.astype(np.float32),
        y=y,
        train_mask=split == "train",
        val_mask=split == "val",
        test_mask=split == "test",
        num_classes_hint=4,
    )
    assert_same(got, want)
    assert got.name == f"parquet:{tmp_path.name}"


def test_relative_dir_and_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = write_parquet(planetoid_like(), tmp_path / "data" / "g")
    monkeypatch.chdir(tmp_path)
    assert load("parquet:data/g").num_nodes == 60  # relative to the working directory
    assert load("parquet:g", root=tmp_path / "data").num_nodes == 60  # relative to root
    with pytest.raises(TypeError, match="unexpected keyword argument 'seed'"):
        load(f"parquet:{out}", seed=1)


def test_streaming_api(tmp_path: Path) -> None:
    g = planetoid_like()
    out = write_parquet(g, tmp_path / "g", rows_per_group=25)
    pg = open_parquet(out)
    assert (pg.num_nodes, pg.num_features, pg.feature_dtype) == (60, 7, np.dtype(np.float32))
    assert (pg.num_classes, pg.has_labels, pg.has_split) == (6, True, True)
    assert pg.edge_groups[1].where == "edges/part-00000.parquet row group 1"
    src, dst = read_edges(pg, pg.edge_groups[0])
    assert src.dtype == dst.dtype == np.int64
    assert np.array_equal(src, g.indices[:25]) and np.array_equal(dst, g.dst_of_edges()[:25])
    rows = read_nodes(pg, pg.node_groups[1])
    assert rows.x is not None and rows.y is not None and rows.train_mask is not None
    assert np.array_equal(rows.id, np.arange(25, 50))
    assert np.array_equal(rows.x, g.x[25:50])  # type: ignore[index]
    assert rows.y.dtype == np.int64 and rows.train_mask.dtype == bool


# ---- one clear error per kind of bad input ------------------------------------------------
@pytest.fixture
def graph_dir(tmp_path: Path) -> Path:
    """A valid 1000-node graph: 2 edge files of 3 row groups each, 2 node files."""
    rng = np.random.default_rng(2)
    for part in range(2):
        edges = {"src": rng.integers(0, 1000, 300), "dst": rng.integers(0, 1000, 300)}
        _write(tmp_path / "edges" / f"part-{part}.parquet", edges, 100)
        ids = np.arange(part * 500, (part + 1) * 500)
        x = rng.standard_normal((500, 4)).astype(np.float32)
        nodes = {
            "id": ids,
            "x": pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), 4),
            "y": rng.integers(0, 3, 500),
        }
        _write(tmp_path / "nodes" / f"part-{part}.parquet", nodes, 200)
    assert load(f"parquet:{tmp_path}").num_nodes == 1000
    return tmp_path


def _replace_group(path: Path, group: int, column: str, values: Any) -> None:
    """Rewrite ``path`` with ``column`` of row group ``group`` set to ``values``."""
    pf = pq.ParquetFile(path)
    tables = [pf.read_row_group(i) for i in range(pf.metadata.num_row_groups)]
    size = tables[0].num_rows
    table = tables[group]
    array = values if isinstance(values, pa.Array) else pa.array(values)
    tables[group] = table.set_column(table.schema.get_field_index(column), column, array)
    pq.write_table(pa.concat_tables(tables, promote_options="permissive"), path, size)


def _error(root: Path) -> str:
    with pytest.raises(DatasetFileError) as info:
        load(f"parquet:{root}")
    return str(info.value)


def test_id_out_of_range(graph_dir: Path) -> None:
    dst = np.full(100, 7)
    dst[17] = 1000
    _replace_group(graph_dir / "edges" / "part-1.parquet", 2, "dst", dst)
    assert _error(graph_dir).startswith(
        "edges/part-1.parquet row group 2, column dst: node id 1000 out of range [0, 1000) "
        "(row 17); "
    )


def test_duplicate_node_id(graph_dir: Path) -> None:
    ids = np.arange(700, 900)
    ids[5] = 3  # also in nodes/part-0.parquet, row group 0
    _replace_group(graph_dir / "nodes" / "part-1.parquet", 1, "id", ids)
    message = _error(graph_dir)
    assert message.startswith("nodes/part-1.parquet row group 1, column id: node id 3 ")
    assert "earlier row group" in message


def test_duplicate_inside_a_group(graph_dir: Path) -> None:
    ids = np.arange(0, 200)
    ids[9] = 8
    _replace_group(graph_dir / "nodes" / "part-0.parquet", 0, "id", ids)
    assert "column id: node id 8 appears twice" in _error(graph_dir)


def test_missing_node_id(graph_dir: Path) -> None:
    (graph_dir / "gnnsys.json").write_text(json.dumps({"num_nodes": 1001}))
    message = _error(graph_dir)
    assert "1000 node rows but gnnsys.json says num_nodes=1001" in message
    assert "missing" in message
    check = NodeIdCheck(4)  # the streaming check names the ids themselves
    check.see(np.array([0, 2]), "nodes/a.parquet row group 0")
    with pytest.raises(DatasetFileError, match=r"node ids \[1, 3\] missing"):
        check.finish()


@pytest.mark.parametrize(
    ("folder", "column", "values", "expect"),
    [
        ("edges", "src", np.arange(100, dtype=np.float64), "column src: type double"),
        ("nodes", "id", [str(i) for i in range(500)], "column id: type string"),
        ("nodes", "y", np.ones(500, dtype=np.float32), "column y: type float"),
    ],
)
def test_wrong_dtype(graph_dir: Path, folder: str, column: str, values: Any, expect: str) -> None:
    path = graph_dir / folder / "part-0.parquet"
    table = pq.read_table(path)
    if folder == "edges":
        table = table.slice(0, 100)
    table = table.set_column(table.schema.get_field_index(column), column, pa.array(values))
    pq.write_table(table, path)
    message = _error(graph_dir)
    assert message.startswith(f"{folder}/part-0.parquet, {expect}") and "cast" in message


def test_nan_feature(graph_dir: Path) -> None:
    path = graph_dir / "nodes" / "part-1.parquet"
    x = np.ones((200, 4), dtype=np.float32)
    x[31, 2] = np.nan
    values = pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), 4)
    _replace_group(path, 2, "x", values[:100])
    message = _error(graph_dir)
    assert message.startswith("nodes/part-1.parquet row group 2, column x: nan at row 31")
    assert "finite" in message


def test_inf_feature_column(tmp_path: Path) -> None:
    _write(tmp_path / "edges" / "e.parquet", {"src": [0], "dst": [1]})
    _write(tmp_path / "nodes" / "n.parquet", {"id": [1, 0], "x_0": [1.0, 2.0], "x_1": [0, 1e300]})
    assert _error(tmp_path).startswith("nodes/n.parquet row group 0, column x_1: inf at row 1")


def test_truncated_file(graph_dir: Path) -> None:
    path = graph_dir / "edges" / "part-1.parquet"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    message = _error(graph_dir)
    assert message.startswith("edges/part-1.parquet: cannot be read as Parquet")
    assert "truncated" in message


@pytest.mark.parametrize(
    ("folder", "drop", "expect"),
    [("edges", "dst", "no column 'dst'"), ("nodes", "id", "no column 'id'")],
)
def test_missing_column(graph_dir: Path, folder: str, drop: str, expect: str) -> None:
    path = graph_dir / folder / "part-1.parquet"
    pq.write_table(pq.read_table(path).drop_columns([drop]), path)
    message = _error(graph_dir)
    assert message.startswith(f"{folder}/part-1.parquet: {expect}")


def test_node_files_disagree(graph_dir: Path) -> None:
    path = graph_dir / "nodes" / "part-1.parquet"
    pq.write_table(pq.read_table(path).drop_columns(["y"]), path)
    assert "every node file needs the same columns" in _error(graph_dir)


def test_missing_dir(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError, match="not found; looked in"):
        load(f"parquet:{tmp_path / 'nowhere'}")
    (tmp_path / "nodes").mkdir()
    assert "no edges/ folder" in _error(tmp_path)
    (tmp_path / "edges").mkdir()
    assert _error(tmp_path).startswith("edges/: holds no .parquet files")


@pytest.mark.parametrize(
    ("column", "values", "expect"),
    [
        ("y", np.full(200, 3), "column y: label 3 at row 0; labels must be [-1, 3)"),
        ("split", ["train", "dev"] * 100, "column split: value 'dev' at row 1"),
        ("src", pa.array([None] + [1] * 199, pa.int64()), "column src: null at row 0"),
    ],
)
def test_bad_values(graph_dir: Path, column: str, values: Any, expect: str) -> None:
    (graph_dir / "gnnsys.json").write_text(json.dumps({"num_classes": 3}))
    folder = "edges" if column == "src" else "nodes"
    path = graph_dir / folder / "part-0.parquet"
    if column == "split":
        for part in range(2):
            p = graph_dir / "nodes" / f"part-{part}.parquet"
            table = pq.read_table(p)
            table = table.append_column("split", pa.array([None] * 500, pa.string()))
            pq.write_table(table, p, row_group_size=200)
    _replace_group(path, 0, column, values[:100] if folder == "edges" else values)
    assert expect in _error(graph_dir)


@pytest.mark.parametrize(
    ("meta", "expect"),
    [
        ("{", "gnnsys.json: not valid JSON"),
        ('{"num_node": 3}', "unknown key 'num_node'"),
        ('{"num_classes": 0}', "num_classes is 0; it must be an integer >= 1"),
    ],
)
def test_bad_meta(graph_dir: Path, meta: str, expect: str) -> None:
    (graph_dir / "gnnsys.json").write_text(meta)
    assert expect in _error(graph_dir)


def test_no_nodes_needs_num_nodes(tmp_path: Path) -> None:
    _write(tmp_path / "edges" / "e.parquet", {"src": [0, 1], "dst": [1, 2]})
    assert "num_nodes must be given" in _error(tmp_path)
    (tmp_path / "gnnsys.json").write_text('{"num_nodes": 3}')
    g = load(f"parquet:{tmp_path}")
    assert g.num_nodes == 3 and g.x is None and g.num_edges == 2


# ---- writing ------------------------------------------------------------------------------
def test_write_refuses_and_replaces(tmp_path: Path) -> None:
    g = planetoid_like()
    out = write_parquet(g, tmp_path / "g")
    with pytest.raises(ValueError, match="already exists"):
        write_parquet(g, out)
    write_parquet(g, out, overwrite=True, rows_per_group=9)
    assert len(open_parquet(out).edge_groups) > 1
    other = tmp_path / "home"
    (other / "keep.txt").parent.mkdir()
    (other / "keep.txt").write_text("x")
    with pytest.raises(ValueError, match="not a Parquet graph directory"):
        write_parquet(g, other, overwrite=True)
    assert (other / "keep.txt").exists()


def test_failed_write_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(self: TableWriter, table: pa.Table) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(TableWriter, "write", full)
    with pytest.raises(DiskError, match="no space left on device") as info:
        write_parquet(planetoid_like(), tmp_path / "g")
    assert info.value.errno == errno.ENOSPC
    assert list(tmp_path.iterdir()) == []


def test_write_refuses_multi_label(tmp_path: Path) -> None:
    g = planetoid_like()
    multi = Graph(indptr=g.indptr, indices=g.indices, num_nodes=60, y=np.zeros((60, 3), bool))
    with pytest.raises(ValueError, match="multi-label y"):
        write_parquet(multi, tmp_path / "g")
