"""One training run end to end: connect Ray, prepare the store, run the coordinator, summarise.

``train`` is the function behind ``gnnsys train`` (Ray executor); ``train_local`` runs the same
coordinator over the in-process executor (``gnnsys bench comm``). Neither holds the graph: a
new store is partitioned in a child process, and the driver reads only the manifest, the label
files and (for ``--codec auto``) one chunk of feature rows at a time. A Ray instance ``train``
starts itself (loopback address, dashboard off, token auth; see ``control/cluster.py``) is shut
down on every exit path (error and Ctrl-C included); one it joins (``--address``, or an already
initialised driver) is left running.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from gnnsys.store.info import StoreInfo, store_info
from gnnsys.train.control.checkpoint import (
    check_resume,
    identity_of,
    store_identity,
    write_identity,
)
from gnnsys.train.control.cluster import connect
from gnnsys.train.control.cluster_config import ClusterConfig
from gnnsys.train.control.coordinator import Coordinator
from gnnsys.train.control.failure import FailurePolicy
from gnnsys.train.control.group import WorkerGroup
from gnnsys.train.control.local_group import LocalWorkerGroup
from gnnsys.train.control.prepare import (
    PreparedStore,
    feature_chunks,
    prepare_store,
    store_has_links,
)
from gnnsys.train.control.ray_group import RayWorkerGroup
from gnnsys.train.control.recorder import Recorder
from gnnsys.train.control.resources import trainer_cpus
from gnnsys.train.device import DevicePlan, plan_devices
from gnnsys.train.rank import RankLayout
from gnnsys.train.topology import choose_topology
from gnnsys.train.worker import FaultSpec, WorkerSpec

if TYPE_CHECKING:
    from gnnsys.cache.codecs import CodecConfig
    from gnnsys.config import RunConfig

__all__ = [
    "GroupPlan",
    "TrainResult",
    "resolve",
    "resolved_codec",
    "summary_of",
    "train",
    "train_local",
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
    """Connect to Ray; returns whether this call started it (see ``control/cluster.py``)."""
    return connect(cluster)


def train(
    config: RunConfig,
    run_dir: str | os.PathLike[str],
    *,
    allow_change: Iterable[str] = (),
    fault: FaultSpec | None = None,
) -> TrainResult:
    """Train ``config`` on Ray; writes ``metrics.jsonl``, checkpoints and ``summary.json``.

    Args:
        config: The run.
        run_dir: Output directory (created).
        allow_change: With ``config.loop.resume``: dotted identity fields (``trainer.lr``,
            ``sampler.fanouts``, ...) that may differ from the checkpoint's run; every other
            difference is refused, as by ``gnnsys train --resume --allow-change``.
        fault: Test-only fault injection.

    Raises:
        WorkerFailedError: Workers failed and the policy aborted (message: rank + traceback).
        ValueError: Bad configuration (e.g. a store with another number of parts, or an
            ``allow_change`` name that is not a field).
        CheckpointError: A resume of another run (``allow_change`` does not cover it) or of
            corrupt checkpoints only.
    """
    import ray

    run_path = Path(run_dir)
    run_path.mkdir(parents=True, exist_ok=True)
    prepared = _prepare(config, run_path, allow_change)  # before Ray: bad data fails first
    started = _connect(config.cluster)
    try:
        return _run(config, run_path, prepared, executor="ray", fault=fault)
    finally:
        if started:
            ray.shutdown()


def train_local(
    config: RunConfig,
    run_dir: str | os.PathLike[str],
    *,
    traffic_only: bool = False,
    threads: int | None = None,
    allow_change: Iterable[str] = (),
    fault: FaultSpec | None = None,
) -> TrainResult:
    """Train ``config`` in this process (ranks as threads); same files as :func:`train`.

    The topology is always ``partitioned`` (every remote row and neighbor list goes through an
    owner and the ledger). ``config.cluster.address`` is ignored; nothing starts Ray.

    Args:
        config: The run.
        run_dir: Output directory (created).
        traffic_only: Replay every epoch's sampling and fetching without the model
            (``Trainer.replay_epoch``): the same traffic and cache counters, no evaluation.
        threads: torch intra-op threads of this process while the ranks run; ``None``:
            ``config.cluster.threads``, else 1.
        allow_change: As for :func:`train`.
        fault: Test-only fault injection (``raise`` only: an ``exit`` would end this process).
    """
    run_path = Path(run_dir)
    run_path.mkdir(parents=True, exist_ok=True)
    if traffic_only:
        config = replace(config, eval=replace(config.eval, every=0))
    prepared = _prepare(config, run_path, allow_change)
    return _run(
        config,
        run_path,
        prepared,
        executor="local",
        fault=fault,
        replay=traffic_only,
        threads=threads,
    )


def _prepare(config: RunConfig, run_path: Path, allow_change: Iterable[str] = ()) -> PreparedStore:
    """The store of the run (partitioned in a child process when none is given), checked.

    The run's identity is checked against the checkpoint it resumes, then written to
    ``run.json``.

    Raises:
        ValueError: A link task on a store without link files (or the reverse).
        CheckpointError: See :func:`train`.
    """
    prepared = prepare_store(
        config.data,
        num_parts=config.cluster.parts,
        num_hops=len(config.sampler.fanouts),
        seed=config.trainer.seed,
        run_dir=run_path,
        reuse=config.loop.resume,
        hetero=config.node_types is not None,
    )
    _check_task(config, prepared.path)
    _check_identity(config, run_path, prepared.path, frozenset(allow_change))
    return prepared


def _check_identity(
    config: RunConfig, run_path: Path, store: Path, allowed: frozenset[str]
) -> None:
    """The pre-flight's identity and resume check, for Python callers too.

    The CLI ran it already, before partitioning; repeating it costs a manifest read and adds
    the store's fields when the pre-flight had no store yet.
    """
    from gnnsys.store import read_store_manifest

    manifest = read_store_manifest(store)
    identity = identity_of(config.to_json(), store_identity(manifest))
    unknown = sorted(allowed - set(identity.as_dict()))
    if unknown:
        raise ValueError(
            f"allow_change names {unknown}, not fields of this run; use dotted names such as "
            "trainer.lr, loop.epochs, sampler.fanouts"
        )
    if config.loop.resume:
        for notice in check_resume(run_path, identity, allowed):
            log.info("%s", notice)
    write_identity(run_path, identity)
    write_settings(config, run_path)


SETTINGS_NAME = "config.toml"
"""``RUN_DIR/config.toml``: the run's settings, read back by ``gnnsys train --config``."""


def write_settings(config: RunConfig, run_path: Path) -> Path:
    """Write ``run_path/config.toml`` atomically: every setting of ``config``, not resuming.

    ``gnnsys train --config RUN_DIR/config.toml --out NEW_DIR`` repeats the run (``--resume``
    continues it; the file itself never asks for a resume).
    """
    from gnnsys import __version__
    from gnnsys.store.diskio import atomic_write

    fresh = replace(config, loop=replace(config.loop, resume=False))
    text = fresh.to_toml(
        f"The settings of the gnnsys train run in {run_path}, written by gnnsys "
        f"{__version__}.\nRepeat the run: gnnsys train --config {run_path / SETTINGS_NAME} "
        "--out NEW_DIR\nFlags given beside --config override the file; keys left out keep "
        "the preset's value."
    )
    return atomic_write(run_path / SETTINGS_NAME, text.encode())


def _check_task(config: RunConfig, store: Path) -> None:
    """Refuse a store written for the other task, or for another relation's links.

    Link files present or missing; a heterogeneous store's links of another relation than
    ``--target-edge``.
    """
    from gnnsys.store.links import link_edge_type

    if (config.link is not None) != store_has_links(store):
        what = "has no link split" if config.link is not None else "was written for --task link"
        raise ValueError(
            f"store {store} {what}; partition the dataset for this task (omit --store) or "
            "pass the matching --task"
        )
    split = config.data.link_split
    if split is not None and split.edge_type:
        held = link_edge_type(store)
        if held != split.target:
            raise ValueError(
                f"store {store} holds links of {'__'.join(held or ())}, not of --target-edge "
                f"{split.edge_type}; pass --target-edge {'__'.join(held or ())} or omit --store"
            )


def _run(
    config: RunConfig,
    run_path: Path,
    prepared: PreparedStore,
    *,
    executor: str,
    fault: FaultSpec | None = None,
    replay: bool = False,
    threads: int | None = None,
) -> TrainResult:
    """Prepare, resolve, coordinate and summarise one run on either executor."""
    wall = time.perf_counter() - prepared.seconds
    config, info, topology = resolve(config, prepared.path, executor)
    device = plan_devices(
        config.cluster.device, parts=config.cluster.parts, gpus=_visible_gpus(executor)
    )
    log.info(
        "device %s (asked %s): %g GPU per trainer, %s between ranks",
        device.kind, config.cluster.device, device.gpus_per_trainer, device.backend,
    )  # fmt: skip
    template = worker_template(config, prepared.path, info, topology)
    template = replace(template, fault=fault, device=device)
    group = GroupPlan(executor, template, replay=replay, threads=threads)
    coordinator = _coordinator(config, run_path, group, info.num_classes)
    return _finish(config, run_path, prepared, coordinator, topology, executor, wall, device)


def _visible_gpus(executor: str) -> float:
    """GPUs the executor can give trainers: Ray's ``GPU`` resource, or this process's CUDA."""
    if executor == "ray":
        import ray

        resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
        return float(resources.get("GPU", 0.0))
    return float(torch.cuda.device_count()) if torch.cuda.is_available() else 0.0


def resolve(config: RunConfig, store: Path, executor: str) -> tuple[RunConfig, StoreInfo, str]:
    """The run's codec (``auto`` resolved, per node type), store info and topology on ``store``.

    ``gnnsys predict``/``embed`` resolve the same way, so inference sees exactly the rows
    training's evaluation saw.
    """
    info = store_info(store)
    if config.node_types is not None:
        codec = resolved_per_type_codec(config, store, info)
    else:
        codec = resolved_codec(config, store)
    topology = "partitioned"
    if executor == "ray":
        topology = choose_topology(
            config.cluster.topology,
            num_nodes=info.num_nodes,
            num_edges=info.num_edges,
            num_parts=config.cluster.parts,
        )
    return replace(config, codec=codec), info, topology


@dataclass(frozen=True, slots=True)
class GroupPlan:
    """How each attempt's worker group is made: executor and rank-0 spec."""

    executor: str
    template: Any
    replay: bool = False
    threads: int | None = None

    def make(self, config: RunConfig, attempt: int) -> WorkerGroup:
        """The group of ``attempt`` (a restart after a failure is attempt 1, 2, ...)."""
        spec = replace(self.template, attempt=attempt)
        loop = config.loop
        if self.executor == "ray":
            cluster = config.cluster
            cpus = trainer_cpus(cluster.threads, cluster.parts, loop.resources.owner_cpus)
            return RayWorkerGroup(
                spec,
                replace(loop.resources, worker_cpus=cpus),
                loop.deadline_s,
                heartbeat_s=Coordinator.heartbeat(loop),
                startup_deadline_s=loop.startup_deadline_s,
            )
        threads = self.threads if self.threads is not None else config.cluster.threads
        return LocalWorkerGroup(spec, loop.deadline_s, replay=self.replay, threads=threads)


def _coordinator(
    config: RunConfig, run_path: Path, group: GroupPlan, num_classes: int
) -> Coordinator:
    """The run's coordinator over ``group``'s workers (homogeneous or heterogeneous)."""
    return Coordinator(
        config.loop,
        make_group=lambda attempt: group.make(config, attempt),
        policy=FailurePolicy(config.failure),
        recorder=Recorder(run_path, config.loop.tensorboard),
        evaluation=config.eval,
        num_classes=num_classes,
        world_size=config.cluster.parts,
        link=config.link is not None,
    )


def _finish(
    config: RunConfig,
    run_path: Path,
    prepared: PreparedStore,
    coordinator: Coordinator,
    topology: str,
    executor: str,
    wall: float,
    device: DevicePlan,
) -> TrainResult:
    """Run the coordinator to the end and write ``summary.json`` (atomically; ``DiskError``)."""
    from gnnsys.store.diskio import atomic_write

    history = [m.to_json() for m in coordinator.run()]
    best = coordinator.best()
    summary = summary_of(config, history, prepared, topology, coordinator.restarts)
    summary |= {"best": None if best is None else best.to_json(), "metric": coordinator.metric}
    summary |= {"executor": executor, "wall_seconds": time.perf_counter() - wall}
    summary |= {"device": asdict(device)}
    summary |= {"failures": coordinator.failures}
    atomic_write(run_path / "summary.json", (json.dumps(summary, indent=1) + "\n").encode())
    return TrainResult(history=history, summary=summary, run_dir=run_path)


def resolved_per_type_codec(config: RunConfig, store: Path, info: StoreInfo) -> CodecConfig:
    """``config.codec`` of a typed run with ``auto`` resolved per type (a canonical spec).

    A featured type's ``auto`` is resolved from its rows (streamed); a featureless type's is
    ``fp32`` (``PerTypeCodecConfig.resolve_chunks``).
    """
    from gnnsys.cache.codecs import PerTypeCodecConfig

    typed = PerTypeCodecConfig.from_config(config.codec, info.named_types)
    chunks = {t: partial(feature_chunks, store, node_type=t) for t in info.named_dims}
    resolved = typed.resolve_chunks(chunks)
    if resolved.spec != typed.spec:
        log.info("codec %s -> %s", config.codec.name, resolved.spec)
    return replace(config.codec, name=resolved.spec)


def resolved_codec(config: RunConfig, store: Path) -> CodecConfig:
    """``config.codec`` with ``auto`` resolved from every part's features, streamed."""
    return config.codec.resolve_chunks(lambda: feature_chunks(store))


def worker_template(config: RunConfig, store: Path, info: StoreInfo, topology: str) -> WorkerSpec:
    """Rank 0's ``WorkerSpec`` (both executors derive every rank's spec from it).

    ``info``: the store's sizes (``gnnsys.store.info.store_info``).

    Raises:
        ValueError: A typed run whose seed type has no features or labels, or whose fanouts
            or codec name a relation or type the store lacks (``RankLayout.of``).
    """
    # a link encoder's output is the embedding, as wide as its hidden layers
    classes = info.num_classes if config.link is None else config.model.hidden
    spec = WorkerSpec(
        rank=0,
        world_size=config.cluster.parts,
        store=str(store),
        topology=topology,
        trainer=config.trainer,
        sampler=config.sampler,
        model=config.model,
        num_features=0,
        num_classes=classes,
        deadline_s=config.loop.deadline_s,
        codec=config.codec,
        cache=config.cache,
        layer0=config.layer0,
        eval=config.eval,
        link=config.link,
        owner_reads=config.cluster.reads(),
        node_types=config.node_types,
    )
    if not info.typed:
        return replace(spec, num_features=info.num_features)
    layout = RankLayout.of(spec, info)  # refuses what the typed worker could not build
    return replace(spec, num_features=layout.in_dims[layout.node_types.input_type])


def summary_of(
    config: RunConfig,
    history: list[dict[str, Any]],
    prepared: PreparedStore,
    topology: str,
    restarts: int,
) -> dict[str, Any]:
    """The ``summary.json`` object: final epoch, config, versions, partition (``best`` added)."""
    from gnnsys import __version__
    from gnnsys.store import read_store_manifest

    manifest = read_store_manifest(prepared.path)
    resolved = replace(config, cluster=replace(config.cluster, topology=topology))
    return {
        "final": history[-1] if history else None,
        "config": resolved.to_json(),
        "versions": {
            "gnnsys": __version__,
            "torch": torch.__version__,
            "ray": _ray_version(),
            "python": platform.python_version(),
        },
        "partition": {
            "store": str(prepared.path),
            "dataset": manifest.dataset,
            "fingerprint": manifest.fingerprint,
            "strategy": manifest.strategy,
            "num_parts": manifest.num_parts,
            "num_hops": manifest.num_hops,
            "written_by_this_run": prepared.written,
            "seconds": prepared.seconds,
            "peak_rss_bytes": prepared.peak_rss_bytes,
        },
        "restarts": restarts,
        "driver_peak_rss_bytes": _peak_rss(),
    }


def _peak_rss() -> int:
    """This process's peak RSS in bytes (``ru_maxrss`` is KiB on Linux)."""
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _ray_version() -> str:
    try:
        import ray
    except ImportError:  # the in-process executor runs without Ray
        return "absent"
    return str(ray.__version__)
