"""The cache stage settings (``CodecConfig``, ``CacheConfig``), codec capabilities, counters."""

from __future__ import annotations

import pytest
import torch

from gnnsys.cache import (
    CODECS,
    INDEX_BYTES_PER_ROW,
    CacheConfig,
    CacheCounters,
    CodecConfig,
    HaloCache,
    HaloFetcher,
    LocalFeatureSource,
    StaticAdmission,
    make_codec,
)
from gnnsys.cache.codecs import FP32Codec

F = 8


def test_codec_config_makes_objects_and_resolves_auto_once() -> None:
    assert CodecConfig().make() == FP32Codec()  # fp32 is a codec object, never None
    assert CodecConfig(name="int8").make() == make_codec("int8")
    x = torch.randn(50, F)
    auto = CodecConfig(name="auto", lossy="fp16")
    resolved = auto.resolve(x)
    assert resolved.name == "fp16" and resolved.lossy == "fp16"  # Gaussian rows: lossy fallback
    assert resolved.resolve(x) is resolved  # concrete names pass through
    assert CodecConfig(name="auto").resolve((x > 0).float()).name == "binary"
    with pytest.raises(ValueError, match="unresolved"):
        auto.make()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "zip"}, "codec name='zip'"),
        ({"lossy": "auto"}, "codec lossy='auto'"),
        ({"wire": "gzip"}, "codec wire='gzip'"),
    ],
)
def test_codec_config_rejects_bad_values(kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CodecConfig(**kwargs)  # type: ignore[arg-type]


def test_codec_capabilities_are_properties_of_the_codec() -> None:
    fused = {n for n in CODECS if make_codec(n).fused_aggregate}
    sums = {n for n in CODECS if make_codec(n).partial_sums}
    assert fused == {"int8", "int4"}  # affine rows: the kernels dequantize inside the sum
    assert sums == {"fp32", "bf16", "int8", "int4"}  # fp16 overflows on sums, binary holds 0/1


def test_cache_config_budget_and_enabled() -> None:
    assert not CacheConfig().enabled and not CacheConfig(policy="degree").enabled
    assert not CacheConfig(ratio=0.5).enabled  # a budget without a policy caches nothing
    off = CacheConfig(policy="degree", ratio=0.0).halo_config(owned_feature_bytes=4000)
    assert off == HaloCache.Config()  # capacity 0, policy none
    on = CacheConfig(policy="presample", ratio=0.25).halo_config(owned_feature_bytes=4000)
    assert (on.capacity_bytes, on.policy) == (1000, "presample")
    mb = CacheConfig(policy="adaptive", ratio=0.25, mb=2.0).halo_config(owned_feature_bytes=1)
    assert mb.capacity_bytes == 2 << 20  # MiB overrides the ratio


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"policy": "lru"}, "cache policy='lru'"),
        ({"ratio": -0.5}, "cache ratio=-0.5"),
        ({"ratio": float("inf")}, "cache ratio=inf"),
        ({"mb": -1.0}, "cache mb=-1.0"),
        ({"presample_epochs": 0}, "presample_epochs=0"),
    ],
)
def test_cache_config_rejects_bad_values(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CacheConfig(**kwargs)  # type: ignore[arg-type]


def test_counters_diff_sum_and_json_layout() -> None:
    before = CacheCounters(batches=2, rows_requested=10, rows_held=5, capacity_rows=9)
    after = CacheCounters(batches=5, rows_requested=30, rows_held=7, capacity_rows=9)
    epoch = after.since(before)
    assert (epoch.batches, epoch.rows_requested) == (3, 20)  # counts: differences
    assert (epoch.rows_held, epoch.capacity_rows) == (7, 9)  # levels: as they are now
    total = epoch + epoch
    assert (total.batches, total.rows_held) == (6, 14)
    assert list(total.to_json()) == [  # the metrics.jsonl "cache" keys, in this order
        "batches", "rows_requested", "rows_hit", "rows_fetched", "bytes_received", "bytes_wire",
        "bytes_fp32", "prefetch_rows", "prefetch_bytes", "rows_held", "capacity_rows",
        "bytes_held", "capacity_bytes",
    ]  # fmt: skip


def test_fetcher_counters_join_fetch_stats_and_cache_levels() -> None:
    x = torch.randn(40, F)
    owner = torch.arange(40) % 2
    codec = make_codec("int8")
    score = torch.arange(40, dtype=torch.float64) * (owner == 1)
    rows = 5
    cfg = HaloCache.Config(
        capacity_bytes=rows * (codec.row_nbytes(F) + INDEX_BYTES_PER_ROW), policy="degree"
    )
    cache = HaloCache(cfg, feature_dim=F, codec=codec, policy=StaticAdmission(score))
    fetcher = HaloFetcher(cache, LocalFeatureSource(x, owner, part=0), codec)
    gid = torch.tensor([1, 3, 39, 37])
    assert torch.equal(cache.would_admit(gid), torch.tensor([False, False, True, True]))
    fetcher.gather(gid)
    got = fetcher.counters()
    assert (got.batches, got.rows_requested, got.rows_fetched) == (1, 4, 4)
    assert (got.rows_held, got.capacity_rows) == (2, rows) == (cache.stats.rows_held, rows)
    empty = HaloCache(HaloCache.Config(), feature_dim=F, codec=codec)
    assert not bool(empty.would_admit(gid).any())  # capacity 0 admits nothing
