from __future__ import annotations

import io
import logging
import pickle
from pathlib import Path

import numpy as np
import pytest

from gnnsys.datasets import load
from gnnsys.datasets.planetoid import RestrictedUnpickler, restricted_load

COUNTS = {  # nodes, directed edges, features, classes, train/val/test, unlabeled
    "cora": (2708, 10556, 1433, 7, 140, 500, 1000, 0),
    "citeseer": (3327, 9104, 3703, 6, 120, 500, 1000, 15),
    "pubmed": (19717, 88648, 500, 3, 60, 500, 1000, 0),
}


@pytest.mark.parametrize("variant", sorted(COUNTS))
def test_counts_and_public_split(shared_root: Path, variant: str) -> None:
    g = load(f"planetoid:{variant}", root=shared_root)
    n, e, f, c, tr, va, te, unlabeled = COUNTS[variant]
    assert (g.num_nodes, g.num_edges, g.num_features, g.num_classes) == (n, e, f, c)
    assert (int(g.train_mask.sum()), int(g.val_mask.sum()), int(g.test_mask.sum())) == (tr, va, te)
    assert g.train_mask[:tr].all() and g.val_mask[tr : tr + va].all()
    assert not (g.train_mask & g.test_mask).any() and not (g.val_mask & g.test_mask).any()
    assert int((g.y == -1).sum()) == unlabeled
    assert g.x is not None and g.x.dtype == np.float32
    assert not np.any(g.indices == g.dst_of_edges()), "self-loops must be dropped"


def test_cora_label_counts_match_readme(shared_root: Path) -> None:
    g = load("planetoid:cora", root=shared_root)
    assert np.bincount(g.y).tolist() == [351, 217, 418, 818, 426, 298, 180]


def test_citeseer_featureless_nodes_are_zero_and_unlabeled(shared_root: Path) -> None:
    g = load("planetoid:citeseer", root=shared_root)
    assert g.x is not None
    empty = ~g.x.any(axis=1)
    assert int(empty.sum()) == 15
    assert (g.y[empty] == -1).all()


def test_pubmed_warns_about_missing_features(
    shared_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="gnnsys.datasets.planetoid"):
        g = load("planetoid:pubmed", root=shared_root)
    assert "1060 of 19717 nodes have features" in caplog.text
    assert g.x is not None and int(g.x.any(axis=1).sum()) <= 1060
    assert g.x[g.test_mask].any(axis=1).mean() > 0.9


class _Evil:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        import os

        return (os.system, ("echo pwned",))


@pytest.mark.parametrize(
    "payload",
    [_Evil(), {"a": __import__("pathlib").PurePosixPath("/etc")}, np.float64],
    ids=["os.system", "pathlib", "numpy-float64-class"],
)
def test_restricted_unpickler_refuses_other_globals(payload: object) -> None:
    data = pickle.dumps(payload, protocol=2)
    with pytest.raises(pickle.UnpicklingError, match="refusing to load"):
        RestrictedUnpickler(io.BytesIO(data)).load()


def test_restricted_unpickler_admits_arrays_and_defaultdict(tmp_path: Path) -> None:
    import collections

    value = {"a": np.arange(3), "g": collections.defaultdict(list, {0: [1]})}
    path = tmp_path / "ok.pkl"
    path.write_bytes(pickle.dumps(value, protocol=4))
    out = restricted_load(path)
    assert out["a"].tolist() == [0, 1, 2] and out["g"][0] == [1]


def test_missing_planetoid_dir_says_where_it_looked(tmp_path: Path) -> None:
    from gnnsys.errors import DatasetNotFoundError

    with pytest.raises(DatasetNotFoundError) as err:
        load("planetoid:cora", root=tmp_path)
    assert str(tmp_path / "planetoid") in str(err.value)
    assert "--root" in str(err.value)


def test_missing_planetoid_file_names_it(tmp_path: Path) -> None:
    from gnnsys.errors import DatasetNotFoundError

    (tmp_path / "planetoid").mkdir()
    with pytest.raises(DatasetNotFoundError, match=r"ind\.cora\.graph is missing.*kimiyoung"):
        load("planetoid:cora", root=tmp_path)


def test_unknown_variant() -> None:
    with pytest.raises(ValueError, match="choose one of"):
        load("planetoid:arxiv")
