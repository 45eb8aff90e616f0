"""gnnsys.distributed's metrics on 2 gloo ranks equal gnnsys train's on all the nodes at once."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gnnsys.distributed import classification_metrics, roc_auc
from gnnsys.train import metrics as exact

ROOT = Path(__file__).resolve().parents[2]
_RANK = """
import json, sys
import numpy as np, torch.distributed as dist
from gnnsys.distributed import all_reduce_confusion, classification_metrics, roc_auc
dist.init_process_group("gloo")
rank = dist.get_rank()
data = np.load(sys.argv[1], allow_pickle=False)
mine = data["rank"] == rank
out = classification_metrics(data["y"][mine], data["pred"][mine], 5)
out["auc"] = roc_auc(data["score"][mine], data["label"][mine])
out["confusion"] = all_reduce_confusion(data["y"][mine], data["pred"][mine], 5).tolist()
json.dump(out, open(sys.argv[2] % rank, "w"))
dist.destroy_process_group()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.timeout(120)
def test_two_ranks_give_the_single_process_metrics_exactly(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    n = 301  # uneven shares: rank 0 holds about a third
    data = {
        "rank": (rng.random(n) < 0.65).astype(np.int64),
        "y": rng.integers(0, 5, n),
        "pred": rng.integers(0, 5, n),
        "score": rng.random(n).round(2),  # ties: they share their average rank
        "label": rng.integers(0, 2, n),
    }
    np.savez(tmp_path / "data.npz", **data)
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    env["WORLD_SIZE"] = "2"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _RANK, str(tmp_path / "data.npz"), str(tmp_path / "r%d.json")],
            cwd=ROOT,
            env={**env, "RANK": str(r)},
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for r in range(2)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=100)
        assert proc.returncode == 0, err[-3000:]
    confusion = exact.confusion_matrix(data["y"], data["pred"], 5)
    want = {
        "acc": exact.accuracy(confusion),
        "f1": exact.macro_f1(confusion),
        "auc": exact.roc_auc(data["score"], data["label"]),
        "confusion": confusion.tolist(),
    }
    for r in range(2):  # the same integers, so the same floats, on every rank
        assert json.loads((tmp_path / f"r{r}.json").read_text()) == want


def test_without_a_process_group_the_error_says_how_to_start_one() -> None:
    with pytest.raises(RuntimeError, match="init_process_group"):
        classification_metrics(np.zeros(3), np.zeros(3), 2)
    with pytest.raises(RuntimeError, match="torchrun"):
        roc_auc(np.zeros(3), np.zeros(3))


_LATE = """
import sys, time
import numpy as np, torch.distributed as dist
from gnnsys.distributed import classification_metrics
dist.init_process_group("gloo")
if dist.get_rank() == 1:
    time.sleep(3)  # never calls the collective in time
    sys.exit(0)
try:
    classification_metrics(np.zeros(4), np.zeros(4), 2, timeout_s=1.0)
except TimeoutError as err:
    print("TimeoutError:", err)
    sys.exit(3)
"""


@pytest.mark.timeout(120)
def test_a_rank_that_never_arrives_times_the_collective_out(tmp_path: Path) -> None:
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    env["WORLD_SIZE"] = "2"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _LATE],
            cwd=ROOT,
            env={**env, "RANK": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for r in range(2)
    ]
    out, err = procs[0].communicate(timeout=100)
    procs[1].communicate(timeout=100)
    assert procs[0].returncode == 3, err[-3000:]
    assert "all_reduce(confusion) did not complete within 1 s" in out
