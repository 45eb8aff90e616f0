"""``synthetic:mag`` (shapes, determinism, signal) and ``ogb:ogbn-mag`` on a tiny OGB tree."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from gnnsys.datasets import load, load_hetero
from gnnsys.datasets.mag import MAG_EDGE_COUNTS, MAG_NODE_COUNTS, synthetic_mag
from gnnsys.errors import DatasetNotFoundError

MAG_TYPES = ["paper", "author", "institution", "field_of_study"]


def test_shapes_follow_ogbn_mag() -> None:
    g = load_hetero("synthetic:mag", scale=0.005, seed=3)
    assert g.node_types == MAG_TYPES and g.edge_types == list(MAG_EDGE_COUNTS)
    for node_type, count in MAG_NODE_COUNTS.items():
        assert g.num_nodes(node_type) == round(count * 0.005)
    for edge_type, rel in g.relations.items():  # duplicates dropped: at most the drawn count
        assert 0.3 * round(MAG_EDGE_COUNTS[edge_type] * 0.005) < rel.num_edges
        assert rel.num_edges <= round(MAG_EDGE_COUNTS[edge_type] * 0.005)
    paper = g.nodes["paper"]
    assert paper.x is not None and paper.x.shape == (g.num_nodes("paper"), 128)
    assert paper.x.dtype == np.float32
    assert paper.y is not None and paper.y.min() >= 0 and paper.y.max() < 349
    assert g.num_classes == 349
    assert all(g.nodes[t].x is None and g.nodes[t].y is None for t in MAG_TYPES[1:])
    masks = (paper.train_mask, paper.val_mask, paper.test_mask)
    assert all(m is not None for m in masks)
    total = sum(m.astype(int) for m in masks if m is not None)
    assert (total == 1).all()  # the time split covers every paper once
    year = paper.attrs["year"]
    assert paper.test_mask is not None and (year[paper.test_mask] == 2019).all()


def test_num_nodes_sizes_the_graph_as_for_homogeneous_synthetics() -> None:
    """``num_nodes`` (``--num-nodes``, ``-D num_nodes=``) is a scale: about that many nodes."""
    g = load_hetero("synthetic:mag", num_nodes=20_000)
    assert abs(g.num_nodes() - 20_000) <= len(MAG_NODE_COUNTS)  # one rounding per type
    same = load_hetero("synthetic:mag", scale=20_000 / sum(MAG_NODE_COUNTS.values()))
    assert np.array_equal(g.nodes["paper"].x, same.nodes["paper"].x)
    with pytest.raises(ValueError, match="num_nodes=100 and scale=0.1; give one of them"):
        load_hetero("synthetic:mag", num_nodes=100, scale=0.1)
    with pytest.raises(ValueError, match="num_nodes=0; give a positive integer"):
        load_hetero("synthetic:mag", num_nodes=0)


def test_same_seed_same_arrays_other_seed_differs() -> None:
    a, b, c = (
        synthetic_mag(0.003, seed=1),
        synthetic_mag(0.003, seed=1),
        synthetic_mag(0.003, seed=2),
    )
    for edge_type in a.edge_types:
        assert np.array_equal(a.relations[edge_type].indices, b.relations[edge_type].indices)
        assert np.array_equal(a.relations[edge_type].indptr, b.relations[edge_type].indptr)
    assert np.array_equal(a.nodes["paper"].x, b.nodes["paper"].x)  # type: ignore[arg-type]
    assert not np.array_equal(a.nodes["paper"].y, c.nodes["paper"].y)  # type: ignore[arg-type]
    no_x = synthetic_mag(0.003, seed=1, num_features=0)
    assert no_x.nodes["paper"].x is None
    cites = ("paper", "cites", "paper")
    assert np.array_equal(no_x.relations[cites].indices, a.relations[cites].indices)


def test_reverse_relations_and_no_self_citations() -> None:
    g = synthetic_mag(0.003, reverse=True)
    assert ("paper", "rev_writes", "author") in g.relations
    assert ("institution", "rev_affiliated_with", "author") in g.relations
    assert ("field_of_study", "rev_has_topic", "paper") in g.relations
    assert len(g.relations) == 7
    cites = g.relations[("paper", "cites", "paper")]
    assert not (cites.indices == cites.dst_of_edges()).any()
    src, dst = cites.indices.tolist(), cites.dst_of_edges().tolist()
    assert set(zip(src, dst, strict=True)) == set(zip(dst, src, strict=True))  # symmetrized


def test_labels_follow_the_neighbourhood() -> None:
    """The planted signal: cited papers share the venue far above chance (homophily 0.7)."""
    g = synthetic_mag(0.01, seed=0)
    y = g.nodes["paper"].y
    assert y is not None
    cites = g.relations[("paper", "cites", "paper")]
    same = (y[cites.indices] == y[cites.dst_of_edges()]).mean()
    chance = (np.bincount(y) / y.shape[0]) @ (np.bincount(y) / y.shape[0])
    assert same > 0.6 > 10 * chance


def test_homogeneous_load_points_to_load_hetero() -> None:
    with pytest.raises(ValueError, match="load_hetero"):
        load("synthetic:mag")
    with pytest.raises(ValueError, match="choose .mag."):
        load_hetero("synthetic:sbm")


# ---- ogb:ogbn-mag on a tiny directory in OGB's layout ----------------------------------------
def write_csv_gz(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        f.write("".join(line + "\n" for line in lines))


@pytest.fixture
def mag_root(tmp_path: Path) -> Path:
    """ogbn_mag with 4 papers, 3 authors, 2 institutions, 2 fields (OGB's file names)."""
    raw = tmp_path / "ogbn_mag" / "raw"
    write_csv_gz(
        raw / "num-node-dict.csv.gz", ["author,field_of_study,institution,paper", "3,2,2,4"]
    )
    relations = {
        "author___affiliated_with___institution": ["0,1", "1,0", "2,1"],
        "author___writes___paper": ["0,0", "1,0", "1,2", "2,3"],
        "paper___cites___paper": ["1,0", "2,0", "3,1"],
        "paper___has_topic___field_of_study": ["0,1", "1,1", "3,0"],
    }
    for folder, lines in relations.items():
        write_csv_gz(raw / "relations" / folder / "edge.csv.gz", lines)
        write_csv_gz(raw / "relations" / folder / "num-edge-list.csv.gz", [str(len(lines))])
    write_csv_gz(raw / "triplet-type-list.csv.gz", [f.replace("___", ",") for f in relations])
    write_csv_gz(
        raw / "node-feat" / "paper" / "node-feat.csv.gz", [f"{i}.5,{-i}" for i in range(4)]
    )
    write_csv_gz(raw / "node-feat" / "paper" / "node_year.csv.gz", ["2015", "2017", "2018", "2019"])
    write_csv_gz(raw / "node-label" / "paper" / "node-label.csv.gz", ["3", "1", "0", "2"])
    write_csv_gz(
        raw / "nodetype-has-label.csv.gz",
        ["author,field_of_study,institution,paper", "False,False,False,True"],
    )
    split = tmp_path / "ogbn_mag" / "split" / "time"
    write_csv_gz(
        split / "nodetype-has-split.csv.gz",
        ["author,field_of_study,institution,paper", "False,False,False,True"],
    )
    write_csv_gz(split / "paper" / "train.csv.gz", ["0", "1"])
    write_csv_gz(split / "paper" / "valid.csv.gz", ["2"])
    write_csv_gz(split / "paper" / "test.csv.gz", ["3"])
    return tmp_path


def test_ogb_mag_reader(mag_root: Path) -> None:
    g = load_hetero("ogb:ogbn-mag", root=mag_root)
    assert g.node_types == ["author", "field_of_study", "institution", "paper"]  # OGB's order
    assert [g.num_nodes(t) for t in g.node_types] == [3, 2, 2, 4]
    assert g.edge_types == [
        ("author", "affiliated_with", "institution"),
        ("author", "writes", "paper"),
        ("paper", "cites", "paper"),
        ("paper", "has_topic", "field_of_study"),
    ]
    writes = g.relations[("author", "writes", "paper")]
    assert writes.indptr.tolist() == [0, 2, 2, 3, 4] and writes.indices.tolist() == [0, 1, 1, 2]
    cites = g.relations[("paper", "cites", "paper")]
    assert cites.indptr.tolist() == [0, 2, 3, 3, 3] and cites.indices.tolist() == [1, 2, 3]
    paper = g.nodes["paper"]
    assert paper.x is not None and paper.x[:, 0].tolist() == [0.5, 1.5, 2.5, 3.5]
    assert paper.y is not None and paper.y.tolist() == [3, 1, 0, 2]
    assert paper.attrs["year"].tolist() == [2015, 2017, 2018, 2019]
    assert paper.train_mask is not None and paper.train_mask.tolist() == [True, True, False, False]
    assert paper.test_mask is not None and np.flatnonzero(paper.test_mask).tolist() == [3]
    assert g.nodes["author"].x is None and g.nodes["author"].train_mask is None
    data = g.to_pyg()
    assert data["paper"].x.shape == (4, 2) and data["author"].num_nodes == 3


def test_ogb_mag_reverse_and_missing(mag_root: Path, tmp_path: Path) -> None:
    g = load_hetero("ogb:ogbn_mag", root=mag_root, reverse=True)
    rev = g.relations[("paper", "rev_writes", "author")]
    assert rev.indptr.tolist() == [0, 1, 3, 4] and rev.indices.tolist() == [0, 0, 2, 3]
    with pytest.raises(DatasetNotFoundError, match="ogbn_mag"):
        load_hetero("ogb:ogbn-mag", root=tmp_path / "nowhere")
    with pytest.raises(ValueError, match="load_hetero"):
        load("ogb:ogbn-mag", root=mag_root)


def test_the_kind_comes_from_the_files_not_the_name(mag_root: Path) -> None:
    from gnnsys.commands.train import add_parser, build_config
    from gnnsys.datasets import is_heterogeneous

    # the same files under another name: OGB's heterogeneous layout, so heterogeneous
    (mag_root / "ogbn_mag").rename(mag_root / "ogbn_mag_tiny")
    assert is_heterogeneous("ogb:ogbn-mag-tiny", root=mag_root)
    assert not is_heterogeneous("ogb:ogbn-arxiv", root=mag_root)  # not there: not decided here
    assert is_heterogeneous("synthetic:mag") and not is_heterogeneous("synthetic:sbm")
    g = load_hetero("ogb:ogbn-mag-tiny", root=mag_root)
    assert g.node_types == ["author", "field_of_study", "institution", "paper"]
    with pytest.raises(ValueError, match="heterogeneous.*load_hetero"):
        load("ogb:ogbn-mag-tiny", root=mag_root)
    import argparse

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["train", "ogb:ogbn-mag-tiny", "--root", str(mag_root)])
    assert build_config(args).node_types is not None  # gnnsys train runs it as heterogeneous
