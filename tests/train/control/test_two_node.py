"""A real two-node Ray cluster on loopback: ``gnnsys train --address`` runs across both nodes.

Each node is a ``ray start --block`` child in its own session; teardown signals exactly those
process groups (never a machine-wide ``ray stop``, which would also stop other Ray instances).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# A private cluster without token auth: the token file in ~/.ray is shared by every Ray user of
# this machine and may be regenerated under us; the cluster is torn down when the test ends.
_ENV = {**os.environ, "RAY_AUTH_MODE": "disabled"}


def _ray_start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    ray_bin = shutil.which("ray", path=str(Path(sys.executable).parent)) or "ray"
    cmd = [ray_bin, "start", "--block", "--node-ip-address", "127.0.0.1", "--disable-usage-stats"]
    with open(log, "wb") as fh:
        return subprocess.Popen(
            cmd + args, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True, env=_ENV
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _wait_for_nodes(address: str, count: int, timeout_s: float) -> None:
    code = (
        "import ray, sys; ray.init(address=sys.argv[1], log_to_driver=False); "
        "print(sum(n['Alive'] for n in ray.nodes()))"
    )
    deadline = time.monotonic() + timeout_s
    out = None
    while time.monotonic() < deadline:
        out = subprocess.run(
            [sys.executable, "-c", code, address], capture_output=True, text=True, env=_ENV
        )
        if out.returncode == 0 and out.stdout.strip().splitlines()[-1:] == [str(count)]:
            return
        time.sleep(2)
    detail = "" if out is None else f"{out.stdout[-500:]} {out.stderr[-1500:]}"
    raise TimeoutError(f"{address} did not reach {count} nodes in {timeout_s}s: {detail}")


@pytest.mark.timeout(420)
def test_train_across_two_nodes(tmp_path: Path) -> None:
    port = _free_port()
    address = f"127.0.0.1:{port}"
    head = _ray_start(
        ["--head", f"--port={port}", "--num-cpus=2", "--include-dashboard=false"],
        tmp_path / "head.log",
    )
    nodes = [head]
    try:
        _wait_for_nodes(address, 1, 120)
        nodes.append(
            _ray_start(
                [f"--address={address}", "--num-cpus=2", '--resources={"second_node": 1}'],
                tmp_path / "worker.log",
            )
        )
        _wait_for_nodes(address, 2, 120)
        cmd = [
            sys.executable, "-m", "gnnsys", "train", "synthetic:sbm", "--num-nodes", "1000",
            "--parts", "2", "--partitioner", "random", "--fanouts", "5,5", "--hidden", "16",
            "--batch-size", "32", "--epochs", "2", "--address", address,
            "--topology", "partitioned", "--out", str(tmp_path / "run"), "--no-progress",
        ]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=_ENV)
        assert proc.returncode == 0, proc.stderr[-3000:]
        history = [
            json.loads(line)
            for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
        ]
        assert [m["epoch"] for m in history] == [0, 1]
        assert history[0]["num_ray_nodes"] == 2  # the two trainers ran on different nodes
    finally:
        for proc in reversed(nodes):
            _stop(proc)
