"""One rank of a training run, for a graph of any kind: the actor, its spec and its reports.

Per part ``p`` there are two actors: an owner (``ShardOwner``, for a store of either kind) that
serves part ``p``'s structure and features to everyone, and a
:class:`TrainWorker` (rank ``p``) that trains on part ``p``'s train seeds and evaluates part
``p``'s nodes. The shard, trainer, evaluator and the rows it serves are its :class:`Rank`,
built by ``gnnsys.train.rank.RankRuntime`` for every graph (a homogeneous graph is its
one node type, ``gnnsys.types.ONE_TYPE``). Trainers form a
torch.distributed gloo group for the gradient allreduce; owners stay stateless readers, so the
group can be restarted without them.

``RayWorkerGroup`` (control/ray_group.py) is the only place that creates or kills actors; it runs
``TrainWorker`` as a threaded actor, so the driver can poll ``progress()`` while an epoch runs and
peers can ask for evaluation rows while this rank computes its own.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from gnnsys.cache import CacheConfig, CacheCounters, CodecConfig
from gnnsys.cache.codecs import Codec, EncodedRows
from gnnsys.models import ModelConfig
from gnnsys.outputs import OutputRequest, OutputRows, PartFile, write_part
from gnnsys.train.device import DevicePlan
from gnnsys.train.eval.evaluate import EvalConfig, RankEval, eval_ticks
from gnnsys.train.layer0.base import FirstLayerConfig
from gnnsys.train.link.config import LinkConfig
from gnnsys.train.remote.client import DelayedOwnerClient, OwnerClient, RayOwnerClient
from gnnsys.train.remote.ledger import Ledger, LedgerSnapshot
from gnnsys.train.remote.peers import LocalPeerClient, PeerClient, RayPeerClient
from gnnsys.train.remote.server import LocalOwnerClient, ShardOwner
from gnnsys.train.schedule import BatchPlan, EpochStats, GradSync
from gnnsys.train.threads import use_actor_threads
from gnnsys.train.trainer import Trainer
from gnnsys.types import PartitionBook

if TYPE_CHECKING:
    from gnnsys.train.node_types import NodeTypesConfig

__all__ = [
    "FaultSpec",
    "Rank",
    "RankBuilder",
    "RankState",
    "TrainWorker",
    "WorkerEpochReport",
    "WorkerSpec",
    "owner_client",
    "grad_sync",
    "peak_rss",
    "stage_threads",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FaultSpec:
    """Test-only fault injection: at ``(epoch, batch)`` rank ``rank`` raises, exits or freezes.

    Fires only on the first attempt (``WorkerSpec.attempt == 0``), so a restarted group runs
    clean; ``exit`` kills the process like ``ray.kill`` would, ``raise`` is a bug in user code,
    ``freeze`` stops the process (``SIGSTOP``: it holds its sockets and answers nothing).
    ``epoch == -1`` fires at the end of the constructor (start-up); ``batch == -1`` fires when
    that epoch's evaluation starts. ``delay`` is latency, not a failure: every rank, on every
    attempt, waits ``delay_s`` before each batch of owner calls (``rank``, ``epoch`` and
    ``batch`` are ignored); the pipeline benchmark uses it to make fetching slow.
    """

    kind: str
    rank: int
    epoch: int
    batch: int = 0
    delay_s: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in ("raise", "exit", "freeze", "delay"):
            raise ValueError(f"fault kind {self.kind!r}; use 'raise', 'exit', 'freeze' or 'delay'")
        if self.kind == "delay" and not self.delay_s > 0:
            raise ValueError(f"delay_s={self.delay_s}; a delay fault needs a positive delay")


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """Everything one trainer needs, for a graph of any kind; pickled to the actor, so frozen.

    The stages' own configs travel untouched. A heterogeneous run sets ``node_types``; its typed
    worker derives each relation's fanouts and each type's input width from ``sampler``,
    ``model`` and the store (``gnnsys.train.rank.RankLayout``).

    Attributes:
        rank: This worker's rank = the part it trains on.
        world_size: ``P``.
        store: Partition store directory (visible to every node).
        topology: ``partitioned`` or ``replicated`` (``auto`` is resolved by the driver).
        trainer: Optimisation settings.
        sampler: ``NeighborSampler.Config``.
        model: Model architecture.
        num_features: ``F`` of the input features (typed: of the seed type).
        num_classes: ``C``, the model's output width.
        deadline_s: Deadline of every remote call and of the gloo collectives.
        codec: Codec of remote feature rows (resolved: never ``auto``).
        cache: Halo cache budget and policy.
        layer0: Placement of layer 0's aggregation, fused dequantization.
        eval: How the ranks evaluate (sharded, exact).
        link: The link-prediction task (``None``: node classification); ``num_classes`` is
            then the embedding width.
        owner_reads: ``remote`` (owner actors) or ``local`` (in-process owner objects over the
            mapped store: ``ClusterConfig.owner_reads``).
        node_types: Typed model, per-relation fanouts and embeddings of a heterogeneous run;
            ``None`` for a graph of one node type and one relation.
        device: The driver's device plan (``plan_devices``): each rank resolves its own
            ``torch.device`` from it (``rank_device``).
        attempt: 0 for the first group, incremented on each restart.
        fault: Injected fault, for tests.
    """

    rank: int
    world_size: int
    store: str
    topology: str
    trainer: Trainer.Config
    sampler: Any
    model: ModelConfig
    num_features: int
    num_classes: int
    deadline_s: float
    codec: CodecConfig = field(default_factory=CodecConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    layer0: FirstLayerConfig = field(default_factory=FirstLayerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    link: LinkConfig | None = None
    owner_reads: str = "remote"
    node_types: NodeTypesConfig | None = None
    device: DevicePlan = field(default_factory=lambda: DevicePlan("cpu"))
    attempt: int = 0
    fault: FaultSpec | None = field(default=None)

    @property
    def eval_steps(self) -> int:
        """Layer steps of the group's sharded evaluation (one per model layer)."""
        return len(self.sampler.fanouts)


@dataclass(frozen=True, slots=True)
class WorkerEpochReport:
    """What a worker returns after an epoch.

    Attributes:
        rank: The worker's rank.
        stats: Loss, accuracy and time split.
        traffic: Ledger difference over the epoch.
        peak_rss_bytes: Peak resident memory of the worker process so far.
        node_id: Ray node the worker runs on.
        warmup: Traffic before epoch 0 (presample dry run and cache prefetch).
        cache: Cache and fetcher counters over the epoch (``None``: the worker keeps no cache).
    """

    rank: int
    stats: EpochStats
    traffic: LedgerSnapshot
    peak_rss_bytes: int
    node_id: str
    warmup: LedgerSnapshot = field(default_factory=LedgerSnapshot)
    cache: CacheCounters | None = None


@dataclass(frozen=True, slots=True, eq=False)
class RankState:
    """What a checkpoint keeps of one rank.

    Attributes:
        model: The model's ``state_dict`` (equal on every rank after the allreduce).
        optimizer: The optimizer's ``state_dict`` (equal on every rank).
        rng: This rank's RNG states (``{"torch": ByteTensor}``).
    """

    model: dict[str, Any]
    optimizer: dict[str, Any]
    rng: dict[str, Any]


class GlooSync:
    """``GradSync`` over the default gloo process group; counts its payload in the ledger."""

    def __init__(self, world_size: int, ledger: Ledger) -> None:
        self.world_size, self.ledger = world_size, ledger

    def allreduce_mean_(self, flat: Tensor) -> None:
        """Sum ``flat`` over ranks (blocks until every rank joins), then divide by ``P``."""
        self.ledger.record("allreduce", flat)
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        flat.div_(self.world_size)

    def all_gather(self, flat: Tensor) -> list[Tensor]:
        """Every rank's 1-D ``flat`` in rank order; lengths may differ (two collectives).

        Gloo's ``all_gather`` needs equal shapes: the lengths go first, then every rank's
        tensor padded to the longest. The caller counts its payload in its own ledger.
        """
        size = torch.tensor([flat.numel()], dtype=torch.long)
        sizes = [torch.zeros_like(size) for _ in range(self.world_size)]
        dist.all_gather(sizes, size)
        longest = max(int(s) for s in sizes)
        padded = torch.zeros(longest, dtype=flat.dtype)
        padded[: flat.numel()] = flat
        out = [torch.empty_like(padded) for _ in range(self.world_size)]
        dist.all_gather(out, padded)
        return [t[: int(s)] for t, s in zip(out, sizes, strict=True)]


def peak_rss() -> int:
    """Peak RSS in bytes (``ru_maxrss`` is KiB on Linux)."""
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _node_id() -> str:
    ray = sys.modules.get("ray")  # the in-process executor runs where Ray is not installed
    if ray is None or not ray.is_initialized():
        return "local"  # the in-process executor (gnnsys.train.control.local_group)
    return str(ray.get_runtime_context().get_node_id())


def owner_client(
    spec: WorkerSpec,
    owners: list[Any],
    client: OwnerClient | None,
    books: Mapping[Any, PartitionBook],
) -> OwnerClient:
    """``client``, or one over the owner actors; slowed down by a ``delay`` fault (benchmark).

    With ``owner_reads == "local"`` the owners' code runs in this process: a ``ShardOwner`` per
    part over the mapped store, with the rank's ``books`` (``gnnsys.store.load_books``).
    """
    if client is None and spec.owner_reads == "local":
        parts = range(spec.world_size)
        owners_here = [ShardOwner(spec.store, p, own_threads=False, books=books) for p in parts]
        client = LocalOwnerClient(owners_here)
    if client is None:
        client = RayOwnerClient(owners, spec.deadline_s)
    if spec.fault is not None and spec.fault.kind == "delay":
        client = DelayedOwnerClient(client, spec.fault.delay_s)
    return client


def grad_sync(
    spec: WorkerSpec, sync: Callable[[Any], GradSync] | None, ledger: Any
) -> GradSync | None:
    """The rank's gradient average, counted in ``ledger``.

    The in-process executor's ``sync``, gloo between ``P > 1`` processes, or ``None`` for one
    rank alone.
    """
    if sync is not None:
        return sync(ledger)
    return GlooSync(spec.world_size, ledger) if spec.world_size > 1 else None


def stage_threads(spec: WorkerSpec, client: OwnerClient | None) -> int:
    """Producer threads of a rank's prefetching epochs (``Trainer.stage_threads``).

    1 when owner calls stay in this process (the in-process executor's ``client``, or
    ``owner_reads == "local"``) and carry no injected delay: sampling and fetching are then
    CPU-bound, and one thread running both contends less with the compute loop (measured on
    2 cores: 2 parts 2.04-2.13 s per epoch against 2.23-2.53 s with two threads). 2 when owner
    calls leave the process, or a ``delay`` fault stands in for their latency: each stage's
    waits then overlap the other's.
    """
    delayed = spec.fault is not None and spec.fault.kind == "delay"
    in_process = client is not None or spec.owner_reads == "local"
    return 1 if in_process and not delayed else 2


class Rank(Protocol):
    """The graph side of one rank: what it trains and how it evaluates and serves rows.

    ``gnnsys.train.rank.RankRuntime`` builds it for every graph (a homogeneous one is its
    one-type case); :class:`TrainWorker` is the actor around it.
    """

    features: Any
    ledger: Any

    @property
    def trainer(self) -> Trainer:
        """This rank's trainer."""
        ...

    def eval_layer(self, layer: int) -> None:
        """Compute this rank's outputs of layer ``layer`` (every rank finished ``layer - 1``)."""
        ...

    def eval_report(self, splits: tuple[str, ...], with_logits: bool) -> RankEval:
        """This rank's confusion matrices (and binary scores) after the last layer."""
        ...

    def serve_rows(self, table: int, gid: np.ndarray) -> Tensor:
        """Rows of owned ``gid`` of evaluation table ``table`` (float32)."""
        ...

    def owned_outputs(self, layer: int, labelled: bool) -> list[OutputRows]:
        """This rank's owned rows of evaluation table ``layer``, per node type.

        ``labelled``: only the type the model classifies (its logits: ``predict``).
        """
        ...

    def release_eval(self) -> None:
        """Free the evaluation tables (after the last reader is done)."""
        ...

    def serve_degree(self, gid: np.ndarray) -> np.ndarray:
        """``[K]`` whole-graph in-degrees of owned ``gid``."""
        ...

    def serve_embedding(self, node_type: str, lid: np.ndarray, step: int) -> Tensor:
        """Embedding rows of owned ``lid`` of ``node_type`` after ``step`` updates."""
        ...


RankBuilder = Callable[..., Rank]
"""``builder(spec, owners, *, client, sync, rng_lock, peers)``: a rank's graph-kind side;
``peers`` is a callable returning the current peer client."""


class TrainWorker:
    """Trainer of one rank, used as a Ray actor; see the module docstring.

    Args:
        spec: This rank's spec.
        owners: Owner actor handles (Ray executor); unused with ``client``.
        rank: Builds the graph side (``RankRuntime``).
        client: Owner client (the in-process executor passes its own).
        sync: Makes the allreduce + all_gather for this rank's ledger (in-process executor).
        rng_lock: Serialises the random part of a step between in-process ranks.
        peers: Client of the peer ranks (in-process executor): embedding rows, evaluation.
    """

    def __init__(
        self,
        spec: WorkerSpec,
        owners: list[Any],
        *,
        rank: RankBuilder,
        client: OwnerClient | None = None,
        sync: Callable[[Any], GradSync] | None = None,
        rng_lock: threading.Lock | None = None,
        peers: PeerClient | None = None,
    ) -> None:
        use_actor_threads(reserve=1 if spec.trainer.prefetch else 0)  # gnnsys.train.threads
        self.spec = spec
        self.peers: PeerClient = peers if peers is not None else LocalPeerClient()
        self.rank = rank(
            spec, owners, client=client, sync=sync, rng_lock=rng_lock, peers=lambda: self.peers
        )
        self.trainer, self.features = self.rank.trainer, self.rank.features
        self.trainer.stage_threads = stage_threads(spec, client)
        self.ledger = self.rank.ledger
        self.features.warm_up()  # before the first epoch's snapshot: reported as warm-up traffic
        self.warmup = self.ledger.snapshot()
        self._progress = 0
        self._evaluating = False  # progress() answers evaluation steps while a layer runs
        self._epoch = -1
        self._lock = threading.Lock()
        self._maybe_fault(-1, 0)

    def address(self) -> tuple[str, int]:
        """This node's IP and a free TCP port (rank 0 hosts the gloo rendezvous)."""
        import ray

        with socket.socket() as sock:
            sock.bind(("", 0))
            port = int(sock.getsockname()[1])
        node_ip = cast(Callable[[], str], ray.util.get_node_ip_address)
        return node_ip(), port

    def init_group(self, host: str, port: int) -> None:
        """Join the process group (blocks until all ``P`` ranks have joined or the deadline).

        gloo, or with a GPU per rank (``DevicePlan.backend``) NCCL for CUDA tensors and gloo
        for the CPU ones (a typed run's embedding exchange); the deadline bounds both.
        """
        if self.spec.world_size > 1:
            nccl = self.spec.device.backend == "nccl"
            dist.init_process_group(
                "cpu:gloo,cuda:nccl" if nccl else "gloo",
                init_method=f"tcp://{host}:{port}",
                rank=self.spec.rank,
                world_size=self.spec.world_size,
                timeout=timedelta(seconds=self.spec.deadline_s),
                # NCCL's communicator is bound to this rank's GPU, never a default cuda:0
                device_id=self.trainer.device.device if nccl else None,
            )

    def batch_plan(self) -> BatchPlan:
        """This rank's items and batch settings (the group computes the epoch's batches)."""
        return self.trainer.batch_plan()

    def load_state(
        self, model: dict[str, Any], optimizer: dict[str, Any], rng: dict[str, Any]
    ) -> None:
        """Restore a checkpoint's model, optimizer and this rank's RNG."""
        self.trainer.load_state(model, optimizer, rng)

    def state(self) -> RankState:
        """Model, optimizer and RNG state (see ``Trainer.state``)."""
        state = self.trainer.state()
        return RankState(model=state["model"], optimizer=state["optimizer"], rng=state["rng"])

    # ---- sharded evaluation (gnnsys.train.eval) ------------------------------------------------
    def set_peers(self, peers: list[Any]) -> None:
        """Actor handles of every rank (Ray executor), for evaluation's rank-to-rank rows."""
        self.peers = RayPeerClient(peers, self.spec.deadline_s)

    def eval_layer(self, layer: int) -> None:
        """Compute this rank's outputs of layer ``layer`` (every rank finished ``layer - 1``)."""
        if layer == 0:
            self._maybe_fault(self._epoch, -1)
        self._evaluating = True
        try:
            self.rank.eval_layer(layer)
        finally:
            self._evaluating = False

    def eval_report(self, splits: tuple[str, ...], with_logits: bool = False) -> RankEval:
        """This rank's confusion matrices (and binary scores) after the last layer."""
        return self.rank.eval_report(splits, with_logits)

    def write_outputs(self, request: OutputRequest) -> PartFile:
        """Write this rank's part of ``gnnsys predict``/``embed`` (after the group's layers)."""
        try:
            rows = self.rank.owned_outputs(request.layer, request.kind == "predict")
            return write_part(request, self.spec.rank, rows)
        finally:
            self.rank.release_eval()

    def serve_rows(self, table: int, gid: np.ndarray, codec: Codec) -> EncodedRows:
        """Rows of owned ``gid`` in evaluation table ``table``, encoded for the wire."""
        return codec.encode(self.rank.serve_rows(table, gid))

    def serve_degree(self, gid: np.ndarray) -> np.ndarray:
        """``[K]`` whole-graph in-degrees of owned ``gid`` (a shard row's length)."""
        return self.rank.serve_degree(gid)

    def serve_embedding(
        self, node_type: str, lid: np.ndarray, step: int, codec: Codec
    ) -> EncodedRows:
        """Embedding rows of owned type-local ``lid`` after ``step`` updates, for the wire."""
        return codec.encode(self.rank.serve_embedding(node_type, lid, step))

    def progress(self) -> int:
        """Batches finished in the running epoch (answered while ``train_epoch`` runs).

        While an evaluation layer runs: the evaluation steps this process has done
        (``evaluate.eval_ticks``), which move as long as the layer does.
        """
        if self._evaluating:
            return eval_ticks()
        with self._lock:
            return self._progress

    def _before_batch(self, epoch: int, batch: int) -> None:
        with self._lock:
            self._progress = batch
        self._maybe_fault(epoch, batch)

    def _maybe_fault(self, epoch: int, batch: int) -> None:
        """Fire the injected fault if it is due at ``(epoch, batch)`` (see ``FaultSpec``)."""
        fault = self.spec.fault
        due = (self.spec.rank, epoch, batch)
        if fault is None or fault.kind == "delay" or self.spec.attempt:  # delay: see owner_client
            return
        if (fault.rank, fault.epoch, fault.batch) != due:
            return
        log.warning(
            "fault injection: rank %d %s at epoch %d batch %d", due[0], fault.kind, *due[1:]
        )
        if fault.kind == "exit":
            os._exit(1)
        if fault.kind == "freeze":
            os.kill(os.getpid(), signal.SIGSTOP)  # until SIGCONT or SIGKILL (the group's restart)
            return
        raise RuntimeError(f"injected fault at rank {fault.rank} epoch {epoch} batch {batch}")

    def train_epoch(self, epoch: int, num_batches: int) -> WorkerEpochReport:
        """Train one epoch of ``num_batches`` steps and report stats and traffic."""
        self._epoch = epoch

        def run() -> EpochStats:
            stats = self.trainer.train_epoch(
                epoch, num_batches, hook=lambda b: self._before_batch(epoch, b)
            )
            with self._lock:
                self._progress = num_batches
            return stats

        return self._measured(run)

    def replay_epoch(self, epoch: int, num_batches: int) -> WorkerEpochReport:
        """Sample and fetch ``epoch``'s batches without training; report traffic and cache."""
        return self._measured(lambda: self.trainer.replay_epoch(epoch, num_batches))

    def _measured(self, epoch_fn: Callable[[], EpochStats]) -> WorkerEpochReport:
        """Run one epoch and report its stats with the ledger and cache differences."""
        before = self.ledger.snapshot()
        cache_before = self.features.counters()
        stats = epoch_fn()
        cache_after = self.features.counters()
        return WorkerEpochReport(
            rank=self.spec.rank,
            stats=stats,
            traffic=self.ledger.snapshot() - before,
            peak_rss_bytes=peak_rss(),
            node_id=_node_id(),
            warmup=self.warmup,
            cache=None
            if cache_after is None or cache_before is None
            else cache_after.since(cache_before),
        )

    def close(self) -> None:
        """Leave the gloo group."""
        if dist.is_initialized():
            dist.destroy_process_group()
