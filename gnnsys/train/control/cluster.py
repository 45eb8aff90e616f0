"""Starting or joining Ray, and what a run exposes on the network (docs/training.md, Security).

A Ray instance ``connect`` starts itself is private to this run: ``address="local"`` (never
someone else's running cluster), advertised on loopback (``127.0.0.1``), the dashboard off (no
HTTP port, no dashboard agent), no Ray Client server, and Ray's token authentication on (Ray >=
2.52 enables it for a new local instance unless ``RAY_AUTH_MODE`` says otherwise; ``connect``
warns when it is off, or when the token file is readable by other users). Measured with Ray
2.60: the GCS, raylet and worker gRPC servers still *listen on every interface* (``::``) and the
runtime-env agent on the host's address; Ray has no option to bind them to loopback, so the
token is what keeps other machines out.

Joining a cluster (``--address``) uses that cluster's settings: its head decides interfaces,
dashboard and authentication, and a token-protected cluster needs the token here
(``RAY_AUTH_TOKEN`` or ``~/.ray/auth_token``).

``listening_sockets`` lists the TCP ports the Ray processes of this machine listen on and their
addresses (the test that nothing listens beyond loopback uses it).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

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
        return self.address.startswith("127.") or self.address in ("::1", "localhost")


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


def connect(cluster: ClusterConfig) -> bool:
    """Connect to Ray; returns whether this call started it (and so must shut it down).

    Args:
        cluster: ``address`` to join, or ``None`` to start a private loopback-only instance
            sized for ``parts`` workers plus their shard owners.
    """
    import ray

    if ray.is_initialized():
        return False
    if cluster.address is not None:
        ray.init(address=cluster.address, log_to_driver=False)
        log.info("joined Ray at %s (auth %s)", cluster.address, auth_mode())
        return True
    need = int(cluster.parts * 1.5 + 1)
    ray.init(
        address="local",  # a new private instance, never someone else's running cluster
        num_cpus=max(os.cpu_count() or 1, need),
        include_dashboard=False,
        _node_ip_address=LOOPBACK,
        log_to_driver=False,
    )
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


def listening_sockets(root_pid: int | None = None) -> list[ListeningSocket]:
    """TCP sockets in LISTEN state of the Ray processes this process started.

    Args:
        root_pid: Whose descendants to inspect (default: this process, whose ``ray.init``
            started gcs_server and raylet, which start the workers and agents).
    """
    import psutil

    root = psutil.Process(root_pid)
    out = []
    for proc in root.children(recursive=True):
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
