from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gnnsys.datasets import load

COUNTS = {  # nodes, directed edges (symmetrized, no loops), features, classes
    "cora": (2708, 10556, 1433, 7),
    "citeseer": (3312, 9072, 3703, 6),
    "cora_ml": (2995, 16316, 2879, 7),
}


@pytest.mark.parametrize("variant", sorted(COUNTS))
def test_counts(shared_root: Path, variant: str) -> None:
    g = load(f"npz:{variant}", root=shared_root)
    assert (g.num_nodes, g.num_edges, g.num_features, g.num_classes) == COUNTS[variant]
    assert g.x is not None and g.x.dtype == np.float32
    assert not np.any(g.indices == g.dst_of_edges())


@pytest.mark.parametrize("variant", sorted(COUNTS))
def test_seeded_per_class_split(shared_root: Path, variant: str) -> None:
    g = load(f"npz:{variant}", root=shared_root)
    c = COUNTS[variant][3]
    assert int(g.train_mask.sum()) == 20 * c
    assert np.bincount(g.y[g.train_mask], minlength=c).tolist() == [20] * c
    assert (int(g.val_mask.sum()), int(g.test_mask.sum())) == (500, 1000)
    assert not (g.train_mask & g.val_mask).any() and not (g.val_mask & g.test_mask).any()
    again = load(f"npz:{variant}", root=shared_root)
    other = load(f"npz:{variant}", root=shared_root, seed=1)
    assert np.array_equal(g.train_mask, again.train_mask)
    assert not np.array_equal(g.train_mask, other.train_mask)


def test_cora_ml_never_unpickles(shared_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_load = np.load

    def strict_load(*args: object, **kwargs: object) -> object:
        assert kwargs.get("allow_pickle") is False
        return real_load(*args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(np, "load", strict_load)
    assert load("npz:cora_ml", root=shared_root).num_nodes == 2995


def test_missing_file_message(tmp_path: Path) -> None:
    from gnnsys.errors import DatasetNotFoundError

    (tmp_path / "ppnp_npz").mkdir()
    with pytest.raises(DatasetNotFoundError, match=r"cora_ml\.npz is missing.*ppnp"):
        load("npz:cora_ml", root=tmp_path)
