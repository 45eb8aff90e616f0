from __future__ import annotations

import pytest
import torch

from gnnsys.cache import (
    INDEX_BYTES_PER_ROW,
    HaloCache,
    HaloFetcher,
    LocalFeatureSource,
    StaticAdmission,
    make_codec,
)

N, F = 400, 10


def setup(  # type: ignore[no-untyped-def]
    codec_name: str, rows: int, wire: str | None = None, device: torch.device | str = "cpu"
):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(N, F, generator=gen)
    if codec_name == "binary":
        x = (x > 1.0).float()
    owner = torch.arange(N) % 4
    codec = make_codec(codec_name)
    score = torch.arange(N, dtype=torch.float64)
    score[owner == 0] = 0.0
    policy = StaticAdmission(score, name="presample")
    cfg = HaloCache.Config(
        capacity_bytes=rows * (codec.row_nbytes(F) + INDEX_BYTES_PER_ROW), policy="presample"
    )
    cache = HaloCache(cfg, feature_dim=F, codec=codec, policy=policy, device=device)
    source = LocalFeatureSource(x, owner, part=0)
    return x, codec, source, HaloFetcher(cache, source, codec, wire=wire)


@pytest.mark.parametrize("codec_name", ["fp32", "bf16", "int8", "int4", "binary"])
def test_gather_returns_decoded_owner_rows_in_request_order(codec_name: str) -> None:
    x, codec, source, fetcher = setup(codec_name, rows=20)
    request = torch.tensor([399, 1, 398, 399, 2, 1, 395])
    expected = codec.decode(codec.encode(x))[request]  # per-row codecs: rows encode alone
    first = fetcher.gather(request)
    assert torch.equal(first, expected)
    again = fetcher.gather(request)
    assert torch.equal(again, expected)
    s = fetcher.stats
    # first call: 5 distinct gids fetched once each (repeats deduplicated); 399, 398, 395 are in
    # the top-20 presample set and are kept, 1 and 2 are not, so they are fetched again
    assert (s.batches, s.rows_requested, s.rows_fetched, s.rows_hit) == (2, 14, 7, 4)
    assert s.bytes_received == 7 * codec.row_nbytes(F) == s.bytes_wire
    assert s.bytes_fp32 == 2 * 5 * F * 4
    assert source.requests == 2 and source.rows_served == 7


@pytest.mark.parametrize("codec_name", ["int8", "int4", "fp16"])
def test_gather_encoded_keeps_rows_encoded_with_the_same_traffic(codec_name: str) -> None:
    request = torch.tensor([399, 1, 398, 399, 2, 1, 395])
    _, codec, _, decoding = setup(codec_name, rows=20)
    _, _, source, encoded = setup(codec_name, rows=20)
    for _ in range(2):  # the second round hits the rows the first one admitted
        want = decoding.gather(request)
        got = encoded.gather_encoded(request)
        assert got.codec == codec.name and got.num_rows == request.numel()
        assert torch.equal(codec.decode(got), want)
    assert encoded.stats == decoding.stats and encoded.stats.rows_hit == 4
    assert torch.equal(encoded.cache.cached_gid, decoding.cache.cached_gid)
    assert source.requests == 2


@pytest.mark.parametrize("codec_name", ["int8", "int4"])
def test_a_cache_on_the_device_serves_the_same_rows_from_there(
    codec_name: str, device: torch.device
) -> None:
    """Slots on the trainer's device: encoded rows come out there, decoded ones on the host."""
    request = torch.tensor([399, 1, 398, 399, 2, 1, 395])
    _, codec, _, host = setup(codec_name, rows=20)
    _, _, _, on_device = setup(codec_name, rows=20, device=device)
    for _ in range(2):  # the second round hits the rows the first one admitted
        want = host.gather_encoded(request)
        got = on_device.gather_encoded(request)
        assert got.data.device.type == device.type
        assert torch.equal(codec.decode(got).cpu(), codec.decode(want))
    assert on_device.stats == host.stats and on_device.stats.rows_hit == 4
    assert on_device.cache.stats == host.cache.stats
    decoded = on_device.gather(request)
    assert decoded.device.type == "cpu" and torch.equal(decoded, host.gather(request))
    peeked = on_device.cache.peek(request)
    assert torch.equal(peeked.values_NF, host.cache.peek(request).values_NF)


def test_warm_up_prefetches_policy_rows_counted_apart() -> None:
    x, codec, source, fetcher = setup("int8", rows=30)
    assert fetcher.warm_up() == 30
    s = fetcher.stats
    assert s.prefetch_rows == 30 and s.prefetch_bytes == 30 * (F + 4)
    assert s.rows_fetched == 0 and s.bytes_received == 0
    top = fetcher.cache.warm_plan().admit_gid
    assert torch.equal(fetcher.gather(top), codec.decode(codec.encode(x[top])))
    assert fetcher.stats.rows_hit == 30 and source.requests == 1


def test_local_source_rejects_own_rows_and_fp32_source_counts_fp32() -> None:
    x, codec, source, _ = setup("int8", rows=5)
    with pytest.raises(ValueError, match="owned by part 0"):
        source.fetch(torch.tensor([1, 4]))

    class Fp32Only:
        def fetch(self, gid: torch.Tensor) -> torch.Tensor:
            return x[gid]

    cache = HaloCache(HaloCache.Config(), feature_dim=F, codec=codec)
    fetcher = HaloFetcher(cache, Fp32Only(), codec)
    got = fetcher.gather(torch.tensor([1, 2]))
    assert torch.equal(got, codec.decode(codec.encode(x[[1, 2]])))
    assert fetcher.stats.bytes_received == 2 * F * 4
    with pytest.raises(ValueError, match="cache codec"):
        HaloFetcher(cache, source, make_codec("fp16"))


def test_wire_stage_counted_separately() -> None:
    x, codec, _, fetcher = setup("binary", rows=0, wire="zstd")
    gid = torch.arange(1, N, 4)
    assert torch.equal(fetcher.gather(gid), x[gid])
    s = fetcher.stats
    assert s.bytes_received == gid.shape[0] * 2 and 0 < s.bytes_wire
