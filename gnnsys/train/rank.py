"""``NodeRank``: the graph-kind side of a rank of a graph with one node type.

It reads part ``p``'s shard and book, wires the sampler (whole-graph CSR when replicated, routed
by owner when partitioned), the feature source (own rows from the shard, halo rows through the
cache and codec), the model and the trainer (node classification or link prediction), and runs
the sharded exact evaluation (``gnnsys.train.evaluate.ShardEvaluator``). ``TrainWorker``
(``gnnsys.train.worker``) is the actor around it; a typed store's rank is
``gnnsys.train.hetero.rank.TypedRank``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from torch import Tensor

from gnnsys.models import BlockModel, LinkModel, build_decoder, build_model
from gnnsys.outputs import OutputRows
from gnnsys.store import ShardLinks
from gnnsys.train.device import rank_device
from gnnsys.train.evaluate import RankEval, ShardEvaluator
from gnnsys.train.layer0.owner_sums import build_first_layer
from gnnsys.train.link.scoring import score_links
from gnnsys.train.link.trainer import LinkTrainer
from gnnsys.train.remote.client import OwnerClient
from gnnsys.train.remote.degrees import RoutedDegreeSource
from gnnsys.train.remote.features import RoutedFeatureSource, build_feature_source
from gnnsys.train.remote.ledger import Ledger
from gnnsys.train.remote.peers import PeerClient
from gnnsys.train.remote.routed import RoutedNeighborSource
from gnnsys.train.topology import assemble_graph
from gnnsys.train.trainer import GradSync, Trainer
from gnnsys.train.worker import WorkerSpec, grad_sync, owner_client
from gnnsys.types import PartitionBook, PartitionShard

if TYPE_CHECKING:
    from gnnsys.sampler import DegreeSource, NeighborSampler

__all__ = ["NodeRank"]


@dataclass(frozen=True, slots=True, eq=False)
class _Built:
    """What ``_build_trainer`` wires: the trainer and the feature source it fetches through."""

    trainer: Trainer
    features: RoutedFeatureSource


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
        local = CSRNeighborSource.from_shard(shard, book.lid_N, edge_ids=False)  # unread
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
    device = rank_device(spec.device.kind, spec.rank)
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
        device=device,
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
    handles = _Handles(sampler, features, spec.rank, sync, rng_lock, first_layer, device)
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
        device=device,
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
    device: torch.device


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
        device=handles.device,
    )


class NodeRank:
    """The graph-kind side of a rank of a one-type graph (``gnnsys.train.worker.Rank``).

    Args:
        spec: This rank's spec (``spec.hetero`` is ``None``).
        owners: Owner actor handles (Ray executor); unused with ``client``.
        client: Owner client (the in-process executor passes its own).
        sync: Makes the allreduce for this rank's ledger (in-process executor); gloo otherwise.
        rng_lock: Serialises the random part of a step between in-process ranks.
        peers: Returns the current client of the peer ranks (evaluation rows).
    """

    def __init__(
        self,
        spec: WorkerSpec,
        owners: list[Any],
        *,
        client: OwnerClient | None,
        sync: Callable[[Ledger], GradSync] | None,
        rng_lock: threading.Lock | None,
        peers: Callable[[], PeerClient],
    ) -> None:
        from gnnsys.store import load_book, load_links, load_shard
        from gnnsys.store.pages import advise_random

        self.spec, self._peers = spec, peers
        self.ledger = Ledger()
        self.shard, self.book = load_shard(spec.store, spec.rank), load_book(spec.store)
        book = self.book
        self.client = owner_client(spec, owners, client, {None: book})
        advise_random(self.shard.x, self.shard.indptr, self.shard.indices_gid, self.shard.e_id)
        self.links = None if spec.link is None else load_links(spec.store, spec.rank)
        built = _build_trainer(
            spec, self.shard, self.book, self.client, self.ledger,
            grad_sync(spec, sync, self.ledger), rng_lock, self.links,
        )  # fmt: skip
        self.trainer, self.features = built.trainer, built.features
        self._evaluator: ShardEvaluator | None = None

    def eval_layer(self, layer: int) -> None:
        """Compute this rank's outputs of layer ``layer`` (every rank finished ``layer - 1``)."""
        if layer == 0 or self._evaluator is None:  # an evaluation starts at layer 0
            host = self.trainer.host_model()  # its host copy takes the current weights now
            if self._evaluator is None:
                cache = self.features.cache  # capacity 0 without one: nothing to peek at
                self._evaluator = ShardEvaluator(
                    self.spec.eval,
                    shard=self.shard,
                    book=self.book,
                    model=host.encoder if isinstance(host, LinkModel) else host,
                    owners=self.client,
                    peers=self._peers(),
                    feature_codec=self.features.codec,
                    cache=cache if cache.capacity_rows else None,
                    device_model=self.trainer.encoder(),  # on a CPU run: the model itself
                )
        self._evaluator.run_layer(layer)

    def eval_report(self, splits: tuple[str, ...], with_logits: bool) -> RankEval:
        """This rank's confusion matrices (and binary scores) after the last layer."""
        assert self._evaluator is not None  # the group ran eval_layer for every layer first
        if self.spec.link is None:
            return self._evaluator.report(splits, with_logits=with_logits)
        assert self.links is not None  # loaded with the spec's link task
        model = cast(LinkModel, self.trainer.host_model())
        chunk = self.spec.link.score_chunk
        return score_links(
            self._evaluator, self.links, model, splits, chunk=chunk, with_logits=with_logits
        )

    def serve_rows(self, table: int, gid: np.ndarray) -> Tensor:
        """Rows of owned ``gid`` in evaluation table ``table``."""
        if self._evaluator is None:
            raise ValueError(f"rank {self.spec.rank} has not started evaluating")
        return self._evaluator.serve_rows(table, gid)

    def owned_outputs(self, layer: int, labelled: bool) -> list[OutputRows]:
        """The owned nodes' rows of evaluation table ``layer`` (gids, in shard order).

        ``labelled`` changes nothing: the graph's one type is the labelled one.
        """
        assert self._evaluator is not None  # the group ran the layers before this
        gid_M = np.asarray(self.shard.owned_gid, dtype=np.int64)
        return [OutputRows(None, gid_M, self._evaluator.owned_table(layer).numpy())]

    def release_eval(self) -> None:
        """Free the evaluation tables."""
        if self._evaluator is not None:
            self._evaluator.release()

    def serve_degree(self, gid: np.ndarray) -> np.ndarray:
        """``[K]`` whole-graph in-degrees of owned ``gid`` (a shard row's length)."""
        lid = self.book.lid_N[np.asarray(gid, dtype=np.int64)]
        indptr = np.asarray(self.shard.indptr, dtype=np.int64)
        out: np.ndarray = indptr[lid + 1] - indptr[lid]
        return out

    def serve_embedding(self, node_type: str, lid: np.ndarray, step: int) -> Tensor:
        """A one-type graph has no learnable embedding rows.

        Raises:
            ValueError: Always.
        """
        raise ValueError(f"rank {self.spec.rank} holds no embeddings (one node type, featured)")
