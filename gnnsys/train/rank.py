"""What one rank builds and holds, keyed by node type: ``RankLayout`` and ``RankRuntime``.

Every run is typed: a homogeneous store is the one node type ``gnnsys.types.ONE_TYPE`` with the
one relation ``ONE_RELATION``. Per part ``p`` there are two actors: a ``ShardOwner``
(``gnnsys.train.remote.server``: part ``p``'s per-relation in-edges and per-type feature rows)
and a ``TrainWorker`` (rank ``p``: epoch reports, progress polls, fault injection, gloo group,
checkpoint state), whose :class:`RankRuntime` trains on part ``p``'s labelled seed-type nodes,
holds part ``p``'s embedding rows, serves them to its peers and evaluates its own nodes.

Per rank and node type ``t`` (ids type-local, routed by the type's ``PartitionBook``):

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
from dataclasses import dataclass, replace
from typing import Any, cast

import numpy as np
import torch
from torch import nn

from gnnsys.cache.admission import make_policy, presample_counts, tie_break
from gnnsys.cache.codecs import Codec, PerTypeCodecConfig
from gnnsys.cache.per_type import PerTypeHaloCache, TypeDemand, split_budget
from gnnsys.models import LinkModel, build_decoder
from gnnsys.models.relational import check_gcn_relations
from gnnsys.models.sparse_embedding import EmbeddingConfig
from gnnsys.outputs import OutputRows
from gnnsys.sampler import CSRNeighborSource, DegreeTable
from gnnsys.sampler.neighbor import RelationalSampler
from gnnsys.store.info import StoreInfo, store_info
from gnnsys.store.shard import Shard
from gnnsys.train.device import rank_device
from gnnsys.train.embedding import OwnedEmbeddings, embedding_client
from gnnsys.train.eval.evaluate import RankEval
from gnnsys.train.eval.sharded import ShardEvaluator, TypeInput
from gnnsys.train.inputs import BoundSampler, PerTypeInputs
from gnnsys.train.layer0.base import Placement
from gnnsys.train.layer0.owner_sums import FirstLayerAggregator
from gnnsys.train.link.scoring import score_links
from gnnsys.train.link.trainer import LinkTrainer
from gnnsys.train.node_types import NodeTypesConfig
from gnnsys.train.remote.client import OwnerClient
from gnnsys.train.remote.degrees import RoutedDegreeSource
from gnnsys.train.remote.features import RoutedFeatureSource
from gnnsys.train.remote.ledger import PerTypeLedger
from gnnsys.train.remote.peers import PeerClient
from gnnsys.train.remote.routed import RoutedNeighborSource
from gnnsys.train.trainer import Trainer
from gnnsys.train.worker import WorkerSpec, grad_sync, owner_client, peak_rss
from gnnsys.types import ONE_TYPE, EdgeType, PartitionBook

__all__ = [
    "RankRuntime",
    "RankLayout",
    "rank_model",
    "embedding_config",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RankLayout:
    """What a typed worker derives from its ``WorkerSpec`` and the store's manifest.

    Attributes:
        node_types: The run's ``NodeTypesConfig`` (``spec.node_types``).
        fanouts: Relation -> fanouts per hop (``spec.sampler.fanouts`` unless overridden).
        in_dims: Node type -> input width (features, or the embedding width).
        featured: Node types with stored features.
    """

    node_types: NodeTypesConfig
    fanouts: dict[EdgeType, tuple[int, ...]]
    in_dims: dict[str, int]
    featured: tuple[str, ...]

    @classmethod
    def of(
        cls, spec: WorkerSpec, info: StoreInfo | None = None, *, need_labels: bool = True
    ) -> RankLayout:
        """The layout of ``spec`` over its store (``info``: the store's, read when ``None``).

        ``need_labels=False``: a store without labels is fine (a loader's seeds need none).

        Raises:
            ValueError: The seed type has no features or labels, an override names an unknown
                relation, or the codec an unknown type.
        """
        # a homogeneous store is its one type ``node`` and one relation (gnnsys.types)
        # a PyG model (gnnsys.models.pyg_user) runs on the one relation; ``sage``'s data path
        name = "sage" if spec.model.is_pyg else spec.model.name
        hetero = spec.node_types or NodeTypesConfig(model=name, input_type=ONE_TYPE)
        info = store_info(spec.store) if info is None else info
        dims, types = info.named_dims, info.named_types
        labelled = bool(info.num_classes) or spec.link is not None  # links need no labels
        if hetero.input_type not in dims or (need_labels and not labelled):
            raise ValueError(
                f"node type {hetero.input_type!r} of {spec.store} needs features and labels to "
                f"be the seed type; featured types: {sorted(dims)}"
            )
        PerTypeCodecConfig.from_config(spec.codec, types).codecs()  # refuses unknown types
        if hetero.model == "gcn":
            check_gcn_relations(info.named_relations)
        dim = hetero.embedding_dim or dims[hetero.input_type]
        return cls(
            node_types=hetero,
            fanouts=hetero.fanouts_of(info.named_relations, tuple(spec.sampler.fanouts)),
            in_dims={t: dims.get(t, dim) for t in types},
            featured=tuple(t for t in types if t in dims),
        )


def embedding_config(spec: WorkerSpec, layout: RankLayout) -> EmbeddingConfig:
    """The embeddings of the featureless types (width, seed, sparse optimizer, lr)."""
    featureless = [t for t in layout.in_dims if t not in layout.featured]
    dim = layout.in_dims[featureless[0]] if featureless else 1
    return EmbeddingConfig(
        dim=dim,
        optimizer=layout.node_types.embedding_optimizer,
        lr=layout.node_types.embedding_lr or spec.trainer.lr,
        seed=spec.trainer.seed,
    )


def rank_model(spec: WorkerSpec, layout: RankLayout | None = None) -> nn.Module:
    """``RelationalSAGE``, ``RelationalGCN``, ``RelationalGAT`` or ``RGCN`` (the same everywhere).

    Over one relation from a type to itself they save under ``SAGE``'s, ``GCN``'s and ``GAT``'s
    names. For a link task: that encoder plus the run's decoder (``LinkModel``).
    """
    encoder = _encoder(spec, RankLayout.of(spec) if layout is None else layout)
    if spec.link is None:
        return encoder
    return LinkModel(cast(Any, encoder), build_decoder(spec.link.decoder, spec.num_classes))


def _encoder(spec: WorkerSpec, layout: RankLayout) -> nn.Module:
    from gnnsys.models.registry import build_relational_model

    edge_types, in_dims = list(layout.fanouts), layout.in_dims
    layers = len(next(iter(layout.fanouts.values())))
    hidden, dropout, classes = spec.model.hidden, spec.model.dropout, spec.num_classes
    torch.manual_seed(spec.trainer.seed)
    if spec.model.is_pyg:
        return _pyg_encoder(spec, layout, layers)
    name = layout.node_types.model
    return build_relational_model(name, in_dims, hidden, classes, edge_types, layers, dropout)


def _pyg_encoder(spec: WorkerSpec, layout: RankLayout, layers: int) -> nn.Module:
    """A PyG ``BasicGNN`` of ``--model`` over the one relation (``gnnsys.models.pyg_user``)."""
    from gnnsys.models.pyg_user import build_user_model

    if set(layout.in_dims) != {ONE_TYPE} or len(layout.fanouts) != 1:
        raise ValueError(
            f"--model {spec.model.name} runs on a homogeneous graph; a typed graph takes sage, "
            "gat or rgcn here, or to_hetero(your model) in your own loop on "
            "gnnsys.distributed.DistNeighborLoader"
        )
    out_dim = spec.num_classes
    return build_user_model(
        spec.model.name, spec.model.args, in_dim=layout.in_dims[ONE_TYPE],
        hidden=spec.model.hidden, out_dim=out_dim, num_layers=layers, dropout=spec.model.dropout,
    )  # fmt: skip


@dataclass(frozen=True, slots=True, eq=False)
class _Sources:
    """One rank's sampler and row sources over one ledger (training, or evaluation's own)."""

    sampler: BoundSampler
    inputs: PerTypeInputs


def _degree_score(shard: Shard, node_type: str) -> torch.Tensor:
    """``[N_t]`` in-edges into the part's owned nodes from each halo node of ``node_type``."""
    nodes = shard.nodes[node_type]
    score_N = torch.zeros(nodes.num_nodes, dtype=torch.float64)
    for (src, _, _), rel in shard.relations.items():
        if src == node_type and rel.indices_lid.size:
            src_E = torch.from_numpy(np.asarray(rel.indices_lid, dtype=np.int64))
            score_N += torch.bincount(src_E, minlength=nodes.num_nodes).double()
    score_N[torch.from_numpy(np.asarray(nodes.owned_lid, dtype=np.int64))] = 0.0
    return score_N


def rank_caches(
    spec: WorkerSpec,
    layout: RankLayout,
    shard: Shard,
    codecs: dict[str, Codec],
    draw: Callable[[torch.Tensor, int], dict[str, torch.Tensor]] | None = None,
    seeds: torch.Tensor | None = None,
    device: torch.device | str = "cpu",
) -> PerTypeHaloCache:
    """The featured types' halo caches under one byte budget (``gnnsys.cache.per_type``).

    The budget is ``cache.budget_bytes`` of the part's own feature rows over every featured
    type; ``split_budget`` shares it by bytes saved per budget byte, each type's rows scored
    by the policy's expected fetches: degree scores (``degree``), or a dry run of the typed
    sampler over ``seeds`` (``presample``; ``adaptive`` starts from it), counted per type
    (``presample_counts``, ties broken by degree). Capacity 0 without a cache.

    Args:
        spec: The rank's spec (``cache``, ``trainer`` batch size and seed).
        layout: The run's typed layout (featured types and widths).
        shard: This rank's shard.
        codecs: Each type's run codec.
        draw: ``(seeds, batch seed) -> {type: n_id}`` of one dry-run batch (scored policies).
        seeds: The dry run's seeds (the input type's train ids).
        device: Where the slots live (the trainer's device with ``cache.placement ==
            "device"``, else the host).
    """
    dims = {t: layout.in_dims[t] for t in layout.featured}
    featured = {t: codecs[t] for t in layout.featured}
    if not spec.cache.enabled:
        return PerTypeHaloCache.disabled(feature_dims=dims, codecs=featured, device=device)
    owned_N = {}
    for t in dims:
        owned_N[t] = torch.zeros(shard.nodes[t].num_nodes, dtype=torch.bool)
        owned_N[t][torch.from_numpy(np.asarray(shard.nodes[t].owned_lid, dtype=np.int64))] = True
    scores = {t: _degree_score(shard, t) for t in dims}
    if spec.cache.policy in ("presample", "adaptive"):
        assert draw is not None and seeds is not None  # build_sources passes both
        counts = presample_counts(
            draw, seeds, owned_N, batch_size=spec.trainer.batch_size,
            epochs=spec.cache.presample_epochs, seed=spec.trainer.seed * 7919 + spec.rank,
        )  # fmt: skip
        scores = {t: tie_break(counts[t], scores[t]) for t in dims}
    owned = sum(shard.nodes[t].num_owned * dims[t] * 4 for t in dims)
    demand = {t: TypeDemand.of(scores[t], featured[t], dims[t]) for t in dims}
    split = split_budget(spec.cache.budget_bytes(owned_feature_bytes=owned), demand)
    policies = {
        t: make_policy(
            spec.cache.policy, score_N=scores[t], owned_N=owned_N[t], config=spec.cache.adaptive
        )
        for t in dims
    }
    return PerTypeHaloCache.build(
        split, feature_dims=dims, codecs=featured, policies=policies, device=device
    )


def _first_layer(
    spec: WorkerSpec,
    layout: RankLayout,
    features: dict[str, RoutedFeatureSource],
    codecs: dict[str, Codec],
    books: dict[str, PartitionBook],
    client: OwnerClient,
    ledger: PerTypeLedger,
) -> tuple[frozenset[str], dict[str, FirstLayerAggregator]]:
    """Which featured types' layer-0 reductions are fused or summed at their owners.

    RelationalSAGE's and RelationalGCN's layer 0 is linear per relation
    (``forward_from_first_agg``):
    ``--aggregate-at owner|auto`` gives each featured type an aggregator whose owners sum its
    remote rows; ``requester`` with an int8/int4 type sums them from their codes. RelationalGAT,
    RGCN and link encoders fetch and decode every row (``owner|auto``: rank 0 says so once).
    """
    if layout.node_types.model not in ("sage", "gcn") or spec.link is not None or spec.model.is_pyg:
        if spec.layer0.placement != Placement.REQUESTER and spec.rank == 0:
            model = spec.model.name if spec.model.is_pyg else layout.node_types.model
            what = "link prediction" if spec.link is not None else f"--model {model}"
            log.warning(
                "aggregate_at=%s: %s takes no owner sums (its layer 0 is not a linear reduction "
                "of the rows, or not built for them: only SAGE and GCN node classification "
                "are); aggregating at the requester",
                spec.layer0.placement, what,
            )  # fmt: skip
        return frozenset(), {}
    if spec.layer0.placement != Placement.REQUESTER:
        owner_sums = {
            t: FirstLayerAggregator(
                spec.layer0,
                part=spec.rank,
                part_N=books[t].part_N,
                num_features=layout.in_dims[t],
                client=client,
                ledger=ledger.of(t),
                codec=codecs[t],
                features=source,
                node_type=t,
            )  # fmt: skip
            for t, source in features.items()
        }
        return frozenset(), owner_sums
    if not spec.layer0.fused_dequant:
        return frozenset(), {}
    return frozenset(t for t in features if codecs[t].fused_aggregate), {}


def _dry_run_seeds(spec: WorkerSpec, shard: Shard, layout: RankLayout) -> torch.Tensor:
    """The cache dry run's seeds: the input type's owned train ids.

    All its owned ids when it has no train mask (a link run's seed type may have none).
    """
    nodes = shard.nodes[layout.node_types.input_type]
    owned = np.asarray(nodes.owned_lid, dtype=np.int64)
    mask = nodes.data.get("train_mask")
    return torch.from_numpy(owned if mask is None else owned[np.asarray(mask, dtype=bool)])


def build_sources(
    spec: WorkerSpec,
    layout: RankLayout,
    shard: Shard,
    books: dict[str, PartitionBook],
    client: OwnerClient,
    peers: Callable[[], PeerClient],
    ledger: PerTypeLedger,
    embeddings: OwnedEmbeddings | None,
    *,
    step: Callable[[], int],
    device: torch.device | None = None,
) -> _Sources:
    """The typed sampler and per-type row sources of one rank (see the module docstring).

    ``device``: the trainer's (``None``: the host). With ``cache.placement == "device"`` each
    featured type's own rows (a float32 copy) and cache slots live there, as a homogeneous
    rank's do; on a CPU run nothing moves. Embedding rows stay with their ranks (they change
    every step).
    """
    rank = spec.rank
    on = spec.cache.rows_device("cpu" if device is None else device)
    relation_sources: dict[EdgeType, Any] = {}
    degrees: dict[EdgeType, Any] = {}  # a model that normalises by in-degrees (GCN)
    if spec.topology == "replicated":  # every relation's whole CSR, read once from the store
        from gnnsys.sampler.neighbor import csr_sources
        from gnnsys.store import assemble_hetero

        graph = assemble_hetero(spec.store, with_data=False)
        relation_sources = dict(csr_sources(graph))
        if layout.node_types.model == "gcn":
            degrees = {et: DegreeTable.from_indptr(r.indptr) for et, r in graph.relations.items()}
    for et in shard.relations if not relation_sources else ():
        dst = et[2]
        local = CSRNeighborSource.from_relation(shard, et, books[dst].lid_N, edge_ids=False)
        relation_sources[et] = RoutedNeighborSource(
            rank, books[dst].part_N, local, client, ledger.of(dst), edge_type=et
        )
        if layout.node_types.model == "gcn":  # owned degrees from the shard, halo ones fetched once
            degrees[et] = RoutedDegreeSource.of_relation(
                shard, et, books[dst].part_N, client, ledger.of(dst)
            )
    sampler = RelationalSampler(
        RelationalSampler.Config(fanouts=layout.fanouts),
        sources=relation_sources,
        node_types=list(shard.nodes),
        degrees=degrees,
    )
    codecs = PerTypeCodecConfig.from_config(spec.codec, list(shard.nodes)).codecs()
    input_type = layout.node_types.input_type

    def draw(seeds: torch.Tensor, batch_seed: int) -> dict[str, torch.Tensor]:
        sub = sampler.sample(seeds, input_type=input_type, seed=batch_seed, with_edge_index=False)
        return dict(sub.n_id)

    seeds = _dry_run_seeds(spec, shard, layout)
    caches = rank_caches(spec, layout, shard, codecs, draw, seeds, device=on or "cpu")
    wire = spec.codec.wire if spec.cache.enabled else None  # measured into the cache counters
    features, rows = {}, {}
    for t, nodes in shard.nodes.items():
        book = books[t]
        if t in layout.featured:
            features[t] = RoutedFeatureSource(
                rank, book.part_N, book.lid_N, nodes.data["x"], client, ledger.of(t),
                codec=codecs[t], cache=caches.of(t), node_type=t, wire=wire,
                own_device=on,
            )  # fmt: skip
        elif embeddings is not None:
            rows[t] = RoutedFeatureSource(
                rank, book.part_N, book.lid_N, embeddings.local_rows(t),
                embedding_client(peers, step), ledger.of(t), codec=codecs[t], node_type=t,
            )  # fmt: skip
    inputs = PerTypeInputs(
        features,
        rows,
        *_first_layer(spec, layout, features, codecs, books, client, ledger),
        weighted=layout.node_types.model == "gcn",
    )
    return _Sources(BoundSampler(sampler, layout.node_types.input_type), inputs)


class RankRuntime:
    """What a rank trains, serves and evaluates, keyed by node type (``gnnsys.train.worker.Rank``).

    Args:
        spec: This rank's spec (``spec.node_types``: the typed model and fanouts; ``None`` for a
            homogeneous store, its one type).
        owners: Owner actor handles (Ray executor); unused with ``client``.
        client: Owner client (the in-process executor passes its own).
        sync: Makes the allreduce + all_gather for this rank's ledger (in-process executor).
        rng_lock: Serialises the random part of a step between in-process ranks.
        peers: Returns the current client of the peer ranks: embedding rows, evaluation.
    """

    def __init__(
        self,
        spec: WorkerSpec,
        owners: list[Any],
        *,
        client: OwnerClient | None,
        sync: Callable[[Any], Any] | None,
        rng_lock: threading.Lock | None,
        peers: Callable[[], PeerClient],
    ) -> None:
        from gnnsys.store import load_books, read_shard

        self.spec, self._peers = spec, peers
        self.layout = RankLayout.of(spec)
        self.hshard = read_shard(spec.store, spec.rank)
        self.books = {ONE_TYPE if t is None else t: b for t, b in load_books(spec.store).items()}
        self.ledger = PerTypeLedger(list(self.hshard.nodes))
        self.client = owner_client(spec, owners, client, self.books)
        self.device = rank_device(spec.device.kind, spec.rank)
        self.embeddings = self._embeddings()
        self.trainer = self._trainer(grad_sync(spec, sync, self.ledger), rng_lock)
        self.features = self.trainer.inputs
        self._evaluator: ShardEvaluator | None = None
        self._eval_degrees: dict[EdgeType, torch.Tensor] = {}

    def _embeddings(self) -> OwnedEmbeddings | None:
        featureless = {
            t: s.owned_lid for t, s in self.hshard.nodes.items() if t not in self.layout.featured
        }
        if not featureless:
            return None
        return OwnedEmbeddings(featureless, embedding_config(self.spec, self.layout))

    def _sources(self, ledger: PerTypeLedger) -> _Sources:
        return build_sources(
            self.spec, self.layout, self.hshard, self.books, self.client, self._peers, ledger,
            self.embeddings, step=self._step_count, device=self.device,
        )  # fmt: skip

    def _step_count(self) -> int:
        return 0 if self.embeddings is None else self.embeddings.steps

    def _trainer(self, sync: Any, rng_lock: threading.Lock | None) -> Trainer:
        spec, input_type = self.spec, self.layout.node_types.input_type
        sources = self._sources(self.ledger)
        handles: dict[str, Any] = {
            "model": rank_model(spec, self.layout), "sampler": sources.sampler,
            "inputs": sources.inputs, "books": self.books, "embeddings": self.embeddings,
            "ledger": self.ledger, "rank": spec.rank, "world_size": spec.world_size,
            "sync": sync, "rng_lock": rng_lock,
            "device": self.device,
        }  # fmt: skip
        if spec.link is not None:
            from gnnsys.store.links import load_relation_links

            self.edge_type, self.links = load_relation_links(spec.store, spec.rank)
            return LinkTrainer(
                spec.trainer, spec.link, edge_type=self.edge_type,
                train_2E=torch.from_numpy(self.links.train_2E),
                num_dst=self.hshard.nodes[self.edge_type[2]].num_nodes, **handles,
            )  # fmt: skip
        seeds = self.hshard.nodes[input_type]
        if "y" not in seeds.data or "train_mask" not in seeds.data:
            raise ValueError(
                f"part {spec.rank}: node type {input_type!r} has no y or "
                "train_mask; partition a dataset with labels on that type"
            )
        pos = np.flatnonzero(np.asarray(seeds.data["train_mask"]))
        return Trainer(
            spec.trainer,
            train_lid=torch.from_numpy(np.asarray(seeds.owned_lid, dtype=np.int64)[pos]),
            train_y=torch.from_numpy(np.asarray(seeds.data["y"], dtype=np.int64)[pos]),
            **handles,
        )

    # ---- peers: embedding rows and evaluation ---------------------------------------------
    def serve_embedding(self, node_type: str, lid: np.ndarray, step: int) -> torch.Tensor:
        """Rows of owned type-local ``lid`` of ``node_type`` after ``step`` updates."""
        if self.embeddings is None:
            raise ValueError(f"rank {self.spec.rank} holds no embeddings")
        return self.embeddings.rows(node_type, lid, step, self.spec.deadline_s)

    def serve_rows(self, table: int, gid: np.ndarray) -> torch.Tensor:
        """Rows of owned type-local ids ``gid`` of evaluation table ``table``.

        A table is a layer input of one node type (``ShardEvaluator.table``).
        """
        if self._evaluator is None:
            raise ValueError(f"rank {self.spec.rank} has not started evaluating")
        return self._evaluator.serve_rows(table, gid)

    def owned_outputs(self, layer: int, labelled: bool) -> list[OutputRows]:
        """Each type's owned rows of evaluation table ``layer`` (type-local ids).

        ``labelled``: only the seed type, whose logits the model is trained to give.
        """
        assert self._evaluator is not None  # the group ran the layers before this
        return [
            OutputRows(t, np.asarray(self.hshard.nodes[t].owned_lid, np.int64), rows.numpy())
            for t, rows in self._evaluator.owned(layer).items()
            if not labelled or t == self.layout.node_types.input_type
        ]

    def release_eval(self) -> None:
        """Free the evaluation tables."""
        if self._evaluator is not None:
            self._evaluator.release()

    def serve_degree(self, gid: np.ndarray) -> np.ndarray:
        """Typed models do not normalise by whole-graph degrees (no GCN per relation).

        Raises:
            ValueError: Always.
        """
        raise ValueError(f"rank {self.spec.rank}: typed runs serve no degrees")

    def eval_layer(self, layer: int) -> None:
        """One step of the sharded exact evaluation (``gnnsys.train.eval.sharded``)."""
        if layer == 0 or self._evaluator is None:
            self._evaluator = ShardEvaluator(
                self.spec.eval,
                shard=self.hshard,
                books=cast(dict[str, Any], self.books),
                layers=cast(nn.ModuleList, self._encoder().layers),
                input_type=self.layout.node_types.input_type,
                inputs=self._eval_inputs(),
                peers=self._peers(),
                ledger=PerTypeLedger(list(self.hshard.nodes)),  # each evaluation its own
                owners=self.client,
                degrees=self._eval_degrees,  # GCN's, fetched by the first evaluation
                device_layers=cast(nn.ModuleList, self._encoder(self.trainer.model).layers),
            )
        self._evaluator.run_layer(layer)

    def _encoder(self, model: nn.Module | None = None) -> nn.Module:
        """The message-passing stack (a link model's encoder) of ``model``.

        By default of the host model, with the current weights.
        """
        model = self.trainer.host_model() if model is None else model
        return cast(nn.Module, model.encoder) if isinstance(model, LinkModel) else model

    def _eval_inputs(self) -> dict[str, TypeInput]:
        """Layer-0 rows per type: features from the owners, embeddings from their ranks."""
        codecs = PerTypeCodecConfig.from_config(self.spec.codec, list(self.hshard.nodes)).codecs()
        out = {}
        for t, nodes in self.hshard.nodes.items():
            if t in self.layout.featured:
                cache = self.features.features[t].cache  # capacity 0 without one: none to peek
                peek = cache if cache.capacity_rows else None
                out[t] = TypeInput(nodes.data["x"], self.client, codecs[t], peek)
            elif self.embeddings is not None:
                client = embedding_client(self._peers, self._step_count)
                out[t] = TypeInput(self.embeddings.local_rows(t), client, codecs[t])
        return out

    def eval_report(self, splits: tuple[str, ...], with_logits: bool) -> RankEval:
        """This rank's confusion matrices after the last layer step; frees the tables."""
        assert self._evaluator is not None  # the group ran eval_layer for every layer first
        link = self.spec.link
        if link is not None:
            model = cast(LinkModel, self.trainer.host_model())
            assert self.links is not None  # loaded with the link trainer
            report = score_links(
                self._evaluator, self.links, model, splits,
                chunk=link.score_chunk, edge_type=self.edge_type, with_logits=with_logits,
            )  # fmt: skip
        else:
            report = self._evaluator.report(splits, with_logits=with_logits)
        return replace(report, peak_rss_bytes=peak_rss())
