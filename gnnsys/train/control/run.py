"""One training run end to end: connect Ray, prepare the store, run the coordinator, summarise.

This is the function behind ``gnnsys train``. A Ray instance it starts itself binds to loopback
with the dashboard off and is shut down on every exit path (error and Ctrl-C included); one it
joins (``--address``, or an already initialised driver) is left running.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from gnnsys.train.control.cluster_config import ClusterConfig
from gnnsys.train.control.coordinator import Coordinator
from gnnsys.train.control.failure import FailurePolicy
from gnnsys.train.control.prepare import prepare_store
from gnnsys.train.control.shards import assemble_graph, choose_topology
from gnnsys.train.worker import FaultSpec, WorkerSpec

if TYPE_CHECKING:
    from gnnsys.cache.codecs import CodecConfig
    from gnnsys.config import RunConfig
    from gnnsys.types import Graph

__all__ = [
    "TrainResult",
    "resolved_codec",
    "summary_of",
    "train",
    "worker_template",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TrainResult:
    """What a finished run produced.

    Attributes:
        history: One metrics object per epoch (as in ``metrics.jsonl``).
        summary: The ``summary.json`` object.
        run_dir: The run directory.
    """

    history: list[dict[str, Any]]
    summary: dict[str, Any]
    run_dir: Path


def _connect(cluster: ClusterConfig) -> bool:
    """Connect to Ray; returns whether this call started it (and so must shut it down)."""
    import ray

    if ray.is_initialized():
        return False
    if cluster.address is not None:
        ray.init(address=cluster.address, log_to_driver=False)
        return True
    need = int(cluster.parts * 1.5 + 1)
    ray.init(
        address="local",  # a new private instance, never someone else's running cluster
        num_cpus=max(os.cpu_count() or 1, need),
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        log_to_driver=False,
    )
    return True


def train(
    config: RunConfig, run_dir: str | os.PathLike[str], *, fault: FaultSpec | None = None
) -> TrainResult:
    """Train ``config`` and write ``metrics.jsonl``, ``checkpoint.pt`` and ``summary.json``.

    Args:
        config: The run.
        run_dir: Output directory (created).
        fault: Test-only fault injection.

    Raises:
        WorkerFailedError: Workers failed and the policy aborted (message: rank + traceback).
        ValueError: Bad configuration (e.g. a store with another number of parts).
    """
    import ray

    run_path = Path(run_dir)
    run_path.mkdir(parents=True, exist_ok=True)
    started = _connect(config.cluster)
    wall = time.perf_counter()
    try:
        store = prepare_store(
            config.data,
            num_parts=config.cluster.parts,
            num_hops=len(config.sampler.fanouts),
            seed=config.trainer.seed,
            run_dir=run_path,
            reuse=config.loop.resume,
        )
        graph = assemble_graph(store, with_data=True)
        topology = choose_topology(
            config.cluster.topology,
            num_nodes=graph.num_nodes,
            num_edges=graph.num_edges,
            num_parts=config.cluster.parts,
        )
        config = replace(config, codec=resolved_codec(config, graph))
        template = replace(worker_template(config, store, graph, topology), fault=fault)
        coordinator = Coordinator(
            config.loop,
            template=template,
            policy=FailurePolicy(config.failure),
            run_dir=run_path,
            eval_graph=graph,
        )
        history = coordinator.run()
        summary = summary_of(config, history, store, topology, coordinator.restarts)
        summary["wall_seconds"] = time.perf_counter() - wall
        (run_path / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        return TrainResult(history=history, summary=summary, run_dir=run_path)
    finally:
        if started:
            ray.shutdown()


def resolved_codec(config: RunConfig, graph: Graph) -> CodecConfig:
    """``config.codec`` with ``auto`` resolved from the whole feature matrix (else unchanged)."""
    if config.codec.name != "auto":
        return config.codec
    x_NF = torch.from_numpy(np.asarray(graph.x, dtype=np.float32))
    return config.codec.resolve(x_NF)


def worker_template(config: RunConfig, store: Path, graph: Graph, topology: str) -> WorkerSpec:
    """Rank 0's ``WorkerSpec`` (both executors derive every rank's spec from it)."""
    return WorkerSpec(
        rank=0,
        world_size=config.cluster.parts,
        store=str(store),
        topology=topology,
        trainer=config.trainer,
        sampler=config.sampler,
        model=config.model,
        num_features=graph.num_features,
        num_classes=graph.num_classes,
        deadline_s=config.loop.deadline_s,
        codec=config.codec,
        cache=config.cache,
        layer0=config.layer0,
    )


def summary_of(
    config: RunConfig, history: list[dict[str, Any]], store: Path, topology: str, restarts: int
) -> dict[str, Any]:
    """The ``summary.json`` object: final and best epochs, config, versions, partition."""
    from gnnsys import __version__
    from gnnsys.store import read_manifest

    manifest = read_manifest(store)
    resolved = replace(config, cluster=replace(config.cluster, topology=topology))
    return {
        "final": history[-1] if history else None,
        "best": max(history, key=lambda m: m["val_acc"]) if history else None,
        "config": resolved.to_json(),
        "versions": {
            "gnnsys": __version__,
            "torch": torch.__version__,
            "ray": _ray_version(),
            "python": platform.python_version(),
        },
        "partition": {
            "store": str(store),
            "dataset": manifest.dataset,
            "fingerprint": manifest.fingerprint,
            "strategy": manifest.strategy,
            "num_parts": manifest.num_parts,
            "num_hops": manifest.num_hops,
        },
        "restarts": restarts,
    }


def _ray_version() -> str:
    import ray

    return str(ray.__version__)
