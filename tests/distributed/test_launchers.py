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
