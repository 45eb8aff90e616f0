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
``EvalConfig.spill_mb``; ``gnnsys.train.eval.memory``); the driver holds only the summed counts.

Exactness: a rank's block has every in-edge of its nodes, and GCN normalises with the in-degrees
of the whole graph (``Block.src_in_degree``; a halo node's comes from its owner once), so the
logits equal ``gnnsys.testing.reference.full_graph_logits`` on the assembled graph (tested to
1e-5 at P = 1, 2, 4).

The evaluator is ``gnnsys.train.eval.sharded.ShardEvaluator`` (one table per layer and node
type; a homogeneous graph is its one-type case). This module holds its settings
(:class:`EvalConfig`), a rank's report (:class:`RankEval`), the driver's sum of the reports
(:func:`combine_evals`); the single-process reference is ``gnnsys.testing.reference``.

Shape legend: ``M`` owned nodes, ``H`` halo nodes of the block, ``E`` in-edges of owned nodes,
``F`` input width of a layer, ``C`` classes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gnnsys.cache.codecs import CODECS
from gnnsys.train.eval.memory import (
    eval_ticks,
    release_free_memory,
)
from gnnsys.train.metrics import (
    LINK_METRICS,
    METRICS,
    accuracy,
    link_metrics,
    macro_f1,
    roc_auc,
)
from gnnsys.train.remote.ledger import LedgerSnapshot

__all__ = [
    "SPLITS",
    "EvalConfig",
    "EvalResult",
    "RankEval",
    "combine_evals",
    "eval_ticks",  # the worker's progress while it evaluates (defined in eval.memory)
    "release_free_memory",  # gnnsys.out_of_core.runtime's import (defined in eval.memory)
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
    """In-edges per evaluation run of destinations: bounds a run's temporaries (its neighbour
    sums; on the cut path of GAT, R-GCN and max, its inputs)."""
    halo_mb: float = 0.0
    """Byte budget of the halo rows a rank holds at once per layer (``--eval-halo-mb``): its
    nodes are evaluated in runs whose distinct halo sources fit it, a hub several runs read
    being fetched once per run (counted in the evaluation bytes). 0 (default) holds the whole
    1-hop halo at once: at products size a 256 MiB budget saved ~0.5 GiB per worker but cost
    1.75x the evaluation bytes and far more time (docs/training.md)."""
    in_place: bool = True
    """SAGE mean/sum and GCN sum neighbours straight out of the source rows (no rows cut per
    run); ``False`` sends them through the cut path too (tests)."""
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
    0 (default) keeps every table in memory. Same values either way (``eval.memory``)."""

    block_mb: float = 0.0
    """Source-blocked evaluation (``--eval-block-mb``, ``eval.blocked``) for tables larger than
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
