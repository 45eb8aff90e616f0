"""Out of core: Parquet -> on-disk CSR on Ray Data -> memory-mapped graph -> store.

The on-disk graph must equal the in-memory ``load("parquet:DIR")`` array for array, and the store
``gnnsys partition --memory-budget`` writes from it must equal, file for file, the store the
in-memory path writes for the same graph and assignment. Bad tables fail with the file, row
group and column named, and leave nothing behind.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gnnsys.cli import main
from gnnsys.datasets.parquet import load_parquet, open_parquet, write_parquet
from gnnsys.datasets.rmat import rmat
from gnnsys.out_of_core.disk_graph import build_disk_graph, open_disk_graph
from gnnsys.out_of_core.runtime import Plan, parse_bytes
from gnnsys.partitioners import partition
from gnnsys.store import write_partitions

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

_ARRAYS = ("indptr", "indices", "x", "y", "train_mask", "val_mask", "test_mask")


@pytest.fixture(scope="module")
def parquet_graph(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 20k-node R-MAT graph in Parquet, in several files and row groups."""
    root = tmp_path_factory.mktemp("pq") / "rmat"
    graph = rmat(num_nodes=20_000, num_features=8, seed=3)
    write_parquet(graph, root, rows_per_group=40_000, rows_per_file=150_000)
    return root


def _same_arrays(a: object, b: object) -> None:
    for key in _ARRAYS:
        x, y = getattr(a, key), getattr(b, key)
        assert (x is None) == (y is None), key
        if x is not None:
            assert x.dtype == y.dtype, key
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=key)


def test_disk_graph_equals_in_memory(ray_session: object, parquet_graph: Path, tmp_path: Path):
    pg = open_parquet(parquet_graph)
    assert len(pg.edge_groups) > 3 and len(pg.node_groups) == 1
    # a small budget: several sort ranges, so the ranges' seams are exercised
    out = build_disk_graph(pg, tmp_path / "g", memory_budget=256 << 20, progress=False)
    disk = open_disk_graph(out, verify=True)
    assert isinstance(disk.indices, np.memmap) and isinstance(disk.x, np.memmap)
    _same_arrays(disk, load_parquet(str(parquet_graph)))
    meta = json.loads((out / "graph.json").read_text())
    assert meta["num_edges"] == disk.num_edges and meta["num_nodes"] == 20_000
    assert not list(tmp_path.glob(".*")), "no temporary directory left"


def test_sort_ranges_split_destinations(
    ray_session: object, parquet_graph: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """With ~50k edges per sort task (many ranges, 2 at once) the CSR is still exact."""
    pg = open_parquet(parquet_graph)
    plan = Plan.of(256 << 20, pg.num_nodes, 2)
    small = Plan(plan.budget, plan.object_store, plan.driver, 2, plan.task_bytes, 50_000)
    monkeypatch.setattr(Plan, "of", classmethod(lambda cls, *a: small))
    out = build_disk_graph(pg, tmp_path / "g", memory_budget=256 << 20, progress=False)
    _same_arrays(open_disk_graph(out), load_parquet(str(parquet_graph)))


@pytest.mark.parametrize("method", ["ldg", "hash"])
def test_store_equals_in_memory_store(
    ray_session: object, parquet_graph: Path, tmp_path: Path, method: str
):
    ooc = tmp_path / "ooc"
    argv = ["partition", f"parquet:{parquet_graph}", "--parts", "3", "--method", method]
    assert main([*argv, "--memory-budget", "512M", "--out", str(ooc), "--json"]) == 0
    graph = load_parquet(str(parquet_graph))
    ref = tmp_path / "ref"
    write_partitions(graph, partition(graph, method, 3, seed=0), ref, num_hops=2)
    ooc_manifest = json.loads((ooc / "manifest.json").read_text())
    ref_manifest = json.loads((ref / "manifest.json").read_text())
    assert ooc_manifest == ref_manifest  # every file's sha256 and xxh3, sizes, provenance
    files = sorted(p.relative_to(ref) for p in ref.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(ooc) for p in ooc.rglob("*") if p.is_file())
    for rel in files:
        assert (ooc / rel).read_bytes() == (ref / rel).read_bytes(), rel
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ooc", "ref"]  # work dir removed


def test_work_dir_is_kept_and_reused(
    ray_session: object, parquet_graph: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    work = tmp_path / "work"
    argv = ["partition", f"parquet:{parquet_graph}", "--parts", "2", "--method", "range"]
    argv += ["--memory-budget", "512M", "--work-dir", str(work), "--json"]
    assert main([*argv, "--out", str(tmp_path / "a")]) == 0
    stamp = (work / "graph.json").stat().st_mtime_ns
    assert main([*argv, "--out", str(tmp_path / "b")]) == 0
    assert (work / "graph.json").stat().st_mtime_ns == stamp  # reused, not rebuilt
    first, second = (json.loads(line) for line in capsys.readouterr().out.splitlines()[-2:])
    assert first["edge_cut"] == second["edge_cut"] and first["out_of_core"] is True


def test_metis_refused_over_budget(parquet_graph: Path, tmp_path: Path, capsys):
    argv = ["partition", f"parquet:{parquet_graph}", "--parts", "2", "--method", "metis"]
    assert main([*argv, "--memory-budget", "1M", "--out", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert "--method metis holds the whole graph" in err and "ldg" in err
    assert not (tmp_path / "s").exists()


def test_budget_needs_parquet(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    argv = ["partition", "synthetic:sbm", "--parts", "2", "--method", "hash"]
    assert main([*argv, "--memory-budget", "1G", "--out", str(tmp_path / "s")]) == 2
    assert "--memory-budget needs a parquet:DIR dataset" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "value"), [("4G", 4 << 30), ("512M", 512 << 20), ("1.5GiB", 3 << 29), ("1000", 1000)]
)
def test_parse_bytes(text: str, value: int):
    assert parse_bytes(text) == value


@pytest.mark.parametrize("text", ["", "G", "-1G", "lots", "0"])
def test_parse_bytes_refuses(text: str):
    with pytest.raises(ValueError, match="write a positive size"):
        parse_bytes(text)


# ---- bad tables -------------------------------------------------------------------------------


def _small(tmp_path: Path) -> Path:
    root = tmp_path / "pq"
    write_parquet(rmat(num_nodes=2_000, num_features=4, seed=0), root, rows_per_group=10_000)
    return root


def _rewrite(path: Path, **columns: object) -> None:
    table = pq.read_table(path)
    for name, values in columns.items():
        table = table.set_column(table.schema.get_field_index(name), name, pa.array(values))
    pq.write_table(table, path)


def _break_edge_id(root: Path) -> str:
    path = sorted((root / "edges").glob("*.parquet"))[0]
    dst = pq.read_table(path).column("dst").to_numpy().copy()
    dst[5] = 2_000
    _rewrite(path, dst=dst)
    return "column dst"


def _duplicate_node(root: Path) -> str:
    path = sorted((root / "nodes").glob("*.parquet"))[0]
    ids = pq.read_table(path).column("id").to_numpy().copy()
    ids[7] = ids[3]
    _rewrite(path, id=ids)
    return "appears twice"


def _nan_feature(root: Path) -> str:
    path = sorted((root / "nodes").glob("*.parquet"))[0]
    table = pq.read_table(path)
    x = np.stack(table.column("x").to_numpy(zero_copy_only=False)).astype(np.float32)
    x[11, 2] = np.nan
    col = pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), x.shape[1])
    pq.write_table(table.set_column(table.schema.get_field_index("x"), "x", col), path)
    return "column x"


def _wrong_dtype(root: Path) -> str:
    path = sorted((root / "edges").glob("*.parquet"))[0]
    src = pq.read_table(path).column("src").to_numpy().astype(np.float64)
    _rewrite(path, src=src)
    return "column src"


def _truncate(root: Path) -> str:
    path = sorted((root / "edges").glob("*.parquet"))[-1]
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path.name


@pytest.mark.parametrize(
    "breaker", [_break_edge_id, _duplicate_node, _nan_feature, _wrong_dtype, _truncate]
)
def test_bad_tables_fail_cleanly(
    ray_session: object, tmp_path: Path, capsys: pytest.CaptureFixture[str], breaker: object
):
    root = _small(tmp_path)
    expected = breaker(root)  # type: ignore[operator]
    out = tmp_path / "store"
    argv = ["partition", f"parquet:{root}", "--parts", "2", "--method", "hash"]
    assert main([*argv, "--memory-budget", "256M", "--out", str(out)]) != 0
    err = capsys.readouterr().err
    assert expected in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pq"]  # no store, no work dir


def test_stale_work_dirs_of_dead_runs_are_removed(
    ray_session: object, parquet_graph: Path, tmp_path: Path
):
    """A run killed by SIGKILL leaves its temporary graph; the next run for that --out removes it
    (and a staging directory of one), but never one whose run is alive."""
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], text=True,
                          capture_output=True, check=True)  # fmt: skip
    pid = int(dead.stdout)
    stale = [tmp_path / f".s.graph-{pid}-abcd1234", tmp_path / f"..s.graph-{pid}-ef56.tmp-0011"]
    live = tmp_path / f".s.graph-{os.getpid()}-live0000"
    other = tmp_path / f".t.graph-{pid}-abcd1234"  # another --out's: not this run's business
    for path in (*stale, live, other):
        path.mkdir()
    argv = ["partition", f"parquet:{parquet_graph}", "--parts", "2", "--method", "hash"]
    assert main([*argv, "--memory-budget", "512M", "--out", str(tmp_path / "s")]) == 0
    assert not any(p.exists() for p in stale)
    assert live.is_dir() and other.is_dir()
