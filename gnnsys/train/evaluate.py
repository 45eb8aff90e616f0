"""Sharded exact evaluation: every rank computes the full-neighbourhood outputs of its own nodes.

Layer-wise inference, as PyG's and DGL's ``inference`` loops do on one machine, split by owner.
The worker group runs one layer on every rank, waits for all, then the next::

    for l in range(L):
        x_src = [h_l(owned) ; h_l(halo)]               # halo = 1-hop in-neighbors owned elsewhere
        h_{l+1}(owned) = layer_l(x_src, shard block)    # every in-edge of every owned node
    logits(owned) -> per-split confusion matrices (+ binary scores) -> the driver adds them

``h_0`` are the features: halo rows come from the shard owners in the run codec, and rows that
the worker's halo cache already holds are read from it without touching its counters or its
admission policy (evaluation never changes what training fetches). ``h_l`` for ``l >= 1`` are
embeddings a peer computed in the previous step: each rank asks each peer once per layer for
the rows of its halo owned there, encoded with ``Config.codec`` (fp32 by default). The peers
serve from their own table while they compute the next one, so nothing waits on anything but
the previous layer. No process holds more than its shard block, its halo rows and two
activations of its own nodes (in unlinked memory-mapped files, i.e. page cache, when larger than
``EvalConfig.spill_mb``; ``gnnsys.train.eval_memory``); the driver holds only the summed counts.

Exactness: a rank's block has every in-edge of its nodes, and GCN normalises with the in-degrees
of the whole graph (``Block.src_in_degree``; a halo node's comes from its owner once), so the
logits equal :func:`full_graph_logits` on the assembled graph (tested to 1e-5 at P = 1, 2, 4).

Shape legend: ``M`` owned nodes, ``H`` halo nodes of the block, ``E`` in-edges of owned nodes,
``F`` input width of a layer, ``C`` classes.
"""

from __future__ import annotations

import resource
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import torch
from torch import Tensor, nn

from gnnsys.cache import HaloCache
from gnnsys.cache.codecs import CODECS, Codec, make_codec
from gnnsys.models import BlockModel, GCNLayer
from gnnsys.store.pages import release_pages
from gnnsys.train.device import StepDevice
from gnnsys.train.eval_blocked import blocked_layer
from gnnsys.train.eval_blocks import (
    HaloIndex,
    LayerwiseModel,
    chunk_blocks,
    full_block,
    full_graph_logits,
    gather_rows,
    halo_index,
    halo_spans,
    linear_layer_outputs,
    linear_run,
    model_device,
    restricted,
)
from gnnsys.train.eval_memory import (
    EVAL_MMAP_THRESHOLD,
    TRAIN_MMAP_THRESHOLD,
    LayerTables,
    eval_tick,
    eval_ticks,
    release_free_memory,
    set_mmap_threshold,
)
from gnnsys.train.eval_rows import fill_cached, fill_remote, rows_of
from gnnsys.train.metrics import (
    LINK_METRICS,
    METRICS,
    accuracy,
    link_metrics,
    macro_f1,
    roc_auc,
    split_counts,
)
from gnnsys.train.remote.client import OwnerClient
from gnnsys.train.remote.ledger import Ledger, LedgerSnapshot
from gnnsys.train.remote.peers import PeerClient
from gnnsys.train.remote.routed import group_by_owner
from gnnsys.types import PartitionBook, PartitionShard

__all__ = [
    "SPLITS",
    "EvalConfig",
    "EvalResult",
    "RankEval",
    "ShardEvaluator",
    "combine_evals",
    "eval_ticks",  # the worker's progress while it evaluates (defined in eval_memory)
    "full_block",
    "full_graph_logits",
    "release_free_memory",  # gnnsys.build.runtime's import (defined in eval_memory)
]

SPLITS = ("train", "val", "test")


@dataclass(frozen=True, kw_only=True, slots=True)
class EvalConfig:
    """When and how the ranks evaluate."""

    codec: str = "fp32"
    """Codec of the halo embeddings of layers >= 1 (``--eval-codec``); features keep the run's
    codec. A lossy codec trades exactness for bytes; ``summary.json`` reports the metrics."""
    every: int = 1
    """Evaluate every ``every`` epochs and after the last (``--eval-every``); 0 never
    (traffic replays)."""
    test_at_end: bool = False
    """Per-epoch evaluations report train and val only; test once, after the last epoch."""
    metric: str = "auto"
    """Validation metric that selects the best epoch: ``acc``, ``auc`` (binary labels), ``f1``
    (macro-F1), or ``auto`` = ``auc`` for binary labels, else ``acc`` (``--metric``); for
    ``--task link`` ``mrr``, ``hits@20``, ``hits@50`` or ``hits@100`` (``auto`` = ``mrr``)."""
    chunk_edges: int = 1 << 20
    """In-edges per evaluation chunk of the gathering path (GAT, max): bounds its temporaries
    (one chunk's gathered rows) at the cost of gathering shared sources once per chunk."""
    halo_mb: float = 0.0
    """Byte budget of the halo rows a rank holds at once per layer (``--eval-halo-mb``): its
    nodes are evaluated in runs whose distinct halo sources fit it, a hub several runs read
    being fetched once per run (counted in the evaluation bytes). 0 (default) holds the whole
    1-hop halo at once: at products size a 256 MiB budget saved ~0.5 GiB per worker but cost
    1.75x the evaluation bytes and far more time (docs/training.md)."""
    in_place: bool = True
    """SAGE mean/sum and GCN sum neighbours straight out of the own and halo tables (no
    gathered rows); ``False`` sends them through the gathering path too (tests)."""
    message_mb: float = 16.0
    """Largest answer one request asks a peer or owner for, in float32 row bytes: a rank's
    halo rows arrive in pieces (one piece per peer in flight at a time, each decoded into
    the halo table before the next is asked for), so the answers being encoded, moved
    through Ray's object store and decoded never exceed ``P * message_mb`` per process.
    Bytes are unchanged; messages grow with the halo."""
    spill_mb: float = 0.0
    """Layer output tables of more than this many MiB (``M * H * 4`` bytes) live in shared
    memory maps of unlinked temporary files in ``TMPDIR`` (``--eval-spill-mb``): page cache,
    which the kernel writes back and evicts under memory pressure, instead of anonymous memory.
    0 (default) keeps every table in memory. Same values either way (``eval_memory``)."""

    block_mb: float = 0.0
    """Source-blocked evaluation (``--eval-block-mb``, ``eval_blocked``) for tables larger than
    memory: SAGE mean/sum and GCN layers sum neighbours for spans of nodes whose sums fit this
    many MiB, reading sources in ascending blocks (``halo_mb`` unused). Same outputs up to float
    rounding. 0 (default): off."""

    def __post_init__(self) -> None:
        if self.codec not in CODECS or self.codec in ("auto", "binary"):
            choices = sorted(c for c in CODECS if c not in ("auto", "binary"))
            raise ValueError(f"eval codec={self.codec!r}; choose one of {choices}")
        if self.every < 0:
            raise ValueError(f"eval every={self.every}; choose >= 1 (or 0: never evaluate)")
        if not self.halo_mb >= 0:
            raise ValueError(f"eval halo_mb={self.halo_mb}; choose >= 0 (0: no limit)")
        if not self.spill_mb >= 0:
            raise ValueError(f"eval spill_mb={self.spill_mb}; choose >= 0 (0: tables in memory)")
        if not self.block_mb >= 0:
            raise ValueError(f"eval block_mb={self.block_mb}; choose >= 0 (0: off)")
        if self.chunk_edges < 1:
            raise ValueError(f"chunk_edges={self.chunk_edges}; choose >= 1")
        if not self.message_mb > 0:
            raise ValueError(f"eval message_mb={self.message_mb}; choose > 0")
        if self.metric not in (*METRICS, *LINK_METRICS, "auto"):
            known = (*METRICS, *LINK_METRICS, "auto")
            raise ValueError(f"--metric {self.metric!r}; choose one of {known}")

    def due(self, epoch: int, last_epoch: int) -> bool:
        """Whether ``epoch`` is evaluated."""
        if self.every == 0:
            return False
        return epoch == last_epoch or (epoch + 1) % self.every == 0

    def splits(self, epoch: int, last_epoch: int) -> tuple[str, ...]:
        """The splits evaluated at ``epoch`` (test only at the end with ``test_at_end``)."""
        if self.test_at_end and epoch != last_epoch:
            return ("train", "val")
        return SPLITS

    def selection_metric(self, num_classes: int, *, link: bool = False) -> str:
        """``metric`` with ``auto`` resolved; ``auc`` needs two classes.

        Raises:
            ValueError: ``auc`` asked for a task that is not binary, or a metric of the other
                task (``mrr`` for nodes, ``acc`` for links).
        """
        if link or self.metric in LINK_METRICS:
            return self._link_metric(link)
        if self.metric == "auto":
            return "auc" if num_classes == 2 else "acc"
        if self.metric == "auc" and num_classes != 2:
            raise ValueError(
                f"--metric auc needs binary labels but the task has {num_classes} classes; "
                "use --metric acc or f1"
            )
        return self.metric

    def _link_metric(self, link: bool) -> str:
        if not link:
            raise ValueError(f"--metric {self.metric} is a link metric; pass --task link")
        if self.metric == "auto":
            return "mrr"
        if self.metric not in LINK_METRICS:
            raise ValueError(
                f"--metric {self.metric} is a node metric; --task link selects by one of "
                f"{LINK_METRICS}"
            )
        return self.metric


@dataclass(frozen=True, slots=True, eq=False)
class RankEval:
    """One rank's evaluation: sums the driver adds over ranks.

    Attributes:
        rank: The rank.
        confusion: Split -> ``[C, C]`` int64 ``confusion[true, pred]`` over its labelled nodes.
        scores: Split -> ``[K]`` float64 positive-class scores (binary tasks only).
        labels: Split -> ``[K]`` int64 labels matching ``scores``.
        traffic: Bytes and messages evaluation sent and received (its own ledger).
        cache_hits: Layer-0 halo rows read from the halo cache.
        halo_rows: Layer-0 halo rows needed.
        seconds: Wall time of this rank's evaluation steps.
        peak_rss_bytes: Peak RSS of the rank's process so far (evaluation included).
        peak_device_bytes: Peak memory on the rank's device so far (evaluation included).
        logits: ``(gid_M, logits_MC)`` of the owned nodes when asked for (tests), else ``None``.
        link: Split -> ``metrics.link_sums`` of the rank's held-out links (link task only).
    """

    rank: int
    confusion: dict[str, np.ndarray]
    scores: dict[str, np.ndarray]
    labels: dict[str, np.ndarray]
    traffic: LedgerSnapshot
    cache_hits: int
    halo_rows: int
    seconds: float
    peak_rss_bytes: int = 0
    peak_device_bytes: int = 0
    logits: tuple[np.ndarray, np.ndarray] | None = None
    link: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class EvalResult:
    """The ranks' evaluations combined.

    Attributes:
        metrics: ``{split}_acc``, ``{split}_f1`` and, for binary tasks, ``{split}_auc``; for
            the link task ``{split}_mrr`` and ``{split}_hits@K``.
        traffic: Evaluation traffic summed over ranks.
        cache_hits: Layer-0 halo rows served by caches, summed.
        halo_rows: Layer-0 halo rows needed, summed.
        seconds: Slowest rank's evaluation time.
        peak_rss_bytes, peak_device_bytes: Every rank's peak RSS and device memory after
            evaluating (empty when not evaluated).
    """

    metrics: dict[str, float | None]
    traffic: LedgerSnapshot = field(default_factory=LedgerSnapshot)
    cache_hits: int = 0
    halo_rows: int = 0
    seconds: float = 0.0
    peak_rss_bytes: tuple[int, ...] = ()
    peak_device_bytes: tuple[int, ...] = ()


def combine_evals(reports: list[RankEval], num_classes: int) -> EvalResult:
    """Add the ranks' counts and compute the metrics of every split they evaluated."""
    if not reports:
        return EvalResult(metrics={})
    metrics: dict[str, float | None] = {}
    for split in reports[0].confusion:
        confusion = np.sum([r.confusion[split] for r in reports], axis=0)
        metrics[f"{split}_acc"] = accuracy(confusion)
        metrics[f"{split}_f1"] = macro_f1(confusion)
        if num_classes == 2:
            scores = np.concatenate([r.scores[split] for r in reports])
            labels = np.concatenate([r.labels[split] for r in reports])
            metrics[f"{split}_auc"] = roc_auc(scores, labels)
    for split in reports[0].link:  # exact: the ranks' sums of 1/rank and hits, added
        sums = np.sum([r.link[split] for r in reports], axis=0)
        metrics |= {f"{split}_{k}": v for k, v in link_metrics(sums).items()}
    return EvalResult(
        metrics=metrics,
        traffic=sum((r.traffic for r in reports), LedgerSnapshot()),
        cache_hits=sum(r.cache_hits for r in reports),
        halo_rows=sum(r.halo_rows for r in reports),
        seconds=max(r.seconds for r in reports),
        peak_rss_bytes=tuple(r.peak_rss_bytes for r in reports),
        peak_device_bytes=tuple(r.peak_device_bytes for r in reports),
    )


class ShardEvaluator:
    """The evaluation state of one rank; see the module docstring.

    Args:
        config: Evaluation settings.
        shard: This rank's shard (features, labels, masks).
        book: The partition book (owner and lid of every gid).
        model: This rank's model on the host (same weights on every rank).
        owners: Client of the shard owners (layer-0 halo features).
        peers: Client of the peer ranks (embeddings and degrees).
        feature_codec: The run codec features travel in (``FP32Codec``: float32 rows).
        cache: The worker's halo cache, read without side effects, or ``None``.
        device_model: The same model on the trainer's device (``None``: ``model``), where the
            linear and chunked paths run their dense part (source-blocked layers: the host).
    """

    def __init__(
        self,
        config: EvalConfig,
        *,
        shard: PartitionShard,
        book: PartitionBook,
        model: nn.Module,
        owners: OwnerClient,
        peers: PeerClient,
        feature_codec: Codec,
        cache: HaloCache | None,
        device_model: nn.Module | None = None,
    ) -> None:
        if shard.x is None:
            raise ValueError(f"part {shard.part} lacks x; rewrite the store with features")
        self.config, self.shard, self.book = config, shard, book
        self.model, self.owners, self.peers = model, owners, peers
        self.device_model = model if device_model is None else device_model
        self.feature_codec, self.cache = feature_codec, cache
        self.codec = make_codec(config.codec)
        self.ledger = Ledger()
        self.index: HaloIndex = halo_index(shard)
        self.halo_gid = self.index.halo_gid
        self.tables = LayerTables(config.spill_mb)
        self._hits = 0
        self._seconds = 0.0
        self._degree_S: np.ndarray | None = None
        self._gcn = any(isinstance(m, GCNLayer) for m in model.modules())
        self._span_cache: dict[int, list[tuple[int, int, np.ndarray]]] = {}

    # ---- serving peers (TrainWorker.serve_rows encodes) ------------------------------------
    def serve_rows(self, table: int, gid: np.ndarray) -> Tensor:
        """Float rows of owned ``gid`` in table ``table`` (the caller encodes them)."""
        if table not in self.tables:
            raise ValueError(f"table {table} is not computed on part {self.shard.part} yet")
        lid = self.book.lid_N[np.asarray(gid, dtype=np.int64)].astype(np.int64)
        return self.tables.rows(table, lid)

    # ---- one step -----------------------------------------------------------------------------
    @torch.no_grad()
    def run_layer(self, layer: int) -> None:
        """Compute table ``layer + 1`` (this rank's outputs of layer ``layer``)."""
        start = time.perf_counter()
        if layer == 0:
            set_mmap_threshold(EVAL_MMAP_THRESHOLD)
            self.tables.clear()
            self._hits = 0
            self._seconds = 0.0
            self.ledger = Ledger()
            if self._gcn and self._degree_S is None:  # once, in the first evaluation's ledger
                own_M = np.diff(np.asarray(self.shard.indptr, dtype=np.int64))
                self._degree_S = np.concatenate([own_M, self._halo_degrees()])
            own = _as_float_rows(self.shard.x)  # the memory map itself when it is float32
            release_pages(self.shard.e_id, self.shard.indices_gid)  # training's, unread here
        else:
            self.tables.pop(layer - 1)  # every peer finished reading it in the last step
            own = self.tables[layer]  # kept: peers read it during this step
            release_pages(self.shard.x)  # layer 0 read it; training maps it again
        release_free_memory()  # training's (or the last layer's) freed temporaries
        self.model.eval()
        self.device_model.eval()  # the trainer sets it back to training at its next epoch
        m, width = int(own.shape[0]), int(own.shape[1])
        if self._blocked(layer, own, width):
            self.tables.publish(layer + 1)
            self._seconds += time.perf_counter() - start
            return
        for first, stop, halo_pos in self._spans(width):
            halo = self._halo_rows(layer, halo_pos, width)
            index, degree_S = self.index, self._degree_S
            if halo_pos.shape[0] < self.halo_gid.shape[0]:  # a run of a halo budget
                index = restricted(self.index, halo_pos, m)
                if degree_S is not None:
                    degree_S = np.concatenate([degree_S[:m], degree_S[m + halo_pos]])
            release_free_memory()  # the answers' decoded pieces
            into = self.tables.span_buffer(layer + 1, m, (first, stop))  # rows straight in
            self._outputs(layer, own, halo, index, degree_S, (first, stop), into)
            del halo
            release_free_memory()
        self.tables.publish(layer + 1)  # a shard owns at least one node: made by its first run
        self._seconds += time.perf_counter() - start

    def _halo_rows(self, layer: int, halo_pos: np.ndarray, width: int) -> Tensor:
        """``[len(halo_pos), width]`` layer inputs of the halo nodes at ``halo_pos``."""
        gid_H = self.halo_gid[halo_pos]
        out = torch.empty(gid_H.shape[0], width, dtype=torch.float32)
        if layer == 0:
            self._feature_rows(out, gid_H)
        else:
            self._peer_rows(layer, out, gid_H)
        return out

    def _blocked(self, layer: int, own: Tensor, width: int) -> bool:
        """Run layer ``layer`` source-blocked (``EvalConfig.block_mb``) if it applies."""
        if not self.config.block_mb or not self.config.in_place:
            return False
        m = int(own.shape[0])
        into = self.tables.span_buffer(layer + 1, m, (0, m))
        args = (self.model, layer, own, self.shard, self.index, self._degree_S)
        done = blocked_layer(
            *args,
            lambda pos: self._halo_rows(layer, pos, width),
            into,
            block_mb=self.config.block_mb,
        )
        release_free_memory()
        return done

    def _spans(self, width: int) -> list[tuple[int, int, np.ndarray]]:
        """The runs of destinations for a layer input ``width`` wide (cached per width)."""
        if width not in self._span_cache:
            m = int(self.shard.num_owned)
            max_rows = int(self.config.halo_mb * 2**20) // (4 * width)
            if max_rows <= 0 or max_rows >= self.halo_gid.shape[0]:
                every = np.arange(self.halo_gid.shape[0], dtype=np.int64)
                self._span_cache[width] = [(0, m, every)]
            else:
                self._span_cache[width] = halo_spans(self.shard, self.index, max_rows)
        return self._span_cache[width]

    def _outputs(
        self,
        layer: int,
        own: Tensor,
        halo: Tensor,
        index: HaloIndex,
        degree_S: np.ndarray | None,
        span: tuple[int, int],
        into: Callable[[int], Tensor],
    ) -> None:
        """Write layer ``layer``'s outputs over ``span`` into ``into(width)``, chunk by chunk.

        ``into`` is called once, at the first chunk (the width is known then). SAGE mean/sum
        and GCN sum their neighbours straight out of the two tables (``linear_layer_outputs``);
        other layers (GAT, max) run on chunk blocks whose rows are gathered, at most
        ``Config.chunk_edges`` in-edges at a time.
        """
        compute = self.device_model  # the dense part runs where it lives, a run at a time
        model = cast(LayerwiseModel, compute)
        run = linear_run(compute.layers[layer]) if isinstance(compute, BlockModel) else None
        if run is not None and self.config.in_place:
            assert isinstance(compute, BlockModel)
            args = (self.shard, index, degree_S, run, span)
            linear_layer_outputs(compute, layer, own, halo, *args, into=into)
            return
        out, first, step = None, span[0], StepDevice(model_device(compute))  # host: no copies
        chunks = chunk_blocks(self.shard, index, degree_S, self.config.chunk_edges, span)
        for chunk in chunks:
            x, block = step.put((gather_rows(own, halo, chunk.source), chunk.block))
            rows = model.forward_layer(layer, x, block).to("cpu")
            if out is None:  # the width is known from the first chunk on
                out = into(int(rows.shape[1]))
            out[chunk.start - first : chunk.end - first] = rows
            del rows
            eval_tick()

    def report(self, splits: tuple[str, ...], *, with_logits: bool = False) -> RankEval:
        """The confusion matrices (and binary scores) of ``splits``; frees the tables."""
        if self.shard.y is None:
            raise ValueError(f"part {self.shard.part} lacks y; node metrics need labels")
        logits_MC = self.tables[cast(LayerwiseModel, self.model).num_layers]
        y_M = np.asarray(self.shard.y, dtype=np.int64)
        masks = {split: getattr(self.shard, f"{split}_mask") for split in splits}
        confusion, scores, labels = split_counts(logits_MC, y_M, masks)
        out = self._rank_eval(confusion, scores, labels, with_logits=with_logits)
        del logits_MC  # a spilled table is unmapped with its last reference
        self.release()
        return out

    def release(self) -> None:
        """Free the tables (spilled ones are unmapped) and restore training's allocator."""
        self.tables.clear()
        release_free_memory()
        set_mmap_threshold(TRAIN_MMAP_THRESHOLD)

    def link_report(
        self,
        sums: dict[str, np.ndarray],
        *,
        with_logits: bool = False,
        node_type: str | None = None,
    ) -> RankEval:
        """A ``RankEval`` of link sums; keeps the tables (``node_type``: the graph's one).

        Peers may still read the last table while they score; the next layer 0 drops them.
        """
        set_mmap_threshold(TRAIN_MMAP_THRESHOLD)
        return self._rank_eval({}, {}, {}, with_logits=with_logits, link=sums)

    def _rank_eval(
        self,
        confusion: dict[str, np.ndarray],
        scores: dict[str, np.ndarray],
        labels: dict[str, np.ndarray],
        *,
        with_logits: bool,
        link: dict[str, np.ndarray] | None = None,
    ) -> RankEval:
        last = self.tables[cast(LayerwiseModel, self.model).num_layers]
        gid_M = np.asarray(self.shard.owned_gid, dtype=np.int64)
        return RankEval(
            rank=self.shard.part,
            confusion=confusion,
            scores=scores,
            labels=labels,
            traffic=self.ledger.snapshot(),
            cache_hits=self._hits,
            halo_rows=int(self.halo_gid.shape[0]),
            seconds=self._seconds,
            peak_rss_bytes=int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024,
            peak_device_bytes=StepDevice(model_device(self.device_model)).peak_bytes(),
            logits=(gid_M, last.numpy().copy()) if with_logits else None,
            link=link or {},
        )

    @property
    def num_layers(self) -> int:
        """``L``: the last table (the model's outputs) is table ``L``."""
        return int(cast(LayerwiseModel, self.model).num_layers)

    def owned_table(self, layer: int, node_type: str | None = None) -> Tensor:
        """``[M, H]`` this rank's table ``layer`` (the graph's one node type)."""
        return self.tables[layer]

    def book_of(self, node_type: str | None = None) -> PartitionBook:
        """The partition book of the graph's one node type."""
        return self.book

    def rows_of(self, layer: int, node_type: str | None, gid_K: np.ndarray) -> Tensor:
        """``[K, H]`` rows of table ``layer`` for any ``gid_K`` (``eval_rows.rows_of``).

        Owned rows come from this rank's table, the rest from their owning peers (one request
        per peer and message piece, counted in the evaluation ledger).
        """
        own = self.tables[layer]
        return rows_of(
            own, gid_K, self.book, part=self.shard.part,
            fill=lambda out, ids, _: self._peer_rows(layer, out, ids),
        )  # fmt: skip

    # ---- fetching -----------------------------------------------------------------------------
    def _requests(self, gid_K: np.ndarray, category: str) -> dict[int, np.ndarray]:
        """Positions of ``gid_K`` per owner; the gids sent are counted under ``category``."""
        by_part = group_by_owner(self.book.part_N[gid_K], skip=self.shard.part)
        for pos in by_part.values():
            self.ledger.record(category, gid_K[pos])
        return by_part

    def _feature_rows(self, out_HF: Tensor, gid_H: np.ndarray) -> None:
        """Fill ``out_HF`` with the layer-0 rows of halo ``gid_H``: cached, then the owners'."""
        pending = np.arange(gid_H.shape[0])
        if self.cache is not None and gid_H.shape[0]:
            pending, hits = fill_cached(out_HF, gid_H, self.cache)
            self._hits += hits
        codec = self.feature_codec
        ids = gid_H[pending]
        fill_remote(
            out_HF, ids, self.book.part_N[ids], part=self.shard.part,
            message_mb=self.config.message_mb, ledger=self.ledger,
            fetch=lambda req: (self.owners.fetch_encoded_many(req, codec), codec), at_K=pending,
        )  # fmt: skip

    def _peer_rows(self, table: int, out_HF: Tensor, gid_H: np.ndarray) -> None:
        """Fill ``out_HF`` with table ``table``'s rows of ``gid_H`` other ranks own."""
        codec = self.codec
        fill_remote(
            out_HF, gid_H, self.book.part_N[gid_H], part=self.shard.part,
            message_mb=self.config.message_mb, ledger=self.ledger,
            fetch=lambda req: (self.peers.rows_many(table, req, codec), codec),
        )  # fmt: skip

    def _halo_degrees(self) -> np.ndarray:
        """``[H]`` whole-graph in-degrees of the halo nodes, from their owners (once)."""
        out_H = np.zeros(self.halo_gid.shape[0], dtype=np.int64)
        by_part = self._requests(self.halo_gid, "structure_request")
        requests = {p: self.halo_gid[pos] for p, pos in by_part.items()}
        answers = self.peers.degree_many(requests) if requests else {}
        for p, pos in by_part.items():
            self.ledger.record("structure_response", answers[p])
            out_H[pos] = answers[p]
        return out_H


def _as_float_rows(x: np.ndarray | None) -> Tensor:
    """Feature rows as a float32 tensor without a copy when they already are float32."""
    assert x is not None  # checked in ShardEvaluator.__init__
    if x.dtype == np.float32:
        with warnings.catch_warnings():  # a read-only memory map; evaluation never writes it
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(x)
    return torch.from_numpy(np.asarray(x, dtype=np.float32))
