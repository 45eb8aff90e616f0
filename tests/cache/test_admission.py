from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnsys.cache import (
    AdaptiveAdmission,
    AdmissionPlan,
    HaloCache,
    HaloFetcher,
    LocalFeatureSource,
    NoAdmission,
    StaticAdmission,
    degree_scores,
    inclusion_scores,
    make_codec,
    make_policy,
    presample_scores,
)
from tests.cache.trace import TraceSampler, zipf

N = 3000
F = 8


def test_degree_scores_count_in_edges_from_halo_nodes() -> None:
    # owned nodes 0, 1; their in-edges come from 1, 2, 2, 3, 0
    indices_gid = np.array([1, 2, 2, 3, 0])
    score = degree_scores(indices_gid, np.array([0, 1]), num_nodes=5)
    assert score.tolist() == [0.0, 0.0, 2.0, 1.0, 0.0]


def test_inclusion_scores_follow_the_vertex_inclusion_model() -> None:
    # in-edges: 0 <- 1, 0 <- 2, 1 <- 3, 2 <- 3; seed 0 (owned), one batch, fanout 1 then 1
    indptr = np.array([0, 2, 3, 4, 4])
    indices = np.array([1, 2, 3, 3])
    owned = torch.tensor([True, False, False, False])
    got = inclusion_scores(indptr, indices, torch.tensor([0]), owned, fanouts=(1, 1), batch_size=1)
    # p1(1) = p1(2) = 1/2; p2(3) = 1 - (1 - 1/2)(1 - 1/2) = 3/4 (independence approximation)
    assert torch.allclose(got, torch.tensor([0.0, 0.5, 0.5, 0.75], dtype=torch.float64))
    # two batches per epoch (T=2, B=1) and fanout -1 (all): each halo node appears in both
    got = inclusion_scores(
        indptr, indices, torch.tensor([0, 1]), owned, fanouts=(-1,), batch_size=1
    )
    assert got[1].item() == pytest.approx(2 * (1 - 0.5 * 0.5))
    assert got[2].item() == pytest.approx(2 * 0.5)


def test_static_policy_top_by_score_ties_to_lower_gid() -> None:
    score = torch.tensor([0.0, 3.0, 1.0, 3.0, 2.0, 0.0])
    policy = StaticAdmission(score, name="degree")
    assert policy.warm_start(3).admit_gid.tolist() == [1, 3, 4]
    assert policy.warm_start(10).admit_gid.tolist() == [1, 3, 4, 2]  # score 0 is never cached
    plan = policy.decide(torch.tensor([2, 4, 5]), torch.tensor([1]), capacity_rows=3)
    assert plan.admit_gid.tolist() == [4] and plan.evict_gid.numel() == 0


def test_none_policy_admits_nothing() -> None:
    policy = make_policy("none")
    assert isinstance(policy, NoAdmission)
    plan = policy.decide(torch.arange(5), torch.empty(0, dtype=torch.int64), 10)
    assert plan.admit_gid.numel() == 0 and policy.warm_start(10).admit_gid.numel() == 0


def test_adaptive_keeps_top_counts_prefers_cached_on_ties() -> None:
    policy = AdaptiveAdmission(
        AdaptiveAdmission.Config(decay=1.0, margin=0.0), score_N=torch.zeros(10)
    )
    policy.observe(torch.tensor([1, 2, 3]))
    policy.observe(torch.tensor([3, 4]))
    plan = policy.decide(torch.tensor([3, 4]), torch.tensor([1, 2]), capacity_rows=3)
    # counts: 1:1, 2:1, 3:2, 4:1 -> keep 3, then cached 1 and 2 before new 4
    assert plan.admit_gid.tolist() == [3] and plan.evict_gid.numel() == 0
    policy.observe(torch.tensor([4, 4]))
    plan = policy.decide(torch.tensor([4]), torch.tensor([1, 2, 3]), capacity_rows=3)
    assert plan.admit_gid.tolist() == [4] and plan.evict_gid.tolist() == [2]


def test_adaptive_decay_forgets_old_accesses() -> None:
    policy = AdaptiveAdmission(
        AdaptiveAdmission.Config(decay=0.5, margin=0.0), score_N=torch.zeros(4)
    )
    for _ in range(5):
        policy.observe(torch.tensor([0]))
    policy.observe(torch.tensor([1]))
    policy.observe(torch.tensor([1]))
    plan = policy.decide(torch.tensor([1]), torch.tensor([0]), capacity_rows=1)
    assert plan.admit_gid.tolist() == [1] and plan.evict_gid.tolist() == [0]


def test_adaptive_margin_damps_swaps() -> None:
    policy = AdaptiveAdmission(
        AdaptiveAdmission.Config(decay=1.0, margin=1.0), score_N=torch.zeros(4)
    )
    policy.observe(torch.tensor([0, 1]))
    policy.observe(torch.tensor([1]))
    # count(1) = 2 exceeds count(0) = 1 by exactly the margin: no swap
    assert policy.decide(torch.tensor([1]), torch.tensor([0]), 1).admit_gid.numel() == 0
    policy.observe(torch.tensor([1]))
    plan = policy.decide(torch.tensor([1]), torch.tensor([0]), 1)
    assert plan.admit_gid.tolist() == [1] and plan.evict_gid.tolist() == [0]


def test_policy_registry_and_errors() -> None:
    with pytest.raises(ValueError, match="unknown cache policy"):
        make_policy("lru")
    with pytest.raises(ValueError, match="score_N"):
        make_policy("presample")
    with pytest.raises(ValueError, match="decay"):
        AdaptiveAdmission.Config(decay=0.0)
    assert make_policy("adaptive", score_N=torch.zeros(3)).name == "adaptive"
    assert AdmissionPlan.empty().admit_gid.numel() == 0


def owned_mask(num_owned: int) -> torch.Tensor:
    owned = torch.zeros(N, dtype=torch.bool)
    owned[:num_owned] = True
    return owned


def test_presample_deterministic_for_a_seed() -> None:
    sampler = TraceSampler(zipf(N, 1.1, seed=0), width=200)
    train = torch.arange(300)
    owned = owned_mask(300)
    a = presample_scores(sampler, train, owned, batch_size=64, seed=5)
    b = presample_scores(sampler, train, owned, batch_size=64, seed=5)
    c = presample_scores(sampler, train, owned, batch_size=64, seed=6)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert float(a[:300].sum()) == 0.0 and float(a.sum()) > 0
    pa = StaticAdmission(a, name="presample").warm_start(100).admit_gid
    pb = StaticAdmission(b, name="presample").warm_start(100).admit_gid
    assert torch.equal(pa, pb)


def replay(policy_name: str, score: torch.Tensor, trace: list[torch.Tensor], rows: int) -> float:
    x = torch.randn(N, F, generator=torch.Generator().manual_seed(0))
    codec = make_codec("int8")
    policy = make_policy(policy_name, score_N=score, owned_N=owned_mask(300))
    cfg = HaloCache.Config(capacity_bytes=rows * (F + 4 + 24), policy=policy_name)
    cache = HaloCache(cfg, feature_dim=F, codec=codec, policy=policy)
    owner = torch.ones(N, dtype=torch.int64)
    owner[:300] = 0
    fetcher = HaloFetcher(cache, LocalFeatureSource(x, owner, part=0), codec)
    fetcher.warm_up()
    for gid in trace:
        got = fetcher.gather(gid)
        assert torch.equal(got, codec.decode(codec.encode(x[gid])))
    return cache.stats.hit_rate


def halo_trace(popularity: torch.Tensor, batches: int, seed: int) -> list[torch.Tensor]:
    sampler = TraceSampler(popularity, width=200)
    out = []
    for b in range(batches):
        n_id = sampler.sample(torch.arange(0, 300, 5), seed=seed + b).n_id
        out.append(n_id[n_id >= 300])
    return out


def test_adaptive_hit_rate_at_least_presample_on_skewed_trace() -> None:
    pop = zipf(N, 1.1, seed=0)
    pop[:300] = 0.0
    sampler = TraceSampler(pop, width=200)
    score = presample_scores(sampler, torch.arange(300), owned_mask(300), batch_size=64, seed=1)
    drifted = zipf(N, 1.1, seed=1)  # the hot set moves halfway through the run
    drifted[:300] = 0.0
    stationary = halo_trace(pop, 80, seed=1000)
    rates = {p: replay(p, score, stationary, rows=150) for p in ("presample", "adaptive")}
    assert rates["adaptive"] >= rates["presample"] > 0.0, rates  # measured 0.405 vs 0.347
    trace = halo_trace(pop, 40, seed=1000) + halo_trace(drifted, 40, seed=2000)
    rates = {p: replay(p, score, trace, rows=150) for p in ("none", "presample", "adaptive")}
    assert rates["none"] == 0.0
    assert rates["adaptive"] >= rates["presample"] > 0.0, rates  # measured 0.308 vs 0.199
    # runs are deterministic for a seed
    assert replay("adaptive", score, trace, rows=150) == rates["adaptive"]
