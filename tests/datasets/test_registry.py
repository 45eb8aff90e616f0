"""The registry, root resolution and the missing-dataset error."""

from __future__ import annotations

from pathlib import Path

import pytest

from gnnsys.datasets import DATASETS, KNOWN_NAMES, load
from gnnsys.datasets.base import candidate_roots, find_dir
from gnnsys.errors import DatasetNotFoundError


def test_every_known_name_has_a_registered_family() -> None:
    assert {name.split(":")[0] for name in KNOWN_NAMES} <= set(DATASETS)
    assert {"planetoid", "npz", "musae", "deezer", "ogb", "synthetic"} <= set(DATASETS)


@pytest.mark.parametrize("name", ["cora", "nope:cora", "planetoid:"])
def test_unknown_family_or_missing_variant(name: str) -> None:
    with pytest.raises(ValueError, match="family:variant"):
        load(name)


@pytest.mark.parametrize(
    ("name", "subdir"),
    [
        ("planetoid:cora", "planetoid"),
        ("npz:cora", "gnn_benchmark_npz"),
        ("musae:facebook", "musae_facebook"),
        ("deezer:hu", "deezer_hu"),
    ],
)
def test_missing_dataset_names_where_and_how(tmp_path: Path, name: str, subdir: str) -> None:
    with pytest.raises(DatasetNotFoundError) as err:
        load(name, root=tmp_path)
    message = str(err.value)
    assert str(tmp_path / subdir) in message
    assert "--root DIR" in message and "GNNSYS_DATA" in message
    assert isinstance(err.value, FileNotFoundError)  # the CLI reports it as a clean error


def test_env_root_comes_first_when_no_root_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GNNSYS_DATA", str(tmp_path))
    assert candidate_roots(None)[0] == tmp_path
    (tmp_path / "deezer_hu").mkdir()
    assert find_dir(None, "deezer_hu", "deezer:hu") == tmp_path / "deezer_hu"
    assert candidate_roots(tmp_path / "given") == [tmp_path / "given"]  # --root wins alone


def test_unknown_parameter_is_a_type_error(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="nope"):
        load("npz:cora", root=tmp_path, nope=1)
