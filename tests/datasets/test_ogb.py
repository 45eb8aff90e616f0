"""``ogb:<name>`` against a tiny OGB-layout directory written into tmp_path."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from gnnsys.datasets import load
from gnnsys.errors import DatasetNotFoundError


def write_csv_gz(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        f.write("".join(line + "\n" for line in lines))


@pytest.fixture
def ogb_root(tmp_path: Path) -> Path:
    """ogbn_tiny: 5 nodes, edges 0->1, 1->2, 2->3, 3->3 (loop), 3->0; node 4 isolated."""
    base = tmp_path / "ogbn_tiny"
    write_csv_gz(base / "raw" / "edge.csv.gz", ["0,1", "1,2", "2,3", "3,3", "3,0"])
    write_csv_gz(base / "raw" / "num-node-list.csv.gz", ["5"])
    write_csv_gz(base / "raw" / "node-feat.csv.gz", [f"{i}.5,{-i}" for i in range(5)])
    write_csv_gz(base / "raw" / "node-label.csv.gz", ["0", "2", "1", "nan", "2"])
    split = base / "split" / "time"
    write_csv_gz(split / "train.csv.gz", ["0", "1"])
    write_csv_gz(split / "valid.csv.gz", ["2"])
    write_csv_gz(split / "test.csv.gz", ["4"])
    return tmp_path


def test_tiny_fixture(ogb_root: Path) -> None:
    g = load("ogb:ogbn-tiny", root=ogb_root)
    assert g.num_nodes == 5 and g.num_edges == 8  # 4 non-loop edges, symmetrized
    assert g.indptr.tolist() == [0, 2, 4, 6, 8, 8]
    assert g.indices.tolist() == [1, 3, 0, 2, 1, 3, 0, 2]
    assert g.x is not None and g.x.dtype == np.float32
    assert g.x[:, 0].tolist() == [0.5, 1.5, 2.5, 3.5, 4.5]
    assert g.y is not None and g.y.tolist() == [0, 2, 1, -1, 2]
    assert g.num_classes == 3
    assert np.flatnonzero(g.train_mask).tolist() == [0, 1]
    assert np.flatnonzero(g.val_mask).tolist() == [2]
    assert np.flatnonzero(g.test_mask).tolist() == [4]
    assert g.name == "ogb:ogbn-tiny"


def test_directed_option(ogb_root: Path) -> None:
    g = load("ogb:ogbn_tiny", root=ogb_root, symmetric=False)
    assert g.num_edges == 4
    assert g.indices.tolist() == [3, 0, 1, 2]  # in-neighbors of 0, 1, 2, 3


def test_multilabel_and_no_features(tmp_path: Path) -> None:
    base = tmp_path / "ogbn_ml"
    write_csv_gz(base / "raw" / "edge.csv.gz", ["0,1", "1,2"])
    write_csv_gz(base / "raw" / "node-label.csv.gz", ["1,0", "0,0", "1,1"])
    g = load("ogb:ogbn-ml", root=tmp_path)
    assert g.num_nodes == 3 and g.x is None and g.train_mask is None
    assert (
        g.y is not None
        and g.y.dtype == np.bool_
        and g.y.tolist()
        == [
            [True, False],
            [False, False],
            [True, True],
        ]
    )


def test_several_split_types_need_a_choice(ogb_root: Path) -> None:
    other = ogb_root / "ogbn_tiny" / "split" / "random"
    for name in ("train", "valid", "test"):
        write_csv_gz(other / f"{name}.csv.gz", ["3"])
    with pytest.raises(ValueError, match="split_type="):
        load("ogb:ogbn-tiny", root=ogb_root)
    g = load("ogb:ogbn-tiny", root=ogb_root, split_type="random")
    assert np.flatnonzero(g.train_mask).tolist() == [3]


def test_missing_dataset_says_where_and_how(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError) as err:
        load("ogb:ogbn-arxiv", root=tmp_path)
    message = str(err.value)
    assert str(tmp_path / "ogbn_arxiv") in message and "--root" in message


def test_missing_edge_file_names_it(tmp_path: Path) -> None:
    (tmp_path / "ogbn_arxiv" / "raw").mkdir(parents=True)
    with pytest.raises(DatasetNotFoundError, match=r"edge\.csv\.gz is missing.*ogb"):
        load("ogb:ogbn-arxiv", root=tmp_path)
