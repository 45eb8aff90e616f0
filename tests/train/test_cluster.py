"""What a run's own Ray instance exposes: token auth on, dashboard off, which ports it listens on.

Runs ``gnnsys.train.control.cluster.connect`` in a fresh interpreter (the test session's Ray
instance is started differently), then lists the listening sockets of the processes it started.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.ray

_PROBE = """
import json
import ray
from gnnsys.train.control.cluster import auth_mode, connect, listening_sockets
from gnnsys.train.control.cluster_config import ClusterConfig
assert connect(ClusterConfig(parts=1))
ray.get(ray.remote(lambda: 1).remote())  # a worker exists
import urllib.error, urllib.request
agent = [s for s in listening_sockets() if "RuntimeEnvAgent" in s.process]
status = None
for s in agent:  # an HTTP request without the token, from this machine's outside address
    try:
        status = urllib.request.urlopen(f"http://{s.address}:{s.port}/", timeout=5).status
    except urllib.error.HTTPError as err:
        status = err.code
print(json.dumps({
    "agent_status": status,
    "auth": auth_mode(),
    "dashboard_url": ray.get_dashboard_url() if hasattr(ray, "get_dashboard_url") else None,
    "sockets": [[s.process, s.address, s.port, s.loopback] for s in listening_sockets()],
}))
ray.shutdown()
"""


@pytest.mark.timeout(180)
def test_private_instance_has_token_auth_and_no_dashboard(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    env.pop("RAY_AUTH_MODE", None)
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env, timeout=170
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["auth"] == "token"
    assert not found["dashboard_url"]
    sockets = found["sockets"]
    assert sockets, "no listening socket found (psutil could not see Ray's processes?)"
    names = " ".join(s[0] for s in sockets)
    assert "dashboard" not in names.lower()
    ports = {s[2] for s in sockets}
    assert 8265 not in ports and 10001 not in ports  # dashboard HTTP, Ray Client server
    if found["agent_status"] is not None:  # the runtime-env agent refuses a request without token
        assert found["agent_status"] == 401, found
    print("listening:", sockets)  # -s shows what docs/training.md records
