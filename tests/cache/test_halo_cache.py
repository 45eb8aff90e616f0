from __future__ import annotations

import pytest
import torch

from gnnsys.cache import (
    INDEX_BYTES_PER_ROW,
    AdaptiveAdmission,
    HaloCache,
    StaticAdmission,
    make_codec,
)
from gnnsys.cache.codecs import AutoCodec, take

F = 12


def owner_rows(n: int = 500, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, F, generator=torch.Generator().manual_seed(seed))


def test_capacity_from_bytes_and_ratio() -> None:
    codec = make_codec("int8")
    row = F + 4 + INDEX_BYTES_PER_ROW
    cache = HaloCache(
        HaloCache.Config(capacity_bytes=10 * row + row - 1), feature_dim=F, codec=codec
    )
    assert cache.capacity_rows == 10
    cfg = HaloCache.Config.from_ratio(0.25, owned_feature_bytes=4000, policy="none")
    assert cfg.capacity_bytes == 1000 and cfg.policy == "none"
    with pytest.raises(ValueError, match="ratio"):
        HaloCache.Config.from_ratio(-1.0, owned_feature_bytes=10)
    with pytest.raises(ValueError, match="capacity_bytes"):
        HaloCache.Config(capacity_bytes=-5)


def test_config_checks() -> None:
    with pytest.raises(ValueError, match="needs score_N"):
        HaloCache(HaloCache.Config(policy="degree"), feature_dim=F, codec=make_codec("fp32"))
    with pytest.raises(ValueError, match="concrete codec"):
        HaloCache(HaloCache.Config(), feature_dim=F, codec=AutoCodec())
    policy = StaticAdmission(torch.ones(10), name="degree")
    with pytest.raises(ValueError, match="differs"):
        HaloCache(
            HaloCache.Config(policy="presample"),
            feature_dim=F,
            codec=make_codec("fp32"),
            policy=policy,
        )


@pytest.mark.parametrize("codec_name", ["fp32", "fp16", "int8", "int4"])
def test_lookup_returns_exactly_the_requested_rows(codec_name: str) -> None:
    x = owner_rows()
    codec = make_codec(codec_name)
    score = torch.zeros(500, dtype=torch.float64)
    score[100:400] = torch.arange(300, dtype=torch.float64)
    policy = StaticAdmission(score, name="degree")
    cfg = HaloCache.Config(
        capacity_bytes=50 * (codec.row_nbytes(F) + INDEX_BYTES_PER_ROW), policy="degree"
    )
    cache = HaloCache(cfg, feature_dim=F, codec=codec, policy=policy)
    warm = cache.warm_plan().admit_gid
    assert warm.tolist() == list(range(399, 349, -1))
    gid = torch.sort(warm).values
    assert cache.insert(gid, codec.encode(x[gid])) == 50
    request = torch.tensor([399, 7, 350, 399, 349, 360])
    found = cache.lookup(request)
    assert found.miss_pos.tolist() == [1, 4] and found.miss_gid.tolist() == [7, 349]
    hit_pos = torch.tensor([0, 2, 3, 5])
    expected = codec.decode(codec.encode(x))[request[hit_pos]]
    assert torch.equal(found.values_NF[hit_pos], expected)
    assert torch.equal(found.values_NF[found.miss_pos], torch.zeros(2, F))
    enc = cache.lookup_encoded(request)
    assert enc.hit_pos.tolist() == hit_pos.tolist()
    assert torch.equal(codec.decode(enc.hit_rows), expected)
    stats = cache.stats
    assert (stats.hits, stats.misses, stats.rows_held) == (8, 4, 50)
    assert stats.bytes_saved == 8 * codec.row_nbytes(F)
    assert stats.hit_rate == pytest.approx(8 / 12)


@pytest.mark.parametrize("capacity_rows", [0, 1, 7, 64])
def test_cache_never_exceeds_budget_under_churn(capacity_rows: int) -> None:
    x = owner_rows(2000)
    codec = make_codec("int4")
    row = codec.row_nbytes(F) + INDEX_BYTES_PER_ROW
    budget = capacity_rows * row + row // 2
    policy = AdaptiveAdmission(
        AdaptiveAdmission.Config(decay=0.5, margin=0.0), score_N=torch.zeros(2000)
    )
    cache = HaloCache(
        HaloCache.Config(capacity_bytes=budget, policy="adaptive"),
        feature_dim=F,
        codec=codec,
        policy=policy,
    )
    gen = torch.Generator().manual_seed(0)
    for _ in range(40):
        gid = torch.unique(torch.randint(0, 2000, (150,), generator=gen))
        found = cache.lookup(gid)
        miss = found.miss_gid
        cache.insert(miss, codec.encode(x[miss]))
        stats = cache.stats
        assert stats.bytes_held <= budget and stats.rows_held <= capacity_rows
        held = cache.cached_gid
        assert held.shape[0] == torch.unique(held).shape[0]
        if held.shape[0]:  # every cached row still decodes to its owner's row
            again = cache.lookup(held)
            assert again.miss_pos.numel() == 0
            assert torch.equal(again.values_NF, codec.decode(codec.encode(x[held])))
    if capacity_rows:
        assert cache.stats.evicted > 0 and cache.stats.rows_held == capacity_rows


def test_insert_ignores_cached_and_rejects_mismatch() -> None:
    x = owner_rows()
    codec = make_codec("fp16")
    policy = AdaptiveAdmission(AdaptiveAdmission.Config(), score_N=torch.zeros(500))
    cfg = HaloCache.Config(capacity_bytes=10 * (2 * F + INDEX_BYTES_PER_ROW), policy="adaptive")
    cache = HaloCache(cfg, feature_dim=F, codec=codec, policy=policy)
    gid = torch.tensor([3, 9])
    cache.lookup(gid)
    assert cache.insert(gid, codec.encode(x[gid])) == 2
    assert cache.insert(gid, codec.encode(x[gid])) == 0
    with pytest.raises(ValueError, match="gids for"):
        cache.insert(gid, codec.encode(x[:3]))
    with pytest.raises(ValueError, match="holds fp16"):
        cache.insert(gid, make_codec("int8").encode(x[gid]))
    assert torch.equal(codec.decode(take(codec.encode(x), gid)), cache.lookup(gid).values_NF)
