"""Starting or joining Ray, and what a run exposes on the network (docs/training.md, Security).

A Ray instance ``connect`` starts itself is private to this run: ``address="local"`` (never
someone else's running cluster), every listener on loopback (``127.0.0.1``; see
``_init_on_loopback`` for how, since ``_node_ip_address`` alone is overridden by Ray), no
dashboard HTTP port, no Ray Client server, and Ray's token authentication on (Ray >= 2.52
enables it for a new local instance unless ``RAY_AUTH_MODE`` says otherwise; ``connect`` warns
when it is off, or when the token file is readable by other users). Ray 2.60 still starts two
dashboard-named processes that cannot be turned off: ``dashboard.py`` (headless, only its usage
statistics module) and the raylet's ``ray::DashboardAgent``; with this install (no
``ray[default]``) both run ``--minimal`` and open no port.

Nothing is left behind when the driver dies, even by SIGKILL: ``connect`` starts a watchdog
(``watchdog.py``) that ends the session's processes within ~0.5 s, and before starting Ray it
ends the processes of an earlier gnnsys run whose driver died without one (logged as a warning
with their pids).

Joining a cluster (``--address``) uses that cluster's settings: its head decides interfaces,
dashboard and authentication, and a token-protected cluster needs the token here
(``RAY_AUTH_TOKEN`` or ``~/.ray/auth_token``); no watchdog is started (the processes are the
cluster's, not this run's).

``listening_sockets`` lists the TCP ports the driver and the Ray processes it started listen on
and their addresses (the test that nothing listens beyond loopback uses it).
"""

from __future__ import annotations

import logging
import math
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gnnsys.train.control import watchdog
from gnnsys.train.control.resources import Resources, trainer_cpus

if TYPE_CHECKING:
    from gnnsys.train.control.cluster_config import ClusterConfig

__all__ = ["ListeningSocket", "auth_mode", "connect", "listening_sockets"]

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class ListeningSocket:
    """One TCP socket a Ray process listens on."""

    pid: int
    process: str
    address: str
    port: int

    @property
    def loopback(self) -> bool:
        """Whether only this machine can reach it."""
        return self.address.startswith(("127.", "::ffff:127.")) or self.address == "::1"


def auth_mode() -> str:
    """Ray's authentication mode in this process (``token``, ``disabled`` or ``unknown``)."""
    import importlib

    raylet = importlib.import_module("ray._raylet")
    mode_of, modes = (
        getattr(raylet, n, None) for n in ("get_authentication_mode", "AuthenticationMode")
    )
    if mode_of is None or modes is None:  # a Ray before token authentication (< 2.52)
        return "unknown"
    return "token" if mode_of() == modes.TOKEN else "disabled"


def connect(cluster: ClusterConfig, *, object_store_memory: int | None = None) -> bool:
    """Connect to Ray; returns whether this call started it (and so must shut it down).

    Args:
        cluster: ``address`` to join, or ``None`` to start a private loopback-only instance
            sized for ``parts`` workers plus their shard owners, guarded by a watchdog (after
            ending what an earlier run with a dead driver left).
        object_store_memory: Bytes of a started instance's object store (Ray's default,
            30 % of the machine's memory, when ``None``); ignored when joining a cluster.
    """
    import ray

    if ray.is_initialized():
        return False
    if cluster.address is not None:
        ray.init(address=cluster.address, log_to_driver=False)
        log.info("joined Ray at %s (auth %s)", cluster.address, auth_mode())
        return True
    _end_stale_sessions()
    marker = watchdog.write_marker()
    owner_cpus = Resources().owner_cpus
    per_part = trainer_cpus(cluster.threads, cluster.parts, owner_cpus) + owner_cpus
    need = math.ceil(cluster.parts * per_part) + 1
    _init_on_loopback(
        address="local",  # a new private instance, never someone else's running cluster
        num_cpus=max(os.cpu_count() or 1, need),
        include_dashboard=False,
        object_store_memory=object_store_memory,
        _node_ip_address=LOOPBACK,
        log_to_driver=False,
    )
    _start_watchdog(marker)
    mode = auth_mode()
    if mode == "disabled":
        log.warning(
            "Ray token authentication is off (RAY_AUTH_MODE=%s): any local user can submit "
            "work to this run's Ray processes; unset RAY_AUTH_MODE to turn it on",
            os.environ.get("RAY_AUTH_MODE"),
        )
    else:
        _check_token_file()
        log.debug("started a private Ray instance (auth %s, dashboard off)", mode)
    return True


def _init_on_loopback(**init_kwargs: Any) -> None:
    """``ray.init`` with the node's address, and so every Ray listener, on loopback.

    Ray 2.60 binds its gRPC servers (GCS, raylet, core workers) and the runtime-env agent to the
    node's IP address, but ``ray.init`` replaces a loopback ``_node_ip_address`` by the host's
    routable address (``ray._private.worker.init`` calls ``services.resolve_ip_for_localhost``)
    unless ``ray._private.ray_constants.ENABLE_RAY_CLUSTER`` is false: Ray's own single-machine
    mode on macOS and Windows (``services.get_node_ip_address``; the env var
    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` sets it, but is read once, when ray is imported). So
    the switch is turned off for this call only. The processes Ray starts get the address as an
    argument, not from the switch. If a later Ray drops the switch, the run still starts and
    ``connect`` warns that its ports listen on the host's address.
    """
    import ray
    from ray._private import ray_constants

    saved = getattr(ray_constants, "ENABLE_RAY_CLUSTER", None)
    if saved is not None:
        ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        ray.init(**init_kwargs)
    finally:
        if saved is not None:
            ray_constants.ENABLE_RAY_CLUSTER = saved
    node_ip = _ray_node().node_ip_address
    if node_ip != LOOPBACK:
        log.warning(
            "Ray advertises and listens on %s, not loopback (this Ray version ignores the "
            "loopback setting); firewall its ports or join a cluster with --address",
            node_ip,
        )


# Popen objects of this process's watchdogs. Held for the life of the process on purpose: the
# pipe to a watchdog's stdin must stay open exactly as long as this driver lives (its EOF is the
# watchdog's signal), and a collected Popen would close it. One entry per private instance.
_WATCHDOGS: list[subprocess.Popen[bytes]] = []


def _ray_node() -> Any:
    """This process's Ray node (private API: no public one gives the session dir or bound IP)."""
    import ray

    node: Any = ray._private.worker._global_node
    return node


def _start_watchdog(marker: Path) -> None:
    """Start the process that ends this run's Ray processes if this driver dies (watchdog.py)."""
    session_dir = _ray_node().get_session_dir_path()
    cmd = [sys.executable, "-I", watchdog.__file__, "--driver", str(os.getpid())]
    cmd += ["--session-dir", session_dir, "--marker", str(marker)]
    with open(os.path.join(session_dir, "logs", "gnnsys_watchdog.err"), "ab") as err:
        _WATCHDOGS.append(
            subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,  # not in the terminal's process group: Ctrl-C spares it
            )  # fmt: skip
        )
    log.debug("watchdog %d guards Ray session %s", _WATCHDOGS[-1].pid, session_dir)


def _end_stale_sessions() -> None:
    """End the Ray processes of this user's earlier gnnsys runs whose driver died (watchdog.py)."""
    for stale in watchdog.find_stale():
        left = watchdog.end_stale(stale)
        log.warning(
            "ended %d Ray processes left by gnnsys run (driver pid %d, dead) in %s: pids %s%s",
            len(stale.pids),
            stale.driver_pid,
            stale.session_dir,
            " ".join(map(str, stale.pids)),
            f"; still alive, end them with `kill -9 {' '.join(map(str, left))}`" if left else "",
        )


def listening_sockets(root_pid: int | None = None) -> list[ListeningSocket]:
    """TCP sockets in LISTEN state of this process (a driver) and the Ray processes it started.

    Args:
        root_pid: The driver (default: this process, whose ``ray.init`` started gcs_server and
            raylet, which start the workers and agents). The driver listens too: its core
            worker's gRPC server.
    """
    import psutil

    root = psutil.Process(root_pid)
    out = []
    for proc in [root, *root.children(recursive=True)]:
        try:
            name = proc.name()[:40]
            conns = proc.net_connections(kind="tcp")
        except (psutil.AccessDenied, psutil.NoSuchProcess):
            continue
        for c in conns:
            if c.status == psutil.CONN_LISTEN:
                out.append(ListeningSocket(proc.pid, name, c.laddr.ip, c.laddr.port))
    return sorted(out, key=lambda s: (s.process, s.port))


def _check_token_file() -> None:
    """Warn when other users of this machine can read Ray's token file.

    That needs read permission on the file and search permission on every folder above it
    (Ray writes the file with mode 644; a 0700 home directory still protects it).
    """
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or os.path.expanduser("~/.ray/auth_token")
    try:
        mode = os.stat(path).st_mode
        dirs = [os.stat(d).st_mode for d in _ancestors(os.path.abspath(path))]
    except OSError:
        return
    for read, search in ((0o004, 0o001), (0o040, 0o010)):  # others, then group
        if mode & read and all(d & search for d in dirs):
            log.warning(
                "Ray's token file %s is readable by other users (mode %o); `chmod 600 %s`",
                path,
                mode & 0o777,
                path,
            )
            return


def _ancestors(path: str) -> list[str]:
    out = []
    while (parent := os.path.dirname(path)) != path:
        out.append(parent)
        path = parent
    return out
