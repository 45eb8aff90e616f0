"""Admission policies: which halo rows a worker's cache keeps. Pure decisions, no I/O.

A policy sees accesses (``observe``) and, when fetched rows are on hand, says which of them to
store and which cached rows to drop (``decide`` -> ``AdmissionPlan``); ``HaloCache`` executes the
plan. ``warm_start`` names the rows worth prefetching before the first batch.

| policy      | score of a halo gid                                    | online |
|-------------|--------------------------------------------------------|--------|
| ``none``    | nothing is cached                                      | no     |
| ``degree``  | in-edges from it into this worker's owned nodes        | no     |
| ``presample``| accesses in a dry run of the sampler over train seeds | no     |
| ``adaptive``| decayed access counts, warm-started from presample     | yes    |

Scores are dense ``[N]`` float64 over all gids (0 for owned and never-seen nodes): 8 bytes per
node of the whole graph per worker, traded for O(1) updates without hashing. Ties break towards
the lower gid, so every policy is deterministic for a given seed and access sequence.

Shape legend: ``N`` nodes of the whole graph, ``S`` cached rows, ``K`` candidate rows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor

from gnnsys.prefetch import Prefetcher
from gnnsys.sampler.base import Sampler

__all__ = [
    "ADMISSION_POLICIES",
    "AdaptiveAdmission",
    "AdmissionPlan",
    "AdmissionPolicy",
    "NoAdmission",
    "StaticAdmission",
    "degree_scores",
    "inclusion_scores",
    "make_policy",
    "presample_counts",
    "presample_scores",
    "tie_break",
]

_EMPTY = torch.empty(0, dtype=torch.int64)


@dataclass(frozen=True, slots=True, eq=False)
class AdmissionPlan:
    """What the cache should do with rows on hand.

    Attributes:
        admit_gid: ``[A]`` int64 gids to store, highest priority first.
        evict_gid: ``[V]`` int64 cached gids to drop before storing.
    """

    admit_gid: Tensor
    evict_gid: Tensor

    @classmethod
    def empty(cls) -> AdmissionPlan:
        """Admit nothing, evict nothing."""
        return cls(_EMPTY, _EMPTY)


class AdmissionPolicy(Protocol):
    """Decides cache contents; holds only in-memory statistics."""

    @property
    def name(self) -> str:
        """Registry name (``none``, ``degree``, ``presample``, ``adaptive``)."""
        ...

    def warm_start(self, capacity_rows: int) -> AdmissionPlan:
        """Gids worth prefetching into an empty cache of ``capacity_rows`` rows."""
        ...

    def observe(self, gid: Tensor) -> None:
        """Record one batch of accesses (every requested halo gid, hits and misses)."""
        ...

    def decide(
        self, candidate_gid: Tensor, cached_gid: Tensor, capacity_rows: int
    ) -> AdmissionPlan:
        """Which fetched ``candidate_gid`` (not cached) to store, and which ``cached_gid`` to drop.

        The plan keeps ``len(cached) - len(evict) + len(admit) <= capacity_rows``.
        """
        ...


def _ranked(score: Tensor, gid: Tensor) -> Tensor:
    """``gid`` ordered by score descending, ties by gid ascending (stable sort on sorted gids)."""
    order_by_gid = torch.argsort(gid, stable=True)
    g = gid[order_by_gid]
    return g[torch.argsort(-score[order_by_gid], stable=True)]


class NoAdmission:
    """Caches nothing: the no-cache baseline."""

    name = "none"

    def warm_start(self, capacity_rows: int) -> AdmissionPlan:
        """Nothing to prefetch."""
        return AdmissionPlan.empty()

    def observe(self, gid: Tensor) -> None:
        """Ignored."""

    def decide(
        self, candidate_gid: Tensor, cached_gid: Tensor, capacity_rows: int
    ) -> AdmissionPlan:
        """Admit nothing."""
        return AdmissionPlan.empty()


class StaticAdmission:
    """Keeps the ``capacity_rows`` highest-scoring gids, fixed for the whole run.

    Args:
        score_N: ``[N]`` float scores (0 = never cache); owned gids must score 0.
        name: ``degree`` or ``presample`` (for logs and stats).
    """

    def __init__(self, score_N: Tensor, *, name: str = "degree") -> None:
        self.name = name
        self._score_N = score_N.double()
        self._keep: dict[int, Tensor] = {}

    def _keep_mask(self, capacity_rows: int) -> Tensor:
        if capacity_rows not in self._keep:
            positive = torch.nonzero(self._score_N > 0).flatten()
            top = _ranked(self._score_N[positive], positive)[:capacity_rows]
            mask = torch.zeros(self._score_N.shape[0], dtype=torch.bool)
            mask[top] = True
            self._keep[capacity_rows] = mask
        return self._keep[capacity_rows]

    def warm_start(self, capacity_rows: int) -> AdmissionPlan:
        """The top ``capacity_rows`` gids by score (prefetch these)."""
        keep = torch.nonzero(self._keep_mask(capacity_rows)).flatten()
        return AdmissionPlan(_ranked(self._score_N[keep], keep), _EMPTY)

    def observe(self, gid: Tensor) -> None:
        """Static: accesses don't change the plan."""

    def decide(
        self, candidate_gid: Tensor, cached_gid: Tensor, capacity_rows: int
    ) -> AdmissionPlan:
        """Admit candidates of the fixed top set (fills a cache that was not prefetched)."""
        admit = candidate_gid[self._keep_mask(capacity_rows)[candidate_gid]]
        free = max(capacity_rows - int(cached_gid.shape[0]), 0)
        return AdmissionPlan(admit[:free], _EMPTY)


class AdaptiveAdmission:
    """Online admission and eviction by exponentially decayed access counts.

    Every ``observe`` (one batch) multiplies old counts by ``decay`` (done lazily by growing the
    increment, so it costs O(batch) not O(N)) and adds one per access. ``decide`` keeps the
    ``capacity_rows`` highest counts among cached and candidate gids, preferring cached rows on
    ties (no churn without gain), then lower gids. Admission is free on the wire: candidates
    are rows just fetched for a miss.
    """

    @dataclass(frozen=True, kw_only=True, slots=True)
    class Config:
        """Adaptive policy knobs."""

        decay: float = 0.99
        """Weight of history per batch; 0.99 halves a count's weight in ~69 batches."""
        warm_weight: float = 1.0
        """Multiplier of the warm-start scores (presample counts are accesses per epoch)."""
        margin: float = 1.0
        """Hysteresis: a fetched row displaces a cached one only if its count is higher by more
        than this (in units of one current access); damps swaps driven by sampling noise."""

        def __post_init__(self) -> None:
            if not 0.0 < self.decay <= 1.0:
                raise ValueError(f"decay={self.decay}; choose 0 < decay <= 1")
            if self.warm_weight < 0 or self.margin < 0:
                raise ValueError(
                    f"warm_weight={self.warm_weight}, margin={self.margin}; both must be >= 0"
                )

    name = "adaptive"

    def __init__(self, config: Config, *, score_N: Tensor, owned_N: Tensor | None = None) -> None:
        self.config = config
        self._count_N = score_N.double() * config.warm_weight
        self._never_N = (
            owned_N if owned_N is not None else torch.zeros_like(score_N, dtype=torch.bool)
        )
        self._inc = 1.0

    def warm_start(self, capacity_rows: int) -> AdmissionPlan:
        """Top ``capacity_rows`` gids by warm-start count."""
        positive = torch.nonzero(self._count_N > 0).flatten()
        return AdmissionPlan(_ranked(self._count_N[positive], positive)[:capacity_rows], _EMPTY)

    def observe(self, gid: Tensor) -> None:
        """Decay history by one batch and count these accesses."""
        self._inc /= self.config.decay
        if self._inc > 1e100:  # renormalise long before float64 overflows
            self._count_N /= self._inc
            self._inc = 1.0
        self._count_N.index_add_(0, gid, torch.full(gid.shape, self._inc, dtype=torch.float64))

    def decide(
        self, candidate_gid: Tensor, cached_gid: Tensor, capacity_rows: int
    ) -> AdmissionPlan:
        """Keep the top counts among cached and candidate gids."""
        candidate_gid = candidate_gid[~self._never_N[candidate_gid]]
        free = capacity_rows - int(cached_gid.shape[0])
        if free >= candidate_gid.shape[0] or cached_gid.shape[0] == 0:
            return AdmissionPlan(
                _ranked(self._count_N[candidate_gid], candidate_gid)[:free], _EMPTY
            )
        pool = torch.cat([cached_gid, candidate_gid]).numpy()
        is_new = np.concatenate(
            [np.zeros(cached_gid.shape[0], bool), np.ones(candidate_gid.shape[0], bool)]
        )
        score = self._count_N.numpy()[pool] - is_new * (self.config.margin * self._inc)
        order = np.lexsort((pool, is_new, -score))  # last key is primary
        keep = np.zeros(pool.shape[0], dtype=bool)
        keep[order[:capacity_rows]] = True
        admit = torch.from_numpy(pool[keep & is_new])
        evict = torch.from_numpy(pool[~keep & ~is_new])
        return AdmissionPlan(_ranked(self._count_N[admit], admit), evict)


def degree_scores(
    indices_gid: Tensor | np.ndarray, owned_gid: Tensor | np.ndarray, num_nodes: int
) -> Tensor:
    """``[N]`` count of in-edges from each halo gid into the owned nodes (0 for owned gids).

    Args:
        indices_gid: ``[E]`` source gids of the owned nodes' in-edges
            (``PartitionShard.indices_gid``).
        owned_gid: ``[M]`` owned gids (``PartitionShard.owned_gid``).
        num_nodes: ``N`` of the whole graph.
    """
    src = torch.as_tensor(np.asarray(indices_gid), dtype=torch.int64)
    score = torch.bincount(src, minlength=num_nodes).double()
    score[torch.as_tensor(np.asarray(owned_gid), dtype=torch.int64)] = 0.0
    return score


def tie_break(score_N: Tensor, by_N: Tensor) -> Tensor:
    """``score_N`` with ties (and zeros among nodes ``by_N`` ranks) ordered by ``by_N``.

    Adds ``by_N / (max(by_N) + 1) < 1``, so the order of distinct integer scores (access counts)
    is kept and equal counts rank by ``by_N`` (e.g. presample counts tie-broken by degree): a
    one-epoch dry run leaves many halo nodes at count 0 or 1.
    """
    by = by_N.double().clamp_min(0.0)
    return score_N.double() + by / (float(by.max()) + 1.0 if by.numel() else 1.0)


def presample_scores(
    sampler: Sampler,
    train_gid: Tensor,
    owned_N: Tensor,
    *,
    batch_size: int,
    epochs: int = 1,
    seed: int = 0,
) -> Tensor:
    """``[N]`` expected accesses per epoch of each halo gid, from a dry run of the sampler.

    :func:`presample_counts` of a graph with one node type: shuffled ``batch_size`` batches
    over ``train_gid``, counting how often each non-owned gid appears in a batch's ``n_id``.

    Args:
        sampler: The sampler training will use (same fanouts).
        train_gid: ``[T]`` this worker's train seeds.
        owned_N: ``[N]`` bool, True for gids this worker owns.
        batch_size: Seeds per batch, as in training.
        epochs: Dry-run epochs; more lowers the variance.
        seed: Base seed; epoch ``e`` batch ``b`` samples with ``seed * 1_000_003 + e * 10_007 + b``.

    Raises:
        ValueError: ``batch_size`` or ``epochs`` below 1.
    """

    def draw(seeds: Tensor, batch_seed: int) -> dict[int, Tensor]:
        return {0: sampler.sample(seeds, seed=batch_seed).n_id}

    counts = presample_counts(
        draw, train_gid, {0: owned_N}, batch_size=batch_size, epochs=epochs, seed=seed
    )
    return counts[0]


def presample_counts(
    draw: Callable[[Tensor, int], Mapping[Any, Tensor]],
    train_ids: Tensor,
    owned: Mapping[Any, Tensor],
    *,
    batch_size: int,
    epochs: int = 1,
    seed: int = 0,
) -> dict[Any, Tensor]:
    """Expected accesses per epoch of every non-owned id, per node type, from a dry run.

    Runs ``epochs`` epochs of shuffled ``batch_size`` batches over ``train_ids``;
    ``draw(seeds, batch_seed)`` samples one batch and returns its ``n_id`` per node type
    (one entry on a graph with one type). Costs ``epochs`` sampling epochs, formed as the
    training step forms batches (sampled ahead on a thread, in order).

    Args:
        draw: Samples a batch: ``seeds -> {node type: n_id}`` (ids of that type).
        train_ids: ``[T]`` this worker's train seeds.
        owned: Node type -> ``[N_t]`` bool, True for ids this worker owns; types not listed
            are not counted.
        batch_size: Seeds per batch, as in training.
        epochs: Dry-run epochs; more lowers the variance.
        seed: Base seed; epoch ``e`` batch ``b`` samples with ``seed * 1_000_003 + e * 10_007 + b``.

    Raises:
        ValueError: ``batch_size`` or ``epochs`` below 1.
    """
    if batch_size < 1 or epochs < 1:
        raise ValueError(f"batch_size={batch_size}, epochs={epochs}; both must be >= 1")
    count = {t: torch.zeros(o.shape[0], dtype=torch.float64) for t, o in owned.items()}
    for epoch in range(epochs):
        gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
        perm = train_ids[torch.randperm(train_ids.shape[0], generator=gen)]
        chunks = torch.split(perm, batch_size)
        base = seed * 1_000_003 + epoch * 10_007

        def sample(
            b: int, chunks: tuple[Tensor, ...] = chunks, base: int = base
        ) -> Mapping[Any, Tensor]:
            return draw(chunks[b], base + b)

        feed: Prefetcher[Mapping[Any, Tensor]] = Prefetcher(
            sample, len(chunks), 2, name="gnnsys-prefetch-presample"
        )
        with feed:
            for n_id_by_type in feed:
                for t, n_id in n_id_by_type.items():
                    if t in count:
                        remote = n_id[~owned[t][n_id]]
                        ones = torch.ones(remote.shape, dtype=torch.float64)
                        count[t].index_add_(0, remote, ones)
    return {t: c / epochs for t, c in count.items()}


def inclusion_scores(
    indptr: Tensor | np.ndarray,
    indices: Tensor | np.ndarray,
    train_gid: Tensor,
    owned_N: Tensor,
    *,
    fanouts: tuple[int, ...],
    batch_size: int,
) -> Tensor:
    """``[N]`` analytic expected accesses per epoch of each halo gid (no dry run).

    The vertex-inclusion model of SALIENT++: a batch holds each train seed with probability
    ``q = B / T``; a node reached at hop ``h`` with probability ``p_h(u)`` draws each in-neighbor
    ``v`` with probability ``min(1, fanout_h / deg(u))``, independently, so
    ``p_{h+1}(v) = 1 - prod_u (1 - p_h(u) * min(1, fanout_h / deg(u)))`` and a node is accessed
    with ``P(v) = 1 - prod_h (1 - p_h(v))``. Returns ``ceil(T / B) * P`` (0 for owned gids).
    Costs one pass over the ``E`` edges per hop (an ``E`` float64 temporary).

    Args:
        indptr: ``[N + 1]`` in-edge CSR row pointer of the whole graph.
        indices: ``[E]`` source gids.
        train_gid: ``[T]`` this worker's train seeds.
        owned_N: ``[N]`` bool, True for owned gids.
        fanouts: Per hop, seed hop first (-1: all neighbors).
        batch_size: ``B``.
    """
    indptr_t = torch.as_tensor(np.asarray(indptr), dtype=torch.int64)
    src_E = torch.as_tensor(np.asarray(indices), dtype=torch.int64)
    n = int(indptr_t.shape[0]) - 1
    deg = (indptr_t[1:] - indptr_t[:-1]).double()
    dst_E = torch.repeat_interleave(torch.arange(n), indptr_t[1:] - indptr_t[:-1])
    num_train = max(int(train_gid.shape[0]), 1)
    p = torch.zeros(n, dtype=torch.float64)
    p[train_gid] = min(1.0, batch_size / num_train)
    log_miss = torch.log1p(-p.clamp(max=1 - 1e-12))
    for fanout in fanouts:
        rate = torch.ones_like(deg) if fanout < 0 else (fanout / deg.clamp_min(1.0)).clamp(max=1.0)
        w_E = torch.log1p(-(p * rate).clamp(max=1 - 1e-12))[dst_E]
        p = -torch.expm1(torch.zeros(n, dtype=torch.float64).index_add_(0, src_E, w_E))
        log_miss += torch.log1p(-p.clamp(max=1 - 1e-12))
    score = -torch.expm1(log_miss) * float(-(-num_train // batch_size))
    score[owned_N] = 0.0
    return score


ADMISSION_POLICIES: dict[str, Callable[..., AdmissionPolicy]] = {
    "none": lambda **_: NoAdmission(),
    "degree": lambda *, score_N, **_: StaticAdmission(score_N, name="degree"),
    "presample": lambda *, score_N, **_: StaticAdmission(score_N, name="presample"),
    "adaptive": lambda *, score_N, owned_N=None, config=None, **_: AdaptiveAdmission(
        config or AdaptiveAdmission.Config(), score_N=score_N, owned_N=owned_N
    ),
}
"""Policy name -> constructor taking ``score_N`` (degree or presample scores; adaptive takes the
presample ones as its warm start), optional ``owned_N`` and adaptive ``config``."""


def make_policy(name: str, **kwargs: Any) -> AdmissionPolicy:
    """Build policy ``name``, e.g. ``make_policy("degree", score_N=degree_scores(...))``.

    Raises:
        ValueError: Unknown name, or a scored policy without ``score_N``.
    """
    if name not in ADMISSION_POLICIES:
        raise ValueError(
            f"unknown cache policy {name!r}; choose one of {sorted(ADMISSION_POLICIES)}"
        )
    if name != "none" and kwargs.get("score_N") is None:
        raise ValueError(
            f"cache policy {name!r} needs score_N: pass degree_scores(...) for 'degree', "
            "presample_scores(...) for 'presample' and 'adaptive'"
        )
    return ADMISSION_POLICIES[name](**kwargs)
