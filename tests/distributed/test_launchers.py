"""The distributed examples run under their real launchers, on 2 ranks."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gnnsys.partitioners import partition
from gnnsys.store import write_partitions

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def store2(tiny_graph, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("launch") / "store"
    write_partitions(tiny_graph, partition(tiny_graph, "metis", 2, seed=0), root, num_hops=2)
    return root


@pytest.mark.timeout(240)
def test_torchrun_example_trains_on_two_ranks(store2: Path) -> None:
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
        "--master-port", str(_free_port()),
        str(ROOT / "examples" / "dist_train_torchrun.py"), "--store", str(store2),
        "--epochs", "10", "--batch-size", "32",
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=220)
    assert done.returncode == 0, done.stderr[-4000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [line["epoch"] for line in lines[:-1]] == list(range(10))  # rank 0 only prints
    final = lines[-1]["final"]
    assert final["test"]["acc"] > 0.5, final  # 4 SBM classes: chance is 0.25


def _ray_example():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "dist_train_ray", ROOT / "examples" / "dist_train_ray.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.ray
@pytest.mark.slow  # two Ray Train runs, ~57 s on 2 cores: with --all (torchrun's test runs in CI)
@pytest.mark.timeout(400)
def test_ray_train_restarts_a_killed_rank_and_ends_as_a_fault_free_run(
    ray_session, store2: Path, tmp_path: Path
) -> None:
    import argparse

    pytest.importorskip("ray.train.torch")
    example = _ray_example()
    base = {
        "store": str(store2), "storage": str(tmp_path), "workers": 2, "epochs": 3,
        "batch_size": 32, "fanouts": "4,3", "hidden": 32, "lr": 0.01, "seed": 0,
        "max_failures": 1, "kill_epoch": 1,
    }  # fmt: skip
    clean = example.run(argparse.Namespace(**base, name="clean", kill_rank=None))
    faulted = example.run(argparse.Namespace(**base, name="faulted", kill_rank=1))
    assert (tmp_path / "faulted.killed").exists()  # rank 1 did exit mid-epoch 1
    assert clean["epoch"] == faulted["epoch"] == 2
    assert clean["acc"] == faulted["acc"] and clean["f1"] == faulted["f1"]  # exact: integers
    # the same batches and the same all-reduced steps after the restart, in this run
    assert faulted["loss"] == pytest.approx(clean["loss"], rel=1e-6)
