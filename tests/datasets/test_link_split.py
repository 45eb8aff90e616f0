"""Held-out edge splits: disjoint, complete, seeded, and the OGB link layout reader."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
import torch

from gnnsys.datasets import LinkSplitConfig, load_link_split
from gnnsys.datasets.link_split import edge_split, undirected_pairs
from gnnsys.datasets.synthetic import sbm
from gnnsys.types import Graph


@pytest.fixture(scope="module")
def graph() -> Graph:
    return sbm(num_nodes=400, num_classes=4, avg_degree=8, num_features=6, seed=1)


def _keys(pairs_2K: np.ndarray, n: int) -> set[int]:
    lo, hi = np.minimum(pairs_2K[0], pairs_2K[1]), np.maximum(pairs_2K[0], pairs_2K[1])
    return set((lo * n + hi).tolist())


def test_split_is_disjoint_complete_and_removes_held_out_edges(graph: Graph) -> None:
    split = edge_split(graph, LinkSplitConfig(val=0.1, test=0.2, num_neg=7, seed=3))
    n = graph.num_nodes
    train, val, test = (_keys(a, n) for a in (split.train_2E, split.val_2K, split.test_2K))
    assert not (train & val) and not (train & test) and not (val & test)
    assert train | val | test == _keys(undirected_pairs(graph), n)
    total = len(train | val | test)
    assert (len(val), len(test)) == (int(0.1 * total), int(0.2 * total))
    # the training graph has exactly the train links, in both directions, and no loops
    g = split.graph
    dst, src = g.dst_of_edges(), np.asarray(g.indices, dtype=np.int64)
    assert _keys(np.stack([src, dst]), n) == train
    assert g.num_edges == 2 * len(train) and not np.any(src == dst)
    assert split.val_neg_KQ.shape == (len(val), 7) and split.test_neg_KQ.shape == (len(test), 7)
    assert g.x is graph.x


def test_split_is_seeded(graph: Graph) -> None:
    a = edge_split(graph, LinkSplitConfig(seed=5, num_neg=3))
    b = edge_split(graph, LinkSplitConfig(seed=5, num_neg=3))
    c = edge_split(graph, LinkSplitConfig(seed=6, num_neg=3))
    for name in ("train_2E", "val_2K", "val_neg_KQ", "test_2K", "test_neg_KQ"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert not np.array_equal(a.val_2K, c.val_2K)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"val": -0.1}, "--val-edges"),
        ({"test": 1.0}, "--test-edges"),
        ({"val": 0.5, "test": 0.5}, "no training"),
        ({"num_neg": 0}, "--eval-negatives"),
    ],
)
def test_split_config_refuses_bad_values(kw: dict[str, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        LinkSplitConfig(**kw)  # type: ignore[arg-type]


def test_split_of_a_tiny_graph_says_so() -> None:
    tiny = Graph.from_edge_index(np.array([[0, 1], [1, 2]]), 3, symmetric=True)
    with pytest.raises(ValueError, match="hold out no link"):
        edge_split(tiny, LinkSplitConfig(val=0.1, test=0.1))


# ---- the OGB link layout ------------------------------------------------------------------------
def _csv_gz(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        f.write("".join(line + "\n" for line in lines))


def _ogbl(root: Path, name: str, per_link_negatives: bool) -> None:
    base = root / name
    edges = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (0, 5)]
    _csv_gz(base / "raw" / "edge.csv.gz", [f"{a},{b}" for a, b in edges])
    _csv_gz(base / "raw" / "num-node-list.csv.gz", ["6"])
    _csv_gz(base / "raw" / "node-feat.csv.gz", [f"{i},{2 * i}" for i in range(6)])
    split = base / "split" / "time"
    split.mkdir(parents=True)
    if per_link_negatives:  # ogbl-citation2's layout
        torch.save(
            {"source_node": torch.tensor([0, 1, 2, 3]), "target_node": torch.tensor([1, 2, 3, 4])},
            split / "train.pt",
        )
        for f, (s, t) in {"valid.pt": (4, 5), "test.pt": (0, 5)}.items():
            neg = torch.tensor([[2, 3, 1]])
            torch.save(
                {
                    "source_node": torch.tensor([s]),
                    "target_node": torch.tensor([t]),
                    "target_node_neg": neg,
                },
                split / f,
            )
    else:  # ogbl-collab's layout
        torch.save(
            {"edge": torch.tensor([[0, 1], [1, 2], [2, 3], [3, 4], [1, 0]])}, split / "train.pt"
        )
        for f, pair in {"valid.pt": [4, 5], "test.pt": [0, 5]}.items():
            torch.save(
                {"edge": torch.tensor([pair]), "edge_neg": torch.tensor([[0, 3], [1, 4]])},
                split / f,
            )


@pytest.mark.parametrize("per_link", [True, False])
def test_ogb_link_layout(tmp_path: Path, per_link: bool) -> None:
    _ogbl(tmp_path, "ogbl_tiny", per_link)
    split = load_link_split("ogb:ogbl-tiny", tmp_path, config=LinkSplitConfig(num_neg=4, seed=0))
    assert split.graph.num_nodes == 6 and split.graph.x is not None
    assert split.graph.x[:, 1].tolist() == [0, 2, 4, 6, 8, 10]
    assert sorted(map(tuple, split.train_2E.T.tolist())) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    assert split.graph.num_edges == 8  # train links only, both directions (held-out ones absent)
    assert split.val_2K.tolist() == [[4], [5]] and split.test_2K.tolist() == [[0], [5]]
    if per_link:
        assert split.val_neg_KQ.tolist() == [[2, 3, 1]]
    else:  # shared edge_neg: seeded per-link negatives instead
        assert split.val_neg_KQ.shape == (1, 4)


def test_ogb_link_refuses_a_pickle_that_is_not_tensors(tmp_path: Path) -> None:
    from gnnsys.errors import DatasetFileError

    _ogbl(tmp_path, "ogbl_bad", True)
    (tmp_path / "ogbl_bad" / "split" / "time" / "valid.pt").write_bytes(b"not a torch file")
    with pytest.raises(DatasetFileError, match="valid.pt"):
        load_link_split("ogb:ogbl-bad", tmp_path, config=LinkSplitConfig())
