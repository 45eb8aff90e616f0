"""Per-type halo caches under one byte budget: the split, the caches, the fetchers, counters."""

from __future__ import annotations

import re

import pytest
import torch

from gnnsys.cache import (
    INDEX_BYTES_PER_ROW,
    BudgetSplit,
    CacheCounters,
    HaloCache,
    LocalFeatureSource,
    PerTypeCacheCounters,
    PerTypeCodecConfig,
    PerTypeHaloCache,
    PerTypeHaloFetcher,
    StaticAdmission,
    TypeDemand,
    make_codec,
    split_budget,
)
from gnnsys.cache.codecs import Codec

# ---- the split -----------------------------------------------------------------------------


def reference_split(budget: int, demand: dict[str, TypeDemand]) -> dict[str, int]:
    """The documented rule, row by row: rank by s * p / r (ties: type order, then score)."""
    ranked = []
    for i, (t, d) in enumerate(demand.items()):
        for s in sorted((float(v) for v in d.score if v > 0), reverse=True):
            if d.payload_bytes:
                ranked.append((-s * d.payload_bytes / d.row_bytes, i, -s, t))
    ranked.sort(key=lambda r: r[:3])
    rows, used = dict.fromkeys(demand, 0), 0
    for *_, t in ranked:
        if used + demand[t].row_bytes > budget:
            break
        used += demand[t].row_bytes
        rows[t] += 1
    return rows


@pytest.mark.parametrize("seed", range(12))
def test_split_never_exceeds_the_budget_and_follows_the_rule(seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    demand = {}
    for t in ("paper", "author", "institution", "field"):
        n = int(torch.randint(0, 60, (1,), generator=gen))
        score = torch.randint(0, 5, (n,), generator=gen).double()  # many ties and zeros
        demand[t] = TypeDemand(score=score, payload_bytes=int(torch.randint(0, 300, (1,))))
    total = sum(d.row_bytes * int((d.score > 0).sum()) for d in demand.values())
    budget = int(torch.randint(0, max(total, 1) + 500, (1,), generator=gen))
    split = split_budget(budget, demand)
    assert dict(split.rows) == reference_split(budget, demand)
    assert split.used_bytes == sum(split.rows[t] * demand[t].row_bytes for t in demand)
    assert split.used_bytes <= budget
    for t, d in demand.items():
        assert split.rows[t] <= int((d.score > 0).sum())  # never more rows than candidates
        assert split.row_bytes[t] == d.payload_bytes + INDEX_BYTES_PER_ROW


def test_split_ranks_by_bytes_saved_per_budget_byte() -> None:
    # paper: 4 rows scoring 3, 256-byte payload (280 with the index): 2.74 saved bytes per byte
    # author: 6 rows scoring 4, 8-byte payload (32): 1.0; field: scores 0, no remote traffic
    demand = {
        "paper": TypeDemand(score=torch.full((4,), 3.0), payload_bytes=256),
        "author": TypeDemand(score=torch.full((6,), 4.0), payload_bytes=8),
        "field": TypeDemand(score=torch.zeros(5), payload_bytes=64),
    }
    split = split_budget(3 * 280 + 2 * 32 + 31, demand)  # 3 papers fit, then not the 4th
    assert dict(split.rows) == {"paper": 3, "author": 0, "field": 0}  # the prefix stops there
    split = split_budget(4 * 280 + 2 * 32 + 31, demand)
    assert dict(split.rows) == {"paper": 4, "author": 2, "field": 0}
    assert split.used_bytes == 4 * 280 + 2 * 32 and split.capacity_bytes("author") == 64
    split = split_budget(10**9, demand)  # everything fits: every positive-score row
    assert dict(split.rows) == {"paper": 4, "author": 6, "field": 0}


def test_split_between_equal_sizes_follows_the_scores() -> None:
    gen = torch.Generator().manual_seed(0)
    hot = torch.rand(100, generator=gen) * 10 + 10  # 10..20 accesses per epoch
    warm = torch.rand(100, generator=gen) * 10 + 5  # 5..15
    demand = {
        "author": TypeDemand(score=warm, payload_bytes=64),
        "paper": TypeDemand(score=hot, payload_bytes=64),
    }
    split = split_budget(100 * 88, demand)
    threshold = torch.sort(torch.cat([hot, warm]), descending=True).values[99]
    assert split.rows["paper"] == int((hot >= threshold).sum())
    assert split.rows["author"] == int((warm >= threshold).sum())
    assert split.rows["paper"] + split.rows["author"] == 100


def test_equal_scores_prefer_the_earlier_type() -> None:
    demand = {
        "b": TypeDemand(score=torch.ones(3), payload_bytes=8),
        "a": TypeDemand(score=torch.ones(3), payload_bytes=8),
    }
    assert dict(split_budget(4 * 32, demand).rows) == {"b": 3, "a": 1}


def test_split_edge_cases() -> None:
    demand = {"paper": TypeDemand(score=torch.ones(3), payload_bytes=8)}
    assert dict(split_budget(0, demand).rows) == {"paper": 0}
    assert split_budget(31, demand).used_bytes == 0  # not one row
    assert dict(split_budget(100, {}).rows) == {}
    assert split_budget(100, {}).capacity_bytes("paper") == 0
    with pytest.raises(ValueError, match=re.escape("cache budget_bytes=-1; choose >= 0")):
        split_budget(-1, demand)
    with pytest.raises(ValueError, match=re.escape("TypeDemand.score must be [R]")):
        TypeDemand(score=torch.ones(2, 2), payload_bytes=8)
    with pytest.raises(ValueError, match="NaN or inf"):
        TypeDemand(score=torch.tensor([1.0, float("nan")]), payload_bytes=8)
    with pytest.raises(ValueError, match=re.escape("TypeDemand.payload_bytes=-1; choose >= 0")):
        TypeDemand(score=torch.ones(2), payload_bytes=-1)
    int8 = make_codec("int8")
    assert TypeDemand.of(torch.ones(1), int8, 16).payload_bytes == int8.row_nbytes(16) == 20


# ---- the caches and fetchers ------------------------------------------------------------------
N = 200  # nodes per type (type-local ids), part 0 owns ids = 0 mod 4
DIMS = {"paper": 12, "author": 9, "institution": 5, "field": 17, "venue": 3, "topic": 8}
SPEC = "paper=fp32,author=fp16,institution=bf16,field=int8,venue=int4,topic=binary"


def world() -> tuple[dict[str, torch.Tensor], dict[str, Codec], dict[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    x = {t: torch.randn(N, f, generator=gen) for t, f in DIMS.items()}
    x["topic"] = (x["topic"] > 0.5).float()
    codecs = PerTypeCodecConfig.parse(SPEC, list(DIMS)).resolve(x).codecs()
    score = {}
    for i, t in enumerate(DIMS):
        s = (torch.arange(N, dtype=torch.float64) * (i + 1)) % 37 + 1
        s[torch.arange(N) % 4 == 0] = 0.0  # owned: never cached
        score[t] = s
    return x, codecs, score


def build(budget: int) -> tuple[PerTypeHaloCache, PerTypeHaloFetcher, dict[str, torch.Tensor]]:
    x, codecs, score = world()
    demand = {t: TypeDemand.of(score[t], codecs[t], DIMS[t]) for t in DIMS}
    policies = {t: StaticAdmission(score[t], name="presample") for t in DIMS}
    split = split_budget(budget, demand)
    cache = PerTypeHaloCache.build(split, feature_dims=DIMS, codecs=codecs, policies=policies)
    owner = torch.arange(N) % 4
    sources = {t: LocalFeatureSource(x[t], owner, part=0) for t in DIMS}
    return cache, PerTypeHaloFetcher(cache, sources), x


@pytest.mark.parametrize("budget", [0, 1, 500, 4_000, 20_000, 10**7])
def test_caches_share_one_budget_exactly(budget: int) -> None:
    cache, _, _ = build(budget)
    assert cache.node_types == list(DIMS) and cache.budget_bytes == budget
    assert sum(cache.capacity_bytes.values()) <= budget
    for t in DIMS:
        c = cache.of(t)
        assert c.codec.name == PerTypeCodecConfig.parse(SPEC, list(DIMS)).for_type(t).name
        assert c.config.capacity_bytes == c.capacity_rows * c.row_bytes  # no slack per type
    if budget == 10**7:  # everything fits: each type holds all its 150 halo candidates
        assert all(cache.of(t).capacity_rows == 150 for t in DIMS)


def test_each_type_round_trips_its_codec_and_hits_on_the_second_batch() -> None:
    cache, fetcher, x = build(10**7)
    request = torch.tensor([199, 1, 198, 199, 2, 1, 195, 6])
    for t in DIMS:
        codec = cache.of(t).codec
        expected = codec.decode(codec.encode(x[t]))[request]  # per-row codecs: rows alone
        assert torch.equal(fetcher.gather(t, request), expected), t
        assert torch.equal(fetcher.gather(t, request), expected), t
        enc = fetcher.gather_encoded(t, request)
        assert enc.codec == codec.name and torch.equal(codec.decode(enc), expected)
        lookup = cache.peek(t, request)
        assert lookup.miss_pos.numel() == 0 and torch.equal(lookup.values_NF, expected)
    stats = cache.stats
    for t in DIMS:
        s = stats.by_type[t]
        assert (s.hits, s.misses, s.rows_held) == (24 - 8, 8, 6)  # 6 distinct, all kept
        assert s.bytes_held == 6 * cache.of(t).row_bytes
        assert s.bytes_saved == 16 * cache.of(t).codec.row_nbytes(DIMS[t])


def test_stats_and_counters_per_type_add_up_to_the_totals() -> None:
    cache, fetcher, _ = build(6_000)
    gen = torch.Generator().manual_seed(1)
    before = fetcher.counters()
    for _ in range(3):
        for t in ("paper", "field", "topic"):  # the others see no traffic
            ids = torch.randint(0, N, (40,), generator=gen)
            fetcher.gather(t, ids[ids % 4 != 0])
    stats, counters = cache.stats, fetcher.counters().since(before)
    for field in ("hits", "misses", "bytes_saved", "bytes_held", "rows_held", "capacity_bytes"):
        assert getattr(stats.total, field) == sum(getattr(s, field) for s in stats.by_type.values())
    for t in DIMS:
        c, s, f = counters.by_type[t], stats.by_type[t], fetcher.stats[t]
        assert (c.rows_hit, c.rows_requested - c.rows_hit) == (s.hits, s.misses)
        assert (
            c.bytes_received
            == f.bytes_received
            == c.rows_fetched * cache.of(t).codec.row_nbytes(DIMS[t])
        )
        assert (c.rows_held, c.capacity_bytes) == (s.rows_held, s.capacity_bytes)
    assert counters.by_type["author"] == CacheCounters(
        capacity_rows=cache.of("author").capacity_rows,
        capacity_bytes=cache.of("author").config.capacity_bytes,
    )
    total = counters.total
    assert total.bytes_received == sum(c.bytes_received for c in counters.by_type.values())
    assert total.bytes_held <= cache.budget_bytes
    assert counters.to_json()["total"] == total.to_json()
    assert counters.to_json()["by_type"] == {t: c.to_json() for t, c in counters.by_type.items()}
    ranks = counters + PerTypeCacheCounters({"paper": counters.by_type["paper"]})
    assert ranks.by_type["paper"].rows_requested == 2 * counters.by_type["paper"].rows_requested
    assert ranks.by_type["field"] == counters.by_type["field"]
    cache.reset_stats()
    assert cache.stats.total.hits == 0 and cache.stats.total.rows_held == stats.total.rows_held


def test_warm_up_fills_each_type_from_its_policy() -> None:
    cache, fetcher, _ = build(8_000)
    stored = fetcher.warm_up()
    assert stored == {t: cache.of(t).capacity_rows for t in DIMS}
    counters = fetcher.counters()
    for t in DIMS:
        c = counters.by_type[t]
        assert c.prefetch_rows == stored[t] and c.rows_held == stored[t]
        assert c.prefetch_bytes == stored[t] * cache.of(t).codec.row_nbytes(DIMS[t])


def test_capacity_zero_caches_nothing() -> None:
    x, codecs, _ = world()
    cache = PerTypeHaloCache.disabled(feature_dims=DIMS, codecs=codecs)
    owner = torch.arange(N) % 4
    fetcher = PerTypeHaloFetcher(cache, {t: LocalFeatureSource(x[t], owner, 0) for t in DIMS})
    request = torch.tensor([1, 2, 3, 5, 1])
    for _ in range(2):
        for t in DIMS:
            codec = codecs[t]
            assert torch.equal(
                fetcher.gather(t, request), codec.decode(codec.encode(x[t]))[request]
            )
    assert fetcher.warm_up() == dict.fromkeys(DIMS, 0)
    for t in DIMS:
        s, c = cache.stats.by_type[t], fetcher.counters().by_type[t]
        assert (s.hits, s.misses, s.rows_held, s.capacity_rows, s.capacity_bytes) == (
            0,
            10,
            0,
            0,
            0,
        )
        assert c.rows_fetched == 8 and c.bytes_received == 8 * codecs[t].row_nbytes(DIMS[t])
        assert not bool(cache.would_admit(t, request).any())
    assert cache.budget_bytes == 0 and sum(cache.capacity_bytes.values()) == 0


def test_lookups_and_inserts_keyed_by_type() -> None:
    cache, _, x = build(10**7)
    gid = torch.tensor([5, 9, 13])
    for t in DIMS:
        rows = cache.of(t).codec.encode(x[t][gid])
        assert cache.would_admit(t, gid).all()
        assert cache.insert(t, gid, rows) == 3
        assert cache.contains(t, gid).all() and not cache.contains(t, torch.tensor([7])).any()
        found = cache.lookup(t, torch.tensor([5, 7]))
        assert found.miss_gid.tolist() == [7]
        assert torch.equal(found.values_NF[0], cache.of(t).codec.decode(rows)[0])
        assert cache.lookup_encoded(t, gid).hit_pos.tolist() == [0, 1, 2]
    wrong = cache.of("author").codec.encode(x["paper"][gid])
    with pytest.raises(ValueError, match=re.escape("insert got fp16 rows; this cache holds fp32")):
        cache.insert("paper", gid, wrong)


def test_build_and_lookup_errors_name_the_fix() -> None:
    x, codecs, score = world()
    demand = {"paper": TypeDemand.of(score["paper"], codecs["paper"], DIMS["paper"])}
    split = split_budget(10_000, demand)
    policy = {"paper": StaticAdmission(score["paper"], name="presample")}
    cache = PerTypeHaloCache.build(split, feature_dims=DIMS, codecs=codecs, policies=policy)
    message = f"no halo cache for node type 'venus'; have {list(DIMS)}"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        cache.of("venus")
    with pytest.raises(ValueError, match=re.escape("(missing: ['topic']); key it by the same")):
        PerTypeHaloCache.build(
            split, feature_dims=DIMS, codecs={t: codecs[t] for t in list(DIMS)[:-1]}
        )
    with pytest.raises(ValueError, match=re.escape("split names node types ['paper'] but")):
        PerTypeHaloCache.build(
            split, feature_dims={"author": 9}, codecs={"author": codecs["author"]}
        )
    message = (
        "node type 'paper' has a cache share of 138 rows but no admission policy; pass "
        "policies[type], or leave the type out of the demand"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        PerTypeHaloCache.build(split, feature_dims=DIMS, codecs=codecs)
    other = dict(codecs, paper=make_codec("int8"))
    with pytest.raises(ValueError, match=re.escape("assumed 72 bytes per row but its int8 cache")):
        PerTypeHaloCache.build(split, feature_dims=DIMS, codecs=other, policies=policy)
    big = HaloCache.Config(capacity_bytes=1_000)
    over = {"paper": HaloCache(big, feature_dim=12, codec=codecs["paper"])}
    message = "node type caches hold 1000 bytes > budget_bytes=999; size them with split_budget"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        PerTypeHaloCache(over, budget_bytes=999)
    with pytest.raises(ValueError, match=re.escape("(missing: ['topic'])")):
        PerTypeHaloFetcher(cache, {t: LocalFeatureSource(x[t], torch.arange(N) % 4, 0) for t in
                                 list(DIMS)[:-1]})  # fmt: skip


def test_budget_split_record_capacity() -> None:
    split = BudgetSplit(100, {"a": 2}, {"a": 40})
    assert split.capacity_bytes("a") == 80 and split.capacity_bytes("b") == 0
    assert split.used_bytes == 80
