"""``DistNeighborLoader``: PyG batches of a partition store in a user's ``torch.distributed`` group.

Each process of the group (``torchrun``, Ray Train's ``TorchTrainer``) is rank ``r`` of ``W``
and trains on part ``r`` of a store written by ``gnnsys partition --parts W``. Its loader yields
PyG ``Data`` (``HeteroData`` on a typed store) for the seeds its part owns, so a user's own PyG
model and loop train unchanged::

    dist.init_process_group("gloo")            # torchrun sets the environment
    loader = DistNeighborLoader(store, num_neighbors=[15, 10], batch_size=1024, shuffle=True)
    for batch in loader:                        # the same len(loader) on every rank
        out = model(batch.x, batch.edge_index)[: batch.batch_size]
        loss = F.cross_entropy(out, batch.y)

The data path is ``gnnsys train``'s (``gnnsys.train.rank.build_sources``): the runtime's typed
sampler over the part's in-edges, halo in-edges and halo feature rows read from their owner's
shard (``ShardOwner`` over the mapped store, ``--owner-reads local``: one machine or a shared
file system), through the halo cache under its byte budget and the run's codec (rows reach the
model decoded), counted in a ledger; batches are prepared ``prefetch`` ahead on stage threads
(``gnnsys.prefetch.Prefetcher``). The batches form in ``gnnsys.distributed.batches``, where
``gnnsys train``'s trainer forms its own: with the same settings on the same store, a user's
loop and ``gnnsys train`` step on the very same batches (tested). No rank waits for another to
read halo rows: nothing but the length agreement at construction is a collective.

DDP safety: the batch schedule is ``gnnsys train``'s (``gnnsys.train.schedule``). At
construction the ranks exchange their seed counts (one ``all_gather``, bounded by
``timeout_s``) and agree on ``len(loader)``; every rank then yields exactly that many batches
per epoch, so no rank waits at the last all-reduce for a partner that has stopped.

* ``drop_last=False`` (default): every seed once per epoch; rank ``r``'s seeds are split into
  ``len(loader)`` near-equal batches (``schedule='global'``: ``ceil(all seeds / (batch_size *
  W))`` batches, so a rank with more seeds takes bigger batches; ``'max'``: the largest rank's
  ``ceil(seeds / batch_size)``, no batch above ``batch_size``). A rank with fewer seeds than
  batches yields some empty batches (``batch_size == 0``): compute a zero loss on them (e.g.
  ``out.sum() * 0``) and still call ``backward`` so DDP's all-reduce has its partner.
* ``drop_last=True``: every batch holds exactly ``batch_size`` seeds; ``len(loader)`` is the
  smallest rank's ``seeds // batch_size`` and each rank drops the rest of its shuffled seeds.

Shuffling is global and repeatable: epoch ``e`` gives every seed of the graph a key that
depends only on ``(seed, e)`` and the seed's id (``gnnsys.train.schedule.item_keys``), so every
rank takes its seeds in one global order without a collective. With ``schedule='global'``
batch ``b`` holds the seeds whose key falls in the ``b``-th of ``len(loader)`` equal key ranges:
the union of batch ``b`` over the ranks is a one-part run's batch ``b`` (the same seeds, however
the graph is partitioned), and a rank's batch size varies around its share, as under a global
``DistributedSampler``. ``schedule='max'`` and ``drop_last`` split the rank's share of the
global order in turn. Batch ``b``'s sampler seed is ``(seed, r, e, b)``. Each ``iter(loader)``
starts the next epoch (``set_epoch`` sets it, as ``DistributedSampler.set_epoch`` does).

Differences from ``torch_geometric.distributed.DistNeighborLoader``:

* the partitions are opened from a store path, not ``(LocalFeatureStore, LocalGraphStore)``;
  there is no ``master_addr``/``current_ctx``: the user's process group is the context;
* ``input_nodes`` is the *whole* seed set (the same on every rank: ids or a bool mask over the
  graph, ``DistDGL``'s ``node_split`` rule); each rank takes the seeds its part owns.
  ``None`` is the store's train mask;
* ``y`` holds the seeds' labels only (``batch.y[:batch.batch_size]`` reads the same): a halo
  node's label lives with its owner and is never sent;
* a typed store's featureless types have no ``x``: give them an ``nn.Embedding`` indexed by
  ``batch[t].n_id``, as PyG's MAG examples do.

Speed: nodes and edges come ordered by hop, so ``gnnsys.models.pyg_user.HopTrimmed(model)``
runs a PyG ``BasicGNN`` on only the rows each layer needs (the plain model computes every layer
for every sampled node); leave one core per rank to the stage threads
(``torch.set_num_threads(cores - 1)``), as ``gnnsys train`` does.

Shape legend: ``N`` sampled nodes, ``E`` sampled edges, ``B`` seeds, ``F`` features.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch import distributed as dist

from gnnsys.distributed.metrics import DEFAULT_TIMEOUT_S, _check_group, all_gather_counts
from gnnsys.distributed.pyg_format import SPLITS, pyg_format
from gnnsys.types import ONE_TYPE, EdgeType

__all__ = ["DistNeighborLoader"]


def _group(what: str) -> tuple[int, int]:
    """``(rank, world_size)`` of the user's process group; a clear error without one."""
    try:
        _check_group()
    except RuntimeError as err:
        raise RuntimeError(f"{what}: {err}") from None
    return dist.get_rank(), dist.get_world_size()


def _check_settings(batch_size: Any, num_workers: Any, prefetch: Any, schedule: Any) -> None:
    """A clear error naming the bad loader setting and what to pass instead."""
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r}; pass an int >= 1")
    if not isinstance(num_workers, int) or num_workers < 0:
        raise ValueError(f"num_workers={num_workers!r}; pass an int >= 0")
    if not isinstance(prefetch, int) or prefetch < 0:
        raise ValueError(f"prefetch={prefetch!r}; pass an int >= 0")
    if schedule not in ("global", "max"):
        raise ValueError(f"schedule={schedule!r}; choose 'global' or 'max'")


LAYER0 = ("rows", "owner", "fused")
"""``DistNeighborLoader``'s ``layer0`` choices (its docstring)."""


def _check_layer0(layer0: Any) -> str:
    if layer0 not in LAYER0:
        raise ValueError(f"layer0={layer0!r}; choose one of {LAYER0}")
    return str(layer0)


def _first_layer(layer0: str, codec: Any) -> Any:
    """The runtime's layer-0 settings for ``layer0`` (``rows``: no reduction in the loader)."""
    from gnnsys.train.layer0.base import FirstLayerConfig, Placement

    if layer0 == "fused" and not codec.make().fused_aggregate:
        raise ValueError(
            f"layer0='fused' sums rows from their codes: pass codec='int8' or 'int4', not "
            f"{codec.name!r} (or layer0='owner')"
        )
    placement = Placement.OWNER if layer0 == "owner" else Placement.REQUESTER
    return FirstLayerConfig(placement=placement, fused_dequant=layer0 == "fused")


class DistNeighborLoader:
    """Neighbor-sampled PyG batches of this rank's seeds, over a gnnsys partition store.

    Args:
        store: Directory written by ``gnnsys partition`` with one part per rank.
        num_neighbors: Fanouts per hop, seed hop first (``-1``: all); on a typed store also a
            dict ``{edge_type: fanouts}`` with an entry for every relation.
        input_nodes: The seeds over the whole graph, the same on every rank: ``None`` (the
            store's train mask), ``'train'``, ``'val'`` or ``'test'`` (that mask), a 1-D bool
            mask or id tensor; on a typed store the seed type's name (its train mask) or
            ``(type, split | mask | ids)``.
            Each rank takes the seeds its part owns.
        batch_size: Seeds per batch per rank (see the module docstring for ``drop_last``).
        shuffle: A fresh seeded order every epoch (else the seeds' order, split in turn).
        drop_last: Equal, full batches only (the rest of each rank's seeds skipped per epoch).
        num_workers: Threads that sample ahead (the fetch stage is one more thread).
        seed: Makes the order and the sampling repeatable.
        codec: How halo rows travel (``fp32``, ``fp16``, ``bf16``, ``int8``, ``int4``,
            ``binary``, or a ``CodecConfig``); the model always receives float32 rows.
        cache: Halo cache budget and policy (``gnnsys.cache.CacheConfig``; ``None``: none).
        prefetch: Batches prepared ahead of the loop (0: each batch made when asked for).
        schedule: ``global`` or ``max``, as ``gnnsys train --batch-schedule``.
        timeout_s: Seconds any remote call or collective of the loader waits before it raises.
        verify: Check the part's files against their checksums when opened.
        layer0: ``rows`` (default: every sampled node's row in ``x``), or an opt-in for a model
            whose layer 0 is a mean of in-neighbour rows (``HopTrimmed`` of a mean
            ``SAGEConv``): ``owner`` (each halo row's owner sums its rows and sends partial
            sums) or ``fused`` (int8/int4 rows summed from their codes, never decoded). Then
            ``x`` holds only layer 0's destinations (the first ``sum(num_sampled_nodes[:-1])``
            nodes) and ``agg0`` their mean in-neighbour row; homogeneous stores.

    Attributes:
        num_classes: Classes of the store's labels (0 without labels).
        num_features: Width of the seed type's feature rows.
        rank_seeds: Every rank's seed count, as agreed at construction.

    Raises:
        RuntimeError: No ``torch.distributed`` process group has been initialised.
        ValueError: The store's part count differs from the world size; ``input_nodes`` has
            ids outside the graph or does not match the store's kind; bad fanouts.
        PartitionStoreError: The store is missing or its checksums fail (naming the file).
    """

    def __init__(
        self,
        store: str | os.PathLike[str],
        num_neighbors: list[int] | tuple[int, ...] | dict[Any, list[int]],
        *,
        input_nodes: Any = None,
        batch_size: int = 1,
        shuffle: bool = False,
        drop_last: bool = False,
        num_workers: int = 0,
        seed: int = 0,
        codec: Any = "fp32",
        cache: Any = None,
        prefetch: int = 2,
        schedule: str = "global",
        timeout_s: float = DEFAULT_TIMEOUT_S,
        verify: bool = True,
        layer0: str = "rows",
    ) -> None:
        self._open(store, verify, batch_size, num_workers, prefetch, schedule)
        self._settings(batch_size, shuffle, drop_last, num_workers, seed, prefetch, timeout_s)
        self.layer0 = _check_layer0(layer0)
        self.format.check_layer0(self.layer0)
        self.input_type, seeds_given = self.format.input_type(self.store, input_nodes, self.info)
        self._sources, self.ledger, self.layout = self._build(num_neighbors, codec, cache)
        self.seed_gid, self.input_id, self.seed_y = self._seeds(seeds_given)
        self._num_batches = self._agree(schedule)

    # ---- construction ---------------------------------------------------------------------
    def _open(
        self,
        store: Any,
        verify: bool,
        batch_size: Any,
        num_workers: Any,
        prefetch: Any,
        schedule: Any,
    ) -> None:
        """The group, the settings, the store's summary and this rank's part (checksummed).

        An error naming both fixes when the store's parts and the group's ranks differ.
        """
        from gnnsys.store import load_books, read_shard
        from gnnsys.store.info import store_info

        what = type(self).__name__
        self.rank, self.world_size = _group(what)
        _check_settings(batch_size, num_workers, prefetch, schedule)
        self.store, self.epoch, self.schedule = Path(store), 0, schedule
        if not self.store.is_dir():
            raise FileNotFoundError(
                f"store {str(self.store)!r} is not a directory; write one with "
                f"`gnnsys partition ... --parts {self.world_size} --out DIR`"
            )
        self.info = info = store_info(self.store)
        if info.num_parts != self.world_size:
            raise ValueError(
                f"store {self.store} has {info.num_parts} parts but the process group has "
                f"{self.world_size} ranks; each rank trains on one part: re-partition with "
                f"`gnnsys partition ... --parts {self.world_size}` or launch "
                f"{info.num_parts} ranks (torchrun --nproc-per-node {info.num_parts})"
            )
        self.format = pyg_format(info)  # PyG's batch kind: Data or HeteroData
        self.typed, self.num_classes = self.format.typed, int(info.num_classes)
        self.shard = read_shard(self.store, self.rank, verify=verify)
        self._raw_books = load_books(self.store)  # keyed None on a homogeneous store
        self.books = {ONE_TYPE if t is None else t: b for t, b in self._raw_books.items()}

    def _settings(
        self, batch_size: int, shuffle: bool, drop_last: bool, num_workers: int, seed: int,
        prefetch: int, timeout_s: float,
    ) -> None:  # fmt: skip
        """The iteration settings (checked by ``_open``)."""
        self.batch_size, self.shuffle, self.drop_last = batch_size, bool(shuffle), bool(drop_last)
        self.num_workers, self.prefetch, self.seed = num_workers, prefetch, int(seed)
        self.timeout_s = float(timeout_s)

    layer0 = "rows"
    """How layer 0's rows arrive (``DistNeighborLoader``'s ``layer0``)."""

    def _build(self, num_neighbors: Any, codec: Any, cache: Any) -> tuple[Any, Any, Any]:
        """The runtime's sampler and row sources for this rank (``build_sources``)."""
        from gnnsys.cache import CacheConfig
        from gnnsys.cache.codecs import CodecConfig
        from gnnsys.models import ModelConfig
        from gnnsys.sampler import NeighborSampler
        from gnnsys.train.rank import RankLayout, build_sources
        from gnnsys.train.remote.ledger import PerTypeLedger
        from gnnsys.train.remote.server import LocalOwnerClient, ShardOwner
        from gnnsys.train.trainer import Trainer
        from gnnsys.train.worker import WorkerSpec

        codec = codec if isinstance(codec, CodecConfig) else CodecConfig(name=str(codec))
        if codec.name == "auto":
            raise ValueError("codec='auto' is resolved by `gnnsys train`; name a codec here")
        cache = CacheConfig() if cache is None else cache
        if not isinstance(cache, CacheConfig):
            raise TypeError(f"cache={cache!r}; pass a gnnsys.cache.CacheConfig or None")
        info = self.info
        self.num_features = int(info.named_dims.get(self.input_type, 0))
        relations: list[EdgeType] = [(et[0], et[1], et[2]) for et in info.named_relations]
        per_relation = self._fanouts(num_neighbors, relations)
        any_fanouts = next(iter(per_relation.values()))
        dims = info.named_dims
        # the layout's seed type is a featured one; the loader seeds any type (its own sample)
        featured = (
            self.input_type if self.input_type in dims else min(dims, default=self.input_type)
        )
        hetero = self.format.node_types_config(featured)
        spec = WorkerSpec(
            rank=self.rank, world_size=self.world_size, store=str(self.store),
            topology="partitioned",
            trainer=Trainer.Config(batch_size=self.batch_size, seed=self.seed),
            sampler=NeighborSampler.Config(fanouts=any_fanouts),
            model=ModelConfig(name="sage"),
            num_features=int(dims.get(self.input_type, 0)),
            num_classes=max(1, int(info.num_classes)), deadline_s=self.timeout_s,
            codec=codec, cache=cache, owner_reads="local", node_types=hetero,
            layer0=_first_layer(self.layer0, codec),
        )  # fmt: skip
        layout = replace(RankLayout.of(spec, info, need_labels=False), fanouts=per_relation)
        ledger = PerTypeLedger(list(self.shard.nodes))
        owners = [
            ShardOwner(str(self.store), p, own_threads=False, books=self._raw_books)
            for p in range(self.world_size)
        ]
        sources = build_sources(
            spec, layout, self.shard, self.books, LocalOwnerClient(owners), _no_peers, ledger,
            None, step=lambda: 0,
        )  # fmt: skip
        return sources, ledger, layout

    def _fanouts(
        self, num_neighbors: Any, relations: list[EdgeType]
    ) -> dict[EdgeType, tuple[int, ...]]:
        """Relation -> fanouts (a list: the same for every relation)."""
        if isinstance(num_neighbors, dict):
            self.format.relation_fanouts(num_neighbors)
            keys = {tuple(k) for k in num_neighbors}
            missing, extra = set(relations) - keys, keys - set(relations)
            if missing or extra:
                raise ValueError(
                    f"num_neighbors needs an entry for every relation of the store, exactly; "
                    f"missing {sorted(missing)}, unknown {sorted(extra)}"
                )
            out = {tuple(k): tuple(int(f) for f in v) for k, v in num_neighbors.items()}
        else:
            fanouts = tuple(int(f) for f in num_neighbors)
            out = {et: fanouts for et in relations}
        hops = {len(f) for f in out.values()}
        if len(hops) != 1 or 0 in hops:
            raise ValueError(f"num_neighbors: every relation needs the same >= 1 hops, got {out}")
        if any(f < -1 for fs in out.values() for f in fs):
            raise ValueError(f"num_neighbors must be >= -1 (-1 = all), got {out}")
        return out

    def _seeds(self, given: Any) -> tuple[Tensor, Tensor, Tensor | None]:
        """This rank's seeds (type-local ids), their ``input_id`` and labels."""
        nodes = self.shard.nodes[self.input_type]
        book = self.books[self.input_type]
        num_nodes = int(nodes.num_nodes)
        owned = np.asarray(nodes.owned_lid, dtype=np.int64)
        if given is None or (isinstance(given, str) and given in SPLITS):
            split = "train" if given is None else given
            mask = nodes.data.get(f"{split}_mask")
            if mask is None:
                raise ValueError(
                    f"input_nodes={given!r} takes the store's {split}_mask, and node type "
                    f"{self.input_type!r} of {self.store} has none: pass the seeds"
                )
            gid = owned[np.asarray(mask, dtype=bool)]
            input_id = torch.from_numpy(gid.copy())
        else:
            from gnnsys.loader.base_loader import input_gid

            try:
                all_gid = input_gid(given, num_nodes)
            except (TypeError, ValueError) as err:
                raise type(err)(f"DistNeighborLoader: {err}") from None
            mine = torch.from_numpy(book.part_N[all_gid.numpy()] == self.rank)
            gid = all_gid[mine].numpy()
            is_mask = isinstance(given, Tensor) and given.dtype == torch.bool
            input_id = torch.from_numpy(gid.copy()) if is_mask else torch.nonzero(mine).squeeze(1)
        y = nodes.data.get("y")
        labels = None
        if y is not None:
            labels = torch.from_numpy(np.asarray(y)[book.lid_N[gid]].astype(np.int64, copy=False))
        return torch.from_numpy(np.ascontiguousarray(gid)), input_id, labels

    def _agree(self, schedule: str) -> int:
        """``len(loader)``, from every rank's seed count (the same on every rank)."""
        from gnnsys.train.schedule import BatchPlan, steps_per_epoch

        counts = all_gather_counts(
            [self._num_items()], f"{type(self).__name__}'s seed-count all_gather",
            self.timeout_s,
        )  # fmt: skip
        self.rank_seeds = [int(c) for c in counts[:, 0]]
        if self.drop_last:
            fewest = min(self.rank_seeds)
            if fewest < self.batch_size:
                raise ValueError(
                    f"drop_last=True: a rank holds {fewest} seeds, fewer than batch_size="
                    f"{self.batch_size}, so no rank could yield a full batch; lower batch_size "
                    "or pass drop_last=False"
                )
            return fewest // self.batch_size
        if sum(self.rank_seeds) == 0:
            raise ValueError("no rank holds a seed: input_nodes selects no node of the graph")
        return steps_per_epoch([BatchPlan(n, self.batch_size, schedule) for n in self.rank_seeds])

    # ---- iteration ------------------------------------------------------------------------
    def __len__(self) -> int:
        """Batches per epoch, the same on every rank."""
        return self._num_batches

    def set_epoch(self, epoch: int) -> None:
        """The next ``iter(loader)`` runs epoch ``epoch`` (its order and sampling)."""
        self.epoch = int(epoch)

    def __iter__(self) -> Iterator[Any]:
        """One epoch of ``len(self)`` batches; each call starts the next epoch.

        The epoch's positions and stages are ``gnnsys train``'s (``gnnsys.distributed.batches``):
        the sample stage, then the fetch stage that joins rows into ``Data``/``HeteroData``.
        """
        from gnnsys.distributed.batches import epoch_feed, epoch_positions
        from gnnsys.loader.base_loader import _Delivered

        epoch, self.epoch = self.epoch, self.epoch + 1
        positions = epoch_positions(
            self._item_ids(), self._num_batches, seed=self.seed, epoch=epoch,
            shuffle=self.shuffle, schedule=self.schedule,
            batch_size=self.batch_size if self.drop_last else None,
        )  # fmt: skip
        feed = epoch_feed(
            positions, self._sample, seed=self.seed, rank=self.rank, epoch=epoch,
            prefetch=self.prefetch, then=(self._batch,),
            workers=1 if self.prefetch == 0 else max(1, self.num_workers),
            name=f"gnnsys-distloader-{self.rank}",
        )  # fmt: skip
        return _Delivered(feed, lambda batch: batch)  # closing it stops the stage threads

    # ---- the hooks of a seed kind (nodes here, links in DistLinkNeighborLoader) ---------------
    def _num_items(self) -> int:
        """Seeds of this rank (nodes; links for the link loader): its ``_item_ids``."""
        return int(self._item_ids().shape[-1])

    def _item_ids(self) -> Tensor:
        """The seeds' global identities (``[n]`` node ids; ``[2, n]`` a link's endpoints)."""
        return self.seed_gid

    def _sample(self, pos: Tensor, seed: int) -> tuple[Any, Any]:
        """``(extra, subgraph)`` of the seeds at ``pos``: the sampler stage."""
        sampler = self._sources.sampler.sampler
        sub = sampler.sample(
            self.seed_gid[pos], input_type=self.input_type, seed=seed, with_edge_index=True
        )
        return None, sub

    def _fields(self, batch: Any, extra: Any, pos: Tensor, batch_size: int) -> Any:
        """The seed kind's fields of ``batch``: ``batch_size``, ``input_id`` and the labels."""
        seeds = self.format.of_type(batch, self.input_type)
        seeds.batch_size, seeds.input_id = batch_size, self.input_id[pos]
        if self.seed_y is not None:
            seeds.y = self.seed_y[pos]
        return batch

    def _batch(self, item: Any) -> Any:
        """The fetch stage: rows through cache and codec, joined into ``Data``/``HeteroData``."""
        pos, extra, sub = item.pos_B, item.extra, item.sub
        if sub is None:
            empty = self._empty()
            if self.layer0 != "rows":  # the opt-in's field too, with no rows
                empty.agg0 = empty.x
            return self._fields(empty, None, pos, 0)
        if self.layer0 == "rows":
            x_dict, _ = self._sources.inputs.fetch(sub)
            return self._fields(self._join(sub, x_dict), extra, pos, int(sub.batch_size))
        x_dict, _, agg = self._sources.inputs.fetch_first(sub)  # layer 0's means, done here
        batch = self._join(sub, x_dict)
        ((_, batch.agg0),) = agg.items()
        return self._fields(batch, extra, pos, int(sub.batch_size))

    def _join(self, sub: Any, x_dict: dict[str, Tensor]) -> Any:
        """``Data`` (one node type) or ``HeteroData`` of a sampled subgraph and its rows."""
        return self.format.join(sub, x_dict)

    def _empty(self) -> Any:
        """A batch without seeds (a rank with fewer seeds than batches): every field, no rows."""
        hops = len(next(iter(self.layout.fanouts.values())))
        width = {t: self.layout.in_dims[t] for t in self.layout.featured}
        x = {t: torch.zeros(0, f) for t, f in width.items()}
        n_id = {t: torch.zeros(0, dtype=torch.int64) for t in self.shard.nodes}
        sub = _EmptySub(
            n_id=n_id,
            edge_index={et: torch.zeros(2, 0, dtype=torch.int64) for et in self.layout.fanouts},
            num_sampled_nodes={t: (0,) * (hops + 1) for t in n_id},
            num_sampled_edges={et: (0,) * hops for et in self.layout.fanouts},
        )
        return self._join(sub, x)

    # ---- what the data path did ----------------------------------------------------------
    def cache_counters(self) -> Any:
        """The halo caches' counters (hits, misses, bytes), or ``None`` without a cache."""
        return self._sources.inputs.counters()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(store={str(self.store)!r}, rank={self.rank}/"
            f"{self.world_size}, seeds={self._num_items()}, batches={len(self)})"
        )


class _EmptySub:
    """The fields of a ``RelationalSubgraph`` that the join reads, for a batch without seeds."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


def _no_peers() -> Any:
    raise RuntimeError("DistNeighborLoader serves no embedding rows (featureless types have no x)")
