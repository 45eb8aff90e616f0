"""One rank of a training run: its trainer, its evaluation state and what it serves its peers.

Per part ``p`` there are two actors: a ``ShardOwner`` (``gnnsys.train.remote.server``) that
serves part ``p``'s structure and features to everyone, and a :class:`TrainWorker` (rank ``p``)
that trains on part ``p``'s train seeds and evaluates part ``p``'s nodes. Trainers form a
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
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from gnnsys.cache import CacheConfig, CacheCounters, CodecConfig
from gnnsys.cache.codecs import Codec, EncodedRows
from gnnsys.models import BlockModel, LinkModel, ModelConfig, build_decoder, build_model
from gnnsys.store import ShardLinks
from gnnsys.train.evaluate import EvalConfig, RankEval, ShardEvaluator
from gnnsys.train.layer0.base import FirstLayerConfig
from gnnsys.train.layer0.owner_sums import build_first_layer
from gnnsys.train.link.config import LinkConfig
from gnnsys.train.link.scoring import score_links
from gnnsys.train.link.trainer import LinkTrainer
from gnnsys.train.remote.client import DelayedOwnerClient, OwnerClient, RayOwnerClient
from gnnsys.train.remote.degrees import RoutedDegreeSource
from gnnsys.train.remote.features import RoutedFeatureSource, build_feature_source
from gnnsys.train.remote.ledger import Ledger, LedgerSnapshot
from gnnsys.train.remote.peers import LocalPeerClient, PeerClient, RayPeerClient
from gnnsys.train.remote.routed import RoutedNeighborSource
from gnnsys.train.remote.server import LocalOwnerClient, ShardOwner
from gnnsys.train.threads import use_actor_threads
from gnnsys.train.topology import assemble_graph
from gnnsys.train.trainer import BatchPlan, EpochStats, GradSync, Trainer
from gnnsys.types import PartitionBook, PartitionShard

if TYPE_CHECKING:
    from gnnsys.sampler import DegreeSource, NeighborSampler
    from gnnsys.train.hetero.config import HeteroConfig

__all__ = [
    "FaultSpec",
    "RankState",
    "TrainWorker",
    "WorkerEpochReport",
    "WorkerSpec",
    "owner_client",
    "peak_rss",
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

    The stages' own configs travel untouched. A heterogeneous run sets ``hetero``; its typed
    worker derives each relation's fanouts and each type's input width from ``sampler``,
    ``model`` and the store (``gnnsys.train.hetero.worker.TypedLayout``).

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
        hetero: Typed model, per-relation fanouts and embeddings of a heterogeneous run;
            ``None`` for a graph of one node type and one relation.
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
    hetero: HeteroConfig | None = None
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
class _Built:
    """What ``_build_trainer`` wires: the trainer and the feature source it fetches through."""

    trainer: Trainer
    features: RoutedFeatureSource


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
    import ray

    if not ray.is_initialized():
        return "local"  # the in-process executor (gnnsys.train.control.local_group)
    return str(ray.get_runtime_context().get_node_id())


def _build_sampler(
    spec: WorkerSpec,
    shard: PartitionShard,
    book: PartitionBook,
    client: OwnerClient,
    ledger: Ledger,
) -> NeighborSampler:
    """This rank's sampler: whole-graph CSR (replicated) or routed by owner (partitioned).

    A model that normalises by whole-graph in-degrees (GCN) gets a ``DegreeSource`` too: the
    whole CSR's row lengths, or the rank's owned + halo table (halo degrees fetched from their
    owners here, once, before epoch 0: counted as warm-up traffic).
    """
    from gnnsys.sampler import CSRNeighborSource, DegreeTable, NeighborSampler

    degrees: DegreeSource | None = None
    if spec.topology == "replicated":
        graph = assemble_graph(spec.store, with_data=False)
        source: Any = CSRNeighborSource.from_graph(graph)
        if spec.model.uses_in_degree:
            degrees = DegreeTable.from_indptr(graph.indptr)
    else:
        local = CSRNeighborSource.from_shard(shard, book.lid_N)
        source = RoutedNeighborSource(spec.rank, book.part_N, local, client, ledger)
        if spec.model.uses_in_degree:
            degrees = RoutedDegreeSource.fetch(shard, book.part_N, client, ledger)
    return NeighborSampler(spec.sampler, source=source, degrees=degrees)


def _node_seeds(shard: PartitionShard) -> tuple[Tensor, Tensor]:
    """``(train_gid, train_y)`` of the part's labelled train nodes."""
    if shard.y is None or shard.train_mask is None:
        raise ValueError(f"part {shard.part} lacks y or train_mask; rewrite the store with them")
    train_lid = np.flatnonzero(np.asarray(shard.train_mask))
    train_gid = torch.from_numpy(np.asarray(shard.owned_gid)[train_lid].astype(np.int64))
    return train_gid, torch.from_numpy(np.asarray(shard.y)[train_lid].astype(np.int64))


def _presample_seeds(spec: WorkerSpec, shard: PartitionShard, links: ShardLinks | None) -> Tensor:
    """Seeds of the cache's dry-run epochs: train nodes, or the endpoints of train links."""
    if links is None:
        return _node_seeds(shard)[0]
    return torch.from_numpy(np.unique(links.train_2E).astype(np.int64))


def _build_trainer(
    spec: WorkerSpec,
    shard: PartitionShard,
    book: PartitionBook,
    client: OwnerClient,
    ledger: Ledger,
    sync: GradSync | None,
    rng_lock: threading.Lock | None = None,
    links: ShardLinks | None = None,
) -> _Built:
    """Wire this rank's sampler, feature source and model into a ``Trainer`` (or link one)."""
    if shard.x is None:
        raise ValueError(f"part {spec.rank} lacks x; rewrite the store with features")
    sampler = _build_sampler(spec, shard, book, client, ledger)
    per_batch = 1 if spec.link is None else 2 + spec.link.neg_per_pos  # seeds per positive
    features = build_feature_source(
        spec.codec,
        spec.cache,
        shard=shard,
        book=book,
        client=client,
        ledger=ledger,
        sampler=sampler,
        train_gid=_presample_seeds(spec, shard, links),
        batch_size=spec.trainer.batch_size * per_batch,
        seed=spec.trainer.seed * 7919 + spec.rank,
    )
    torch.manual_seed(spec.trainer.seed)  # identical initial weights on every rank
    model = build_model(spec.model, spec.num_features, spec.num_classes, len(spec.sampler.fanouts))
    first_layer = build_first_layer(  # None for requester placement without fused dequant
        spec.layer0,
        model,
        codec=features.codec,
        features=features,
        part=spec.rank,
        part_N=book.part_N,
        num_features=spec.num_features,
        client=client,
        ledger=ledger,
    )
    handles = _Handles(sampler, features, spec.rank, sync, rng_lock, first_layer)
    if links is not None:
        return _Built(_link_trainer(spec, model, links, shard.num_nodes, handles), features)
    train_gid, train_y = _node_seeds(shard)
    trainer = Trainer(
        spec.trainer,
        model=model,
        sampler=sampler,
        features=features,
        train_gid=train_gid,
        train_y=train_y,
        rank=spec.rank,
        sync=sync,
        rng_lock=rng_lock,
        first_layer=first_layer,
    )
    return _Built(trainer, features)


@dataclass(frozen=True, slots=True, eq=False)
class _Handles:
    """The runtime handles every trainer variant takes."""

    sampler: Any
    features: RoutedFeatureSource
    rank: int
    sync: GradSync | None
    rng_lock: threading.Lock | None
    first_layer: Any


def _link_trainer(
    spec: WorkerSpec, encoder: BlockModel, links: ShardLinks, num_nodes: int, handles: _Handles
) -> LinkTrainer:
    """A ``LinkTrainer`` over ``encoder`` plus the run's decoder (same weights on every rank)."""
    assert spec.link is not None  # the caller checked the task
    model = LinkModel(encoder, build_decoder(spec.link.decoder, spec.num_classes))
    return LinkTrainer(
        spec.trainer,
        spec.link,
        model=model,
        train_2E=torch.from_numpy(links.train_2E),
        num_nodes=num_nodes,
        sampler=handles.sampler,
        features=handles.features,
        rank=handles.rank,
        sync=handles.sync,
        rng_lock=handles.rng_lock,
        first_layer=handles.first_layer,
    )


def owner_client(
    spec: WorkerSpec,
    owners: list[Any],
    client: OwnerClient | None,
    local_owner: Callable[[int], Any],
) -> OwnerClient:
    """``client``, or one over the owner actors; slowed down by a ``delay`` fault (benchmark).

    With ``owner_reads == "local"`` the owners' code runs in this process: ``local_owner(p)``
    makes part ``p``'s owner over the mapped store.
    """
    if client is None and spec.owner_reads == "local":
        client = LocalOwnerClient([local_owner(p) for p in range(spec.world_size)])
    if client is None:
        client = RayOwnerClient(owners, spec.deadline_s)
    if spec.fault is not None and spec.fault.kind == "delay":
        client = DelayedOwnerClient(client, spec.fault.delay_s)
    return client


class TrainWorker:
    """Trainer of one rank, used as a Ray actor; see the module docstring."""

    def __init__(
        self,
        spec: WorkerSpec,
        owners: list[Any],
        *,
        client: OwnerClient | None = None,
        sync: Callable[[Ledger], GradSync] | None = None,
        rng_lock: threading.Lock | None = None,
        peers: PeerClient | None = None,
    ) -> None:
        from gnnsys.store import load_book, load_links, load_shard
        from gnnsys.store.pages import advise_random

        use_actor_threads(reserve=1 if spec.trainer.prefetch else 0)  # gnnsys.train.threads
        self.spec = spec
        self.ledger = Ledger()
        self.shard, self.book = load_shard(spec.store, spec.rank), load_book(spec.store)
        book = self.book
        self.client = owner_client(
            spec, owners, client, lambda p: ShardOwner(spec.store, p, own_threads=False, book=book)
        )
        self.peers: PeerClient = peers if peers is not None else LocalPeerClient()
        advise_random(self.shard.x, self.shard.indptr, self.shard.indices_gid, self.shard.e_id)
        self.links = None if spec.link is None else load_links(spec.store, spec.rank)
        self._evaluator: ShardEvaluator | None = None
        grad_sync: GradSync | None = None
        if sync is not None:
            grad_sync = sync(self.ledger)
        elif spec.world_size > 1:
            grad_sync = GlooSync(spec.world_size, self.ledger)
        built = _build_trainer(
            spec, self.shard, self.book, self.client, self.ledger, grad_sync, rng_lock, self.links
        )
        self.trainer, self.features = built.trainer, built.features
        self.features.warm_up()  # before the first epoch's snapshot: reported as warm-up traffic
        self.warmup = self.ledger.snapshot()
        self._progress = 0
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
        """Join the gloo group (blocks until all ``P`` ranks have joined or the deadline)."""
        if self.spec.world_size > 1:
            dist.init_process_group(
                "gloo",
                init_method=f"tcp://{host}:{port}",
                rank=self.spec.rank,
                world_size=self.spec.world_size,
                timeout=timedelta(seconds=self.spec.deadline_s),
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

    # ---- sharded evaluation (gnnsys.train.evaluate) -------------------------------------------
    def set_peers(self, peers: list[Any]) -> None:
        """Actor handles of every rank (Ray executor), for evaluation's rank-to-rank rows."""
        self.peers = RayPeerClient(peers, self.spec.deadline_s)

    def eval_layer(self, layer: int) -> None:
        """Compute this rank's outputs of layer ``layer`` (every rank finished ``layer - 1``)."""
        if layer == 0:
            self._maybe_fault(self._epoch, -1)
        if self._evaluator is None:
            cache = self.features.cache  # capacity 0 without one: nothing to peek at
            self._evaluator = ShardEvaluator(
                self.spec.eval,
                shard=self.shard,
                book=self.book,
                model=self.trainer.encoder(),
                owners=self.client,
                peers=self.peers,
                feature_codec=self.features.codec,
                cache=cache if cache.capacity_rows else None,
            )
        self._evaluator.run_layer(layer)

    def eval_report(self, splits: tuple[str, ...], with_logits: bool = False) -> RankEval:
        """This rank's confusion matrices (and binary scores) after the last layer."""
        assert self._evaluator is not None  # the group ran eval_layer for every layer first
        if self.spec.link is None:
            return self._evaluator.report(splits, with_logits=with_logits)
        assert self.links is not None  # loaded with the spec's link task
        model = cast(LinkModel, self.trainer.model)
        chunk = self.spec.link.score_chunk
        return score_links(
            self._evaluator, self.links, model, splits, chunk=chunk, with_logits=with_logits
        )

    def serve_rows(self, table: int, gid: np.ndarray, codec: Codec) -> EncodedRows:
        """Rows of owned ``gid`` in evaluation table ``table``, encoded for the wire."""
        if self._evaluator is None:
            raise ValueError(f"rank {self.spec.rank} has not started evaluating")
        return codec.encode(self._evaluator.serve_rows(table, gid))

    def serve_degree(self, gid: np.ndarray) -> np.ndarray:
        """``[K]`` whole-graph in-degrees of owned ``gid`` (a shard row's length)."""
        lid = self.book.lid_N[np.asarray(gid, dtype=np.int64)]
        indptr = np.asarray(self.shard.indptr, dtype=np.int64)
        out: np.ndarray = indptr[lid + 1] - indptr[lid]
        return out

    def progress(self) -> int:
        """Batches finished in the running epoch (answered while ``train_epoch`` runs)."""
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
