"""What a run's own Ray instance exposes: loopback only, token auth on every port, no dashboard.

Runs ``gnnsys.train.control.cluster.connect`` in a fresh interpreter (the test session's Ray
instance is started differently), lists the listening sockets of the driver and the processes it
started, and knocks on each port from here *without* Ray's token: HTTP ports must answer 401,
gRPC ports must refuse Ray's calls with UNAUTHENTICATED (and answer them with the token, so the
refusal is the token's doing). grpcio is not a dependency, so the gRPC calls go through a minimal
HTTP/2 client below (``_grpc_call``): enough for one unary call with an empty request.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from gnnsys.train.control import watchdog

_PROBE = """
import json, sys
import ray
from gnnsys.train.control.cluster import auth_mode, connect, listening_sockets
from gnnsys.train.control.cluster_config import ClusterConfig
assert connect(ClusterConfig(parts=1))
ray.get(ray.remote(lambda: 1).remote())  # a worker exists
node = ray._private.worker._global_node
print(json.dumps({
    "auth": auth_mode(),
    "cluster_id": node.cluster_id.hex(),
    "node_ip": node.node_ip_address,
    "dashboard_url": ray.get_dashboard_url() if hasattr(ray, "get_dashboard_url") else None,
    "sockets": [[s.pid, s.process, s.address, s.port, s.loopback] for s in listening_sockets()],
}), flush=True)
sys.stdin.readline()  # the test probes the ports meanwhile
ray.shutdown()
"""

# Ray calls tried on every gRPC port, with an empty request; each port serves one of these
# services (the rest answer UNIMPLEMENTED). True: a read, also made with the token to show that
# the refusal is the token's doing; Pull is only made without it (an empty pull with the token
# could trip a check in the raylet).
_RAY_METHODS = {
    "/ray.rpc.NodeInfoGcsService/GetAllNodeInfo": True,  # gcs_server
    "/ray.rpc.InternalKVGcsService/InternalKVKeys": True,  # gcs_server
    "/ray.rpc.autoscaler.AutoscalerStateService/GetClusterStatus": True,  # gcs_server
    "/ray.rpc.syncer.RaySyncer/StartSync": False,  # gcs_server and raylet (a stream: no control)
    "/ray.rpc.NodeManagerService/GetSystemConfig": True,  # raylet node manager
    "/ray.rpc.ObjectManagerService/Pull": False,  # raylet object manager
    "/ray.rpc.CoreWorkerService/NumPendingTasks": True,  # driver and every worker
    "/ray.rpc.ReporterService/GetProfilingStats": True,  # dashboard agent, if it serves gRPC
}
# gRPC's own services, which Ray registers on its servers next to its own.
_GRPC_BUILTINS = (
    "/grpc.health.v1.Health/Check",
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
)
UNAUTHENTICATED, UNIMPLEMENTED = "16", "12"


@pytest.mark.ray
@pytest.mark.timeout(240)
def test_private_instance_is_loopback_only_and_refuses_callers_without_token() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _PROBE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=_env(),
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        found = json.loads(proc.stdout.readline())
        answers = {tuple(s[:4]): _knock(s[2], s[3], found["cluster_id"]) for s in found["sockets"]}
    finally:
        proc.stdin.write("\n")
        proc.stdin.close()
        assert proc.wait(timeout=120) == 0
    for (pid, name, address, port), answer in answers.items():  # -s shows what the docs record
        print(f"{name} (pid {pid}) {address}:{port}: {answer}")
    assert found["auth"] == "token"
    assert found["node_ip"] == "127.0.0.1"
    assert not found["dashboard_url"]
    sockets = found["sockets"]
    assert sockets, "no listening socket found (psutil could not see Ray's processes?)"
    names = {s[1] for s in sockets}
    assert {"gcs_server", "raylet", "ray::RuntimeEnvAgent"} <= names, names
    assert not [s for s in sockets if not s[4]], f"listening beyond loopback: {sockets}"
    assert not [s for s in sockets if "dashboard" in s[1].lower() or s[3] in (8265, 10001)]
    for key, answer in answers.items():
        if answer.http is not None:
            assert answer.http == 401, (key, answer)
        else:  # each port serves a Ray service, refuses it without the token, serves it with it
            assert answer.served, (key, answer)
            assert set(answer.served.values()) == {UNAUTHENTICATED}, (key, answer)
            assert set(answer.with_token.values()) <= {"0"}, (key, answer)
    assert sum(len(a.with_token) for a in answers.values()) >= 4  # the controls did run


@dataclass(frozen=True, slots=True)
class _Knock:
    """What one port answered without the token (gRPC statuses as numbers, by method)."""

    http: int | None
    """HTTP/1.1 status, or ``None`` when the port does not speak HTTP/1.1 (a gRPC server)."""
    without_token: dict[str, str]
    with_token: dict[str, str]
    builtins: dict[str, str]

    @property
    def served(self) -> dict[str, str]:
        """Ray methods this port serves (any answer but UNIMPLEMENTED), without the token."""
        return {m: s for m, s in self.without_token.items() if s != UNIMPLEMENTED}

    def __str__(self) -> str:
        if self.http is not None:
            return f"HTTP {self.http}"
        short = {m.rsplit("/", 1)[1]: s for m, s in self.served.items()}
        ok = {m.rsplit("/", 1)[1]: s for m, s in self.with_token.items()}
        gb = {m.split("/")[1].split(".")[-1]: s for m, s in self.builtins.items()}
        return f"gRPC without token {short}, with token {ok}, builtins {gb}"


def _knock(address: str, port: int, cluster_id: str) -> _Knock:
    host = "127.0.0.1" if address.startswith("::ffff:127.") else address
    status = _http_status(host, port)
    if status is not None:
        return _Knock(status, {}, {}, {})
    # the right cluster: only the token is missing. node_id: RaySyncer/StartSync looks it up
    # *before* checking the token, and a stream without it kills gcs_server or raylet (Ray
    # 2.60, ray_syncer_server.cc:30 "Check failed: iter != metadata.end()"; docs/training.md).
    cid = [("ray_cluster_id", cluster_id), ("node_id", "ab" * 28)]
    bare = {m: _grpc_call(host, port, m, cid) for m in _RAY_METHODS}
    token = [*cid, ("authorization", f"Bearer {_token()}")]
    with_token = {
        m: _grpc_call(host, port, m, token)
        for m, s in bare.items()
        if s == UNAUTHENTICATED and _RAY_METHODS[m]
    }
    builtins = {m: _grpc_call(host, port, m, cid) for m in _GRPC_BUILTINS}
    return _Knock(None, bare, with_token, builtins)


def _http_status(host: str, port: int) -> int | None:
    conn = http.client.HTTPConnection(host, port, timeout=5)
    try:
        conn.request("GET", "/")
        return conn.getresponse().status
    except (OSError, http.client.HTTPException):  # a gRPC server drops an HTTP/1.1 request
        return None
    finally:
        conn.close()


def _token() -> str:
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or os.path.expanduser("~/.ray/auth_token")
    return os.environ.get("RAY_AUTH_TOKEN") or Path(path).read_text().strip()


# ---- a minimal HTTP/2 client: one gRPC unary call, returns its grpc-status -------------------
# Frames (RFC 9113 4.1): 3-byte length, type, flags, 31-bit stream id. Header blocks (RFC 7541):
# sent as literals, read with the static and dynamic tables; gRPC's C core does not
# Huffman-encode the status, so none is decoded (a Huffman string reads as "?").
_DATA, _HEADERS, _RST, _SETTINGS, _PING, _GOAWAY, _CONT = 0, 1, 3, 4, 6, 7, 9
_END_STREAM, _ACK, _END_HEADERS, _PADDED, _PRIORITY = 1, 1, 4, 8, 0x20
_STATIC = (
    ":authority|:method GET|:method POST|:path /|:path /index.html|:scheme http|:scheme https|"
    ":status 200|:status 204|:status 206|:status 304|:status 400|:status 404|:status 500|"
    "accept-charset|accept-encoding gzip, deflate|accept-language|accept-ranges|accept|"
    "access-control-allow-origin|age|allow|authorization|cache-control|content-disposition|"
    "content-encoding|content-language|content-length|content-location|content-range|"
    "content-type|cookie|date|etag|expect|expires|from|host|if-match|if-modified-since|"
    "if-none-match|if-range|if-unmodified-since|last-modified|link|location|max-forwards|"
    "proxy-authenticate|proxy-authorization|range|referer|refresh|retry-after|server|"
    "set-cookie|strict-transport-security|transfer-encoding|user-agent|vary|via|www-authenticate"
).split("|")


def _grpc_call(host: str, port: int, method: str, metadata: list[tuple[str, str]]) -> str:
    """grpc-status of ``method`` called with an empty message, or why there is none."""
    headers = [(":method", "POST"), (":scheme", "http"), (":path", method)]
    headers += [(":authority", f"{host}:{port}"), ("content-type", "application/grpc")]
    headers += [("te", "trailers"), *metadata]
    block = b"".join(b"\x00" + _hstr(k) + _hstr(v) for k, v in headers)
    try:
        with socket.create_connection((host, port), timeout=5) as sock:
            sock.sendall(
                b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
                + _frame(_SETTINGS, 0, 0, b"")
                + _frame(_HEADERS, _END_HEADERS, 1, block)
                + _frame(_DATA, _END_STREAM, 1, b"\x00\x00\x00\x00\x00")  # empty message
            )
            return _read_status(sock)
    except OSError as err:
        return f"no answer ({type(err).__name__})"


def _read_status(sock: socket.socket) -> str:
    got: dict[str, str] = {}
    table: list[tuple[str, str]] = []
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        head = _recv(sock, 9)
        if len(head) < 9:
            break
        length, kind, flags = int.from_bytes(head[:3], "big"), head[3], head[4]
        stream = int.from_bytes(head[5:], "big") & 0x7FFFFFFF
        body = _recv(sock, length)
        if kind == _SETTINGS and not flags & _ACK:
            sock.sendall(_frame(_SETTINGS, _ACK, 0, b""))
        elif kind == _PING and not flags & _ACK:
            sock.sendall(_frame(_PING, _ACK, 0, body))
        elif kind in (_HEADERS, _CONT) and stream == 1:
            got.update(_hpack(_unpad(kind, flags, body), table))
        elif kind in (_RST, _GOAWAY):
            return got.get("grpc-status", f"{'reset' if kind == _RST else 'goaway'}")
        if stream == 1 and flags & _END_STREAM:
            break
    return got.get("grpc-status", f"no grpc-status ({got.get(':status')})")


def _recv(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n and (chunk := sock.recv(n - len(out))):
        out += chunk
    return out


def _frame(kind: int, flags: int, stream: int, body: bytes) -> bytes:
    return (
        struct.pack(">I", len(body))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + body
    )


def _unpad(kind: int, flags: int, body: bytes) -> bytes:
    if kind != _HEADERS:
        return body
    pad = body[0] if flags & _PADDED else 0
    start = (1 if flags & _PADDED else 0) + (5 if flags & _PRIORITY else 0)
    return body[start : len(body) - pad]


def _hstr(text: str) -> bytes:
    raw = text.encode()
    return _hint(len(raw), 7, 0) + raw


def _hint(n: int, bits: int, flags: int) -> bytes:
    cap = (1 << bits) - 1
    if n < cap:
        return bytes([flags | n])
    out, n = [flags | cap], n - cap
    while n >= 128:
        out, n = [*out, (n & 127) | 128], n >> 7
    return bytes([*out, n])


def _read_int(buf: bytes, i: int, bits: int) -> tuple[int, int]:
    cap = (1 << bits) - 1
    n, i, shift = buf[i] & cap, i + 1, 0
    if n < cap:
        return n, i
    while True:
        n, i, shift = n + ((buf[i] & 127) << shift), i + 1, shift + 7
        if not buf[i - 1] & 128:
            return n, i


def _read_str(buf: bytes, i: int) -> tuple[str, int]:
    huffman = buf[i] & 0x80
    n, i = _read_int(buf, i, 7)
    return ("?" if huffman else buf[i : i + n].decode()), i + n


def _entry(index: int, table: list[tuple[str, str]]) -> tuple[str, str]:
    if index <= len(_STATIC):
        name, _, value = _STATIC[index - 1].partition(" ")
        return name, value
    return table[index - len(_STATIC) - 1]


def _hpack(block: bytes, table: list[tuple[str, str]]) -> dict[str, str]:
    out, i = {}, 0
    while i < len(block):
        first = block[i]
        if first & 0x80:  # indexed field
            index, i = _read_int(block, i, 7)
            name, value = _entry(index, table)
        elif first & 0x20 and not first & 0x40:  # dynamic table size update
            _, i = _read_int(block, i, 5)
            continue
        else:  # literal: with incremental indexing (6-bit index), or without (4-bit)
            indexing = bool(first & 0x40)
            index, i = _read_int(block, i, 6 if indexing else 4)
            if index:
                name = _entry(index, table)[0]
            else:
                name, i = _read_str(block, i)
            value, i = _read_str(block, i)
            if indexing:
                table.insert(0, (name, value))
        out[name] = value
    return out


# ---- stale processes of an earlier run ----------------------------------------------------------


def test_stale_processes_of_a_dead_driver_are_reported_and_ended(tmp_path: Path) -> None:
    markers = tmp_path / "drivers"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])  # the "driver" of the earlier run
    dead_ps = psutil.Process(dead.pid)
    created = dead_ps.create_time()
    dead.wait()
    markers.mkdir()
    (markers / f"{dead.pid}-1.json").write_text(
        json.dumps({"pid": dead.pid, "create_time": created})
    )
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime(created + 1))
    session = tmp_path / "ray" / f"session_{stamp}_123456_{dead.pid}"
    fake_raylet = tmp_path / "ray" / "fake_raylet.py"  # a Ray program: a script under ray/
    fake_raylet.parent.mkdir()
    fake_raylet.write_text("import time\ntime.sleep(300)\n")
    orphan = subprocess.Popen(  # the session directory in its command line, as the raylet's
        [sys.executable, str(fake_raylet), f"--log_dir={session}/logs"], start_new_session=True
    )
    bystander = subprocess.Popen(  # not a Ray program: reading the session's log must survive
        [sys.executable, "-c", "import time; time.sleep(300)", f"{session}/logs/raylet.out"]
    )
    alive_driver = watchdog.write_marker(markers)  # this process: a live driver, never stale
    try:
        stale = watchdog.find_stale(markers)
        assert [(s.session_dir, s.driver_pid) for s in stale] == [(str(session), dead.pid)]
        assert orphan.pid in stale[0].pids
        assert watchdog.end_stale(stale[0]) == []
        assert orphan.wait(timeout=10) == -9
        assert bystander.poll() is None
        assert not (markers / f"{dead.pid}-1.json").exists()  # done with
        assert alive_driver.exists()
        assert watchdog.find_stale(markers) == []
    finally:
        for proc in (orphan, bystander):
            if proc.poll() is None:
                proc.kill()


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[3]))
    env.pop("RAY_AUTH_MODE", None)
    env.pop("RAY_ADDRESS", None)
    return env
