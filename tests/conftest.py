"""Shared fixtures: small synthetic graphs and one Ray instance per test session.

Without a GPU, Triton kernels run in its interpreter (``TRITON_INTERPRET=1``). Triton reads the
variable when it is first imported, and some test modules import it indirectly (PyG does when
Triton is installed) before the kernel tests are collected, so it is set here, first; an
explicit value (e.g. ``0`` in the GPU check) is left alone.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import torch

if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

from gnnsys.datasets.synthetic import sbm  # noqa: E402  (after TRITON_INTERPRET is set)
from gnnsys.types import Graph  # noqa: E402

DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]
"""Devices the device-parametrised tests run on (PyG's ``withCUDA``): CPU everywhere, CUDA
where torch sees a GPU (the GPU check runs them there)."""


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> torch.device:
    """The step's device of a device-parametrised test."""
    return torch.device(str(request.param))


@pytest.fixture(scope="session")
def tiny_graph() -> Graph:
    """A 1000-node SBM graph with 16 features and 4 classes."""
    return sbm(num_nodes=1000, num_classes=4, avg_degree=8, num_features=16, seed=0)


@pytest.fixture(scope="session")
def ray_session() -> Iterator[Any]:
    """One local Ray instance for the whole test session (loopback, no dashboard).

    Logical CPUs exceed the 2 physical cores so 4 workers plus owners can be scheduled.
    """
    ray = pytest.importorskip("ray")
    ray.init(
        address="local",  # never join another user's running cluster on this machine
        num_cpus=16,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        log_to_driver=False,
        object_store_memory=512 * 1024 * 1024,
    )
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def _store_cache(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Any, dict[str, tuple[Any, int]]]:
    """Where this session keeps the stores ``prepare_store``'s child wrote, and each (its copy,
    its peak RSS) by what was asked of it."""
    return tmp_path_factory.mktemp("stores"), {}


@pytest.fixture
def shared_stores(
    _store_cache: tuple[Any, dict[str, tuple[Any, int]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs of a test that uses this share the partition stores of earlier identical asks.

    A run that partitions its dataset (``train`` / ``train_local`` without ``--store``) spawns a
    child that imports gnnsys and writes ``run_dir/store``: about 2 s, most of a small test
    run. With this fixture the first ask of each (writer, data settings, parts, hops, seed)
    runs that child as usual; later ones copy its store (the same files, byte for byte) and
    report its peak. Modules that test partitioning and its failures do not use it.
    """
    import shutil

    from gnnsys.train.control import prepare

    real = prepare._in_child
    root, stores = _store_cache

    def cached(write: Any, spec: Any, *args: Any) -> int:
        target = args[-1]
        key = repr((write.__qualname__, spec, args[:-1]))
        if key not in stores:
            peak = real(write, spec, *args)
            saved = root / f"s{len(stores)}"
            shutil.copytree(target, saved)
            stores[key] = (saved, peak)
            return int(peak)
        saved, peak = stores[key]
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(saved, target)
        return int(peak)

    monkeypatch.setattr(prepare, "_in_child", cached)


COLLECTED = pytest.StashKey[tuple[bool, set[str]]]()
"""In ``config.stash``: whether this session collected all of ``tests/`` (no narrower path on
the command line), and the test files (relative to the repository) that gave an item, before
any ``-m``/``-k`` deselection. ``tests/test_collection.py`` reads it."""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Note every collected item's file, before the marker and keyword filters deselect any."""
    root = config.rootpath.resolve()
    tests = root / "tests"
    args = [a.split("::", 1)[0] for a in config.args] or [str(tests)]
    whole = all((root / a).resolve() in (tests, root) for a in args)
    files = {item.path.resolve().relative_to(root).as_posix() for item in items}
    config.stash[COLLECTED] = (whole, files)
