"""One rank of a heterogeneous run: ``HeteroWorkerSpec`` and ``HeteroTrainWorker``.

Per part ``p`` there are two actors, as for homogeneous runs: a ``HeteroShardOwner``
(``owner.py``: part ``p``'s per-relation in-edges and feature rows) and a
:class:`HeteroTrainWorker` (rank ``p``) that trains on part ``p``'s labelled seed-type nodes,
holds part ``p``'s embedding rows, serves them to its peers and evaluates its own nodes. The
worker is a ``TrainWorker`` (same epoch report, progress polls, fault injection, gloo group,
checkpoint state), built from heterogeneous parts; the ``WorkerGroup`` executors and the
coordinator drive it unchanged.

Per rank and node type ``t`` (ids type-local, ``TypeBook`` routing):

* relations into ``t``: a ``RoutedNeighborSource`` (owned destinations from the shard, the rest
  one request per owner per hop, with the run deadline), counted in ``t``'s ledger;
* featured ``t``: a ``RoutedFeatureSource`` (own rows from the shard; halo rows through ``t``'s
  cache in ``t``'s codec, one request per owner per batch), counted in ``t``'s ledger;
* featureless ``t``: an embedding row source over the same routing, whose owners are the peer
  ranks (``serve_embedding``), in ``t``'s codec, never cached.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, cast

import numpy as np
import torch
from torch import nn

from gnnsys.cache import CacheConfig, CodecConfig
from gnnsys.cache.admission import make_policy
from gnnsys.cache.codecs import Codec, EncodedRows, TypedCodecConfig
from gnnsys.cache.typed import TypeDemand, TypedHaloCache, split_budget
from gnnsys.datasets.hetero import EdgeType
from gnnsys.models import LinkModel, build_decoder
from gnnsys.models.sparse_embedding import EmbeddingConfig
from gnnsys.sampler import CSRNeighborSource
from gnnsys.sampler.hetero import HeteroNeighborSampler
from gnnsys.store.hetero_shard import HeteroShard
from gnnsys.train.eval_typed import TypedShardEvaluator, TypeInput
from gnnsys.train.evaluate import EvalConfig, RankEval
from gnnsys.train.hetero.config import HeteroConfig
from gnnsys.train.hetero.embedding import OwnedEmbeddings, embedding_client
from gnnsys.train.hetero.owner import TypeBook, load_books
from gnnsys.train.hetero.trainer import (
    BoundSampler,
    HeteroLinkTrainer,
    HeteroTrainer,
    TypedInputs,
)
from gnnsys.train.link.config import LinkConfig
from gnnsys.train.link.scoring import score_typed_links
from gnnsys.train.remote.client import OwnerClient, RayOwnerClient
from gnnsys.train.remote.features import RoutedFeatureSource
from gnnsys.train.remote.ledger import TypedLedger
from gnnsys.train.remote.peers import LocalPeerClient, PeerClient
from gnnsys.train.remote.routed import RoutedNeighborSource
from gnnsys.train.threads import use_actor_threads
from gnnsys.train.trainer import Trainer
from gnnsys.train.worker import FaultSpec, GlooSync, TrainWorker, peak_rss

__all__ = [
    "HeteroTrainWorker",
    "HeteroWorkerSpec",
    "build_hetero_model",
    "embedding_config",
    "hetero_template",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class HeteroWorkerSpec:
    """Everything one heterogeneous trainer needs; pickled to the actor, so frozen.

    Attributes:
        rank: This worker's rank = the part it trains on.
        world_size: ``P``.
        store: Heterogeneous partition store directory.
        trainer: Optimisation settings.
        hetero: Model, fanout overrides, embeddings, evaluation subset.
        fanouts: Relation -> fanouts per hop (resolved for the store's relations).
        hidden: ``H``.
        dropout: Dropout after each hidden layer.
        in_dims: Node type -> input width (features, or the embedding width).
        featured: Node types with stored features.
        num_classes: ``C``.
        deadline_s: Deadline of every remote call and of the gloo collectives.
        codec: One codec, or a per-type spec (``TypedCodecConfig``: ``paper=int8,*=fp16``).
        cache: Halo cache budget and policy of the featured types.
        eval: Evaluation schedule (``every``, ``test_at_end``, ``metric``).
        link: Link prediction on the store's target relation (``num_classes`` is then the
            embedding width), or ``None`` for node classification of the seed type.
        attempt: 0 for the first group, incremented on each restart.
        fault: Injected fault, for tests.
    """

    rank: int
    world_size: int
    store: str
    trainer: Trainer.Config
    hetero: HeteroConfig
    fanouts: dict[EdgeType, tuple[int, ...]]
    hidden: int
    dropout: float
    in_dims: dict[str, int]
    featured: tuple[str, ...]
    num_classes: int
    deadline_s: float
    codec: CodecConfig = field(default_factory=CodecConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    link: LinkConfig | None = None
    attempt: int = 0
    fault: FaultSpec | None = None

    @property
    def eval_steps(self) -> int:
        """Layer steps of the group's sharded evaluation (one per model layer)."""
        return len(next(iter(self.fanouts.values())))


def embedding_config(spec: HeteroWorkerSpec) -> EmbeddingConfig:
    """The embeddings of the spec's featureless types (width, seed, sparse optimizer, lr)."""
    featureless = [t for t in spec.in_dims if t not in spec.featured]
    dim = spec.in_dims[featureless[0]] if featureless else 1
    return EmbeddingConfig(
        dim=dim,
        optimizer=spec.hetero.embedding_optimizer,
        lr=spec.hetero.embedding_lr or spec.trainer.lr,
        seed=spec.trainer.seed,
    )


def build_hetero_model(spec: HeteroWorkerSpec) -> nn.Module:
    """``HeteroSAGE``, ``HeteroGAT`` or ``RGCN`` for the spec (same weights on every rank).

    For a link task: that encoder plus the run's decoder (``LinkModel``).
    """
    encoder = _encoder(spec)
    if spec.link is None:
        return encoder
    return LinkModel(cast(Any, encoder), build_decoder(spec.link.decoder, spec.num_classes))


def _encoder(spec: HeteroWorkerSpec) -> nn.Module:
    from gnnsys.models.hetero import RGCN, HeteroGAT, HeteroSAGE

    edge_types = list(spec.fanouts)
    layers = len(next(iter(spec.fanouts.values())))
    torch.manual_seed(spec.trainer.seed)
    if spec.hetero.model == "rgcn":
        widths = set(spec.in_dims.values())
        if len(widths) != 1:
            raise ValueError(f"rgcn needs one input width for every type, got {spec.in_dims}")
        return RGCN(widths.pop(), spec.hidden, spec.num_classes, edge_types, layers, spec.dropout)
    if spec.hetero.model == "gat":
        return HeteroGAT(
            spec.in_dims, spec.hidden, spec.num_classes, edge_types, layers, spec.dropout
        )
    return HeteroSAGE(spec.in_dims, spec.hidden, spec.num_classes, edge_types, layers, spec.dropout)


@dataclass(frozen=True, slots=True, eq=False)
class _Sources:
    """One rank's sampler and row sources over one ledger (training, or evaluation's own)."""

    sampler: BoundSampler
    inputs: TypedInputs


def _degree_score(shard: HeteroShard, node_type: str) -> torch.Tensor:
    """``[N_t]`` in-edges into the part's owned nodes from each halo node of ``node_type``."""
    nodes = shard.nodes[node_type]
    score_N = torch.zeros(nodes.num_nodes, dtype=torch.float64)
    for (src, _, _), rel in shard.relations.items():
        if src == node_type and rel.indices_lid.size:
            src_E = torch.from_numpy(np.asarray(rel.indices_lid, dtype=np.int64))
            score_N += torch.bincount(src_E, minlength=nodes.num_nodes).double()
    score_N[torch.from_numpy(np.asarray(nodes.owned_lid, dtype=np.int64))] = 0.0
    return score_N


def typed_cache(
    spec: HeteroWorkerSpec, shard: HeteroShard, codecs: dict[str, Codec]
) -> TypedHaloCache:
    """The featured types' halo caches under one byte budget (``gnnsys.cache.typed``).

    The budget is ``cache.budget_bytes`` of the part's own feature rows over every featured
    type; ``split_budget`` shares it by bytes saved per budget byte, with each type's degree
    scores as its expected fetches (policy ``degree``). Capacity 0 without a cache.

    Raises:
        ValueError: A cache policy other than ``degree``.
    """
    dims = {t: spec.in_dims[t] for t in spec.featured}
    featured = {t: codecs[t] for t in spec.featured}
    if not spec.cache.enabled:
        return TypedHaloCache.disabled(feature_dims=dims, codecs=featured)
    if spec.cache.policy != "degree":
        raise ValueError(
            f"cache policy {spec.cache.policy!r} is not built for heterogeneous runs; "
            "use --cache-policy degree"
        )
    owned = sum(shard.nodes[t].num_owned * dims[t] * 4 for t in dims)
    scores = {t: _degree_score(shard, t) for t in dims}
    demand = {t: TypeDemand.of(scores[t], featured[t], dims[t]) for t in dims}
    split = split_budget(spec.cache.budget_bytes(owned_feature_bytes=owned), demand)
    policies = {t: make_policy("degree", score_N=scores[t]) for t in dims}
    return TypedHaloCache.build(split, feature_dims=dims, codecs=featured, policies=policies)


def build_sources(
    spec: HeteroWorkerSpec,
    shard: HeteroShard,
    books: dict[str, TypeBook],
    client: OwnerClient,
    peers: Callable[[], PeerClient],
    ledger: TypedLedger,
    embeddings: OwnedEmbeddings | None,
    *,
    step: Callable[[], int],
) -> _Sources:
    """The typed sampler and per-type row sources of one rank (see the module docstring)."""
    rank = spec.rank
    relation_sources: dict[EdgeType, Any] = {}
    for et, rel in shard.relations.items():
        dst = et[2]
        local = CSRNeighborSource(
            rel.indptr, rel.indices_lid, rel.e_id, books[dst].lid_N,
            owned_gid=shard.nodes[dst].owned_lid,
        )  # fmt: skip
        relation_sources[et] = RoutedNeighborSource(
            rank, books[dst].part_N, local, client, ledger.of(dst), edge_type=et
        )
    sampler = HeteroNeighborSampler(
        HeteroNeighborSampler.Config(fanouts=spec.fanouts),
        sources=relation_sources,
        node_types=list(shard.nodes),
    )
    codecs = TypedCodecConfig.from_config(spec.codec, list(shard.nodes)).codecs()
    caches = typed_cache(spec, shard, codecs)
    features, rows = {}, {}
    for t, nodes in shard.nodes.items():
        book = books[t]
        if t in spec.featured:
            features[t] = RoutedFeatureSource(
                rank, book.part_N, book.lid_N, nodes.data["x"], client, ledger.of(t),
                codec=codecs[t], cache=caches.of(t), node_type=t,
            )  # fmt: skip
        elif embeddings is not None:
            rows[t] = RoutedFeatureSource(
                rank, book.part_N, book.lid_N, embeddings.local_rows(t),
                embedding_client(peers, step), ledger.of(t), codec=codecs[t], node_type=t,
            )  # fmt: skip
    return _Sources(BoundSampler(sampler, spec.hetero.input_type), TypedInputs(features, rows))


class HeteroTrainWorker(TrainWorker):
    """The trainer of one rank of a heterogeneous run; see the module docstring.

    Args:
        spec: This rank's spec.
        owners: Owner actor handles (Ray executor); unused with ``client``.
        client: Owner client (the in-process executor passes its own).
        sync: Makes the allreduce + all_gather for this rank's ledger (in-process executor).
        rng_lock: As for ``TrainWorker``.
        peers: Client of the peer ranks (in-process executor): embedding rows, evaluation.
    """

    def __init__(
        self,
        spec: HeteroWorkerSpec,
        owners: list[Any],
        *,
        client: OwnerClient | None = None,
        sync: Callable[[Any], Any] | None = None,
        rng_lock: threading.Lock | None = None,
        peers: PeerClient | None = None,
    ) -> None:
        from gnnsys.store import read_hetero_shard

        use_actor_threads(reserve=1 if spec.trainer.prefetch else 0)  # gnnsys.train.threads
        self.spec = cast(Any, spec)
        self.hspec = spec
        self.hshard = read_hetero_shard(spec.store, spec.rank)
        self.books = load_books(spec.store)
        self.typed_ledger = TypedLedger(list(self.hshard.nodes))
        self.ledger = cast(Any, self.typed_ledger)  # TrainWorker's epoch reports read it
        self.eval_ledger = TypedLedger(list(self.hshard.nodes))
        self.hclient: OwnerClient = client or RayOwnerClient(owners, spec.deadline_s)
        self.peers: PeerClient = peers if peers is not None else LocalPeerClient()
        self.embeddings = self._embeddings()
        grad_sync = sync(self.typed_ledger) if sync is not None else None
        if grad_sync is None and spec.world_size > 1:
            grad_sync = GlooSync(spec.world_size, cast(Any, self.typed_ledger))
        self.htrainer = self._trainer(grad_sync, rng_lock)
        self.trainer = self.htrainer  # TrainWorker's epoch, state and progress methods use it
        self.features = cast(Any, self.htrainer.inputs)
        self.features.warm_up()  # before the first epoch's snapshot: reported as warm-up traffic
        self.warmup = self.ledger.snapshot()
        self._typed_eval: TypedShardEvaluator | None = None
        self._progress = 0
        self._lock = threading.Lock()

    def _embeddings(self) -> OwnedEmbeddings | None:
        featureless = {
            t: s.owned_lid for t, s in self.hshard.nodes.items() if t not in self.hspec.featured
        }
        if not featureless:
            return None
        return OwnedEmbeddings(featureless, embedding_config(self.hspec))

    def _sources(self, ledger: TypedLedger) -> _Sources:
        return build_sources(
            self.hspec, self.hshard, self.books, self.hclient, lambda: self.peers, ledger,
            self.embeddings, step=self._step_count,
        )  # fmt: skip

    def _step_count(self) -> int:
        return 0 if self.embeddings is None else self.embeddings.steps

    def _trainer(self, sync: Any, rng_lock: threading.Lock | None) -> HeteroTrainer:
        spec = self.hspec
        sources = self._sources(self.typed_ledger)
        handles: dict[str, Any] = {
            "model": build_hetero_model(spec), "sampler": sources.sampler,
            "inputs": sources.inputs, "books": self.books, "embeddings": self.embeddings,
            "ledger": self.typed_ledger, "rank": spec.rank, "world_size": spec.world_size,
            "sync": sync, "rng_lock": rng_lock,
        }  # fmt: skip
        if spec.link is not None:
            from gnnsys.store.links import load_typed_links

            self.edge_type, self.links = load_typed_links(spec.store, spec.rank)
            return HeteroLinkTrainer(
                spec.trainer, spec.link, edge_type=self.edge_type,
                train_2E=torch.from_numpy(self.links.train_2E),
                num_dst=self.hshard.nodes[self.edge_type[2]].num_nodes, **handles,
            )  # fmt: skip
        seeds = self.hshard.nodes[spec.hetero.input_type]
        if "y" not in seeds.data or "train_mask" not in seeds.data:
            raise ValueError(
                f"part {spec.rank}: node type {spec.hetero.input_type!r} has no y or "
                "train_mask; partition a dataset with labels on that type"
            )
        pos = np.flatnonzero(np.asarray(seeds.data["train_mask"]))
        return HeteroTrainer(
            spec.trainer,
            train_lid=torch.from_numpy(np.asarray(seeds.owned_lid, dtype=np.int64)[pos]),
            train_y=torch.from_numpy(np.asarray(seeds.data["y"], dtype=np.int64)[pos]),
            **handles,
        )

    # ---- peers: embedding rows and evaluation ---------------------------------------------
    def serve_embedding(
        self, node_type: str, lid: np.ndarray, step: int, codec: Codec
    ) -> EncodedRows:
        """Rows of owned type-local ``lid`` after ``step`` updates, encoded for the wire."""
        if self.embeddings is None:
            raise ValueError(f"rank {self.hspec.rank} holds no embeddings")
        rows = self.embeddings.rows(node_type, lid, step, self.hspec.deadline_s)
        return codec.encode(rows)

    def serve_rows(self, table: int, gid: np.ndarray, codec: Codec) -> EncodedRows:
        """Rows of owned type-local ids ``gid`` of evaluation table ``table``, for the wire.

        A table is a layer input of one node type (``TypedShardEvaluator.table``).
        """
        if self._typed_eval is None:
            raise ValueError(f"rank {self.hspec.rank} has not started evaluating")
        return codec.encode(self._typed_eval.serve_rows(table, gid))

    def eval_layer(self, layer: int) -> None:
        """One step of the sharded exact evaluation (``gnnsys.train.eval_typed``)."""
        if layer == 0 or self._typed_eval is None:
            self._typed_eval = TypedShardEvaluator(
                self.hspec.eval,
                shard=self.hshard,
                books=cast(dict[str, Any], self.books),
                layers=cast(nn.ModuleList, self._encoder().layers),
                input_type=self.hspec.hetero.input_type,
                inputs=self._eval_inputs(),
                peers=self.peers,
                ledger=self.eval_ledger,
            )
        self._typed_eval.run_layer(layer)

    def _encoder(self) -> nn.Module:
        """The model's message-passing stack (a link model's encoder)."""
        model = self.htrainer.model
        return cast(nn.Module, model.encoder) if isinstance(model, LinkModel) else model

    def _eval_inputs(self) -> dict[str, TypeInput]:
        """Layer-0 rows per type: features from the owners, embeddings from their ranks."""
        codecs = TypedCodecConfig.from_config(self.hspec.codec, list(self.hshard.nodes)).codecs()
        out = {}
        for t, nodes in self.hshard.nodes.items():
            if t in self.hspec.featured:
                out[t] = TypeInput(nodes.data["x"], self.hclient, codecs[t])
            elif self.embeddings is not None:
                client = embedding_client(lambda: self.peers, self._step_count)
                out[t] = TypeInput(self.embeddings.local_rows(t), client, codecs[t])
        return out

    def eval_report(self, splits: tuple[str, ...], with_logits: bool = False) -> RankEval:
        """This rank's confusion matrices after the last layer step; frees the tables."""
        assert self._typed_eval is not None  # the group ran eval_layer for every layer first
        link = self.hspec.link
        if link is not None:
            model = cast(LinkModel, self.htrainer.model)
            assert self.links is not None  # loaded with the link trainer
            report = score_typed_links(
                self._typed_eval, self.links, self.edge_type, model, splits, chunk=link.score_chunk
            )
        else:
            report = self._typed_eval.report(splits, with_logits=with_logits)
        return replace(report, peak_rss_bytes=peak_rss())


def hetero_template(
    store: str,
    info: Any,
    *,
    world_size: int,
    trainer: Trainer.Config,
    hetero: HeteroConfig,
    default_fanouts: tuple[int, ...],
    hidden: int,
    dropout: float,
    deadline_s: float,
    codec: CodecConfig,
    cache: CacheConfig,
    evaluation: EvalConfig,
    link: LinkConfig | None = None,
) -> HeteroWorkerSpec:
    """Rank 0's ``HeteroWorkerSpec`` for a store (``HeteroStoreInfo`` ``info``).

    Raises:
        ValueError: The seed type has no features or labels, or an override names an unknown
            relation.
    """
    labelled = bool(info.num_classes) or link is not None  # links need no labels
    if hetero.input_type not in info.feature_dims or not labelled:
        raise ValueError(
            f"node type {hetero.input_type!r} of {store} needs features and labels to be the "
            f"seed type; featured types: {sorted(info.feature_dims)}"
        )
    dim = hetero.embedding_dim or info.feature_dims[hetero.input_type]
    TypedCodecConfig.from_config(codec, list(info.node_types)).codecs()  # refuses unknown types
    return HeteroWorkerSpec(
        rank=0,
        world_size=world_size,
        store=store,
        trainer=trainer,
        hetero=hetero,
        fanouts=hetero.fanouts_of(list(info.edge_types), default_fanouts),
        hidden=hidden,
        dropout=dropout,
        in_dims={t: info.feature_dims.get(t, dim) for t in info.node_types},
        featured=tuple(t for t in info.node_types if t in info.feature_dims),
        num_classes=info.num_classes if link is None else hidden,  # link: embedding width
        deadline_s=deadline_s,
        codec=codec,
        cache=cache,
        eval=evaluation,
        link=link,
    )
