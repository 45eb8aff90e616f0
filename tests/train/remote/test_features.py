"""The one halo data plane: ``RoutedFeatureSource`` with no cache is a cache of capacity 0.

No-cache runs keep the ledger they always had: the gids sent (8 bytes each), the rows back in the
run codec (``K * F * 4`` for fp32), one message per remote owner per batch, and no cache report.
The sources are built as the runtime builds a rank's (``gnnsys.train.rank.build_sources``): a
homogeneous store is the one node type ``ONE_TYPE``, whose type-local ids are its gids.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from gnnsys.cache import AdaptiveAdmission, CacheConfig, CodecConfig, HaloFeatureSource
from gnnsys.cache.codecs import make_codec
from gnnsys.sampler import NeighborSampler
from gnnsys.store import load_book, load_shard
from gnnsys.train.remote.features import RoutedFeatureSource
from gnnsys.train.remote.ledger import Ledger
from gnnsys.train.trainer import Trainer
from gnnsys.types import ONE_TYPE, Graph
from tests.train.conftest import LocalOwnerClient, rank_sources

PART = 1


def _build(
    store: Path, codec: CodecConfig, cache: CacheConfig
) -> tuple[RoutedFeatureSource, Ledger]:
    """Rank ``PART``'s feature source as the runtime builds it, and its type's ledger."""
    sources, ledger, _ = rank_sources(
        store, PART, codec=codec, cache=cache, trainer=Trainer.Config(batch_size=16),
        sampler=NeighborSampler.Config(fanouts=(4, 3)),
    )  # fmt: skip
    return sources.inputs.features[ONE_TYPE], ledger.of(ONE_TYPE)


@pytest.mark.parametrize("codec", ["fp32", "int8"])
def test_no_cache_ledger_is_rows_per_owner(tiny_graph: Graph, store4: Path, codec: str) -> None:
    source, ledger = _build(store4, CodecConfig(name=codec), CacheConfig())
    assert source.cache.capacity_rows == 0 and source.counters() is None
    assert source.warm_up() == 0 and ledger.snapshot().total_bytes == 0  # nothing to prefetch
    book = load_book(store4)
    gid = torch.arange(0, 1000, 5, dtype=torch.int64)
    owner = book.owner(gid.numpy())
    for _ in range(2):  # nothing is kept: the second batch costs the same
        rows = source.fetch(gid)
    assert tiny_graph.x is not None
    exact = torch.from_numpy(tiny_graph.x[gid.numpy()])
    if codec == "fp32":
        assert torch.equal(rows, exact)
    remote = int((owner != PART).sum())
    row_bytes = make_codec(codec).row_nbytes(tiny_graph.num_features)
    snap = ledger.snapshot()
    assert snap.bytes["feature_request"] == 2 * 8 * remote
    assert snap.bytes["feature_response"] == 2 * remote * row_bytes
    owners = len(set(owner.tolist()) - {PART})
    assert snap.messages["feature_request"] == snap.messages["feature_response"] == 2 * owners
    mine = torch.from_numpy(owner == PART)
    assert torch.equal(source.resident_mask(gid), mine)  # only own rows cost nothing
    assert not bool(source.would_admit(gid[~mine]).any())


def test_a_batch_of_own_rows_sends_nothing(store4: Path) -> None:
    source, ledger = _build(store4, CodecConfig(name="int8"), CacheConfig())
    own = torch.from_numpy(np.asarray(load_shard(store4, PART).owned_gid, dtype=np.int64))[:7]
    source.fetch(own)
    split = source.fetch_split(own)
    assert split.remote.num_rows == 0 and split.local_pos.numel() == 7
    assert ledger.snapshot().total_bytes == 0


def test_own_rows_held_on_a_device_give_the_same_rows(store4: Path, device: torch.device) -> None:
    """``--features-on device``: own rows gathered from the device copy, halo rows copied up."""
    book, shard = load_book(store4), load_shard(store4, PART)
    client = LocalOwnerClient(store4, book.num_parts)

    def source(own_device: torch.device | None) -> RoutedFeatureSource:
        args = (PART, book.part_N, book.lid_N, shard.x, client, Ledger())
        return RoutedFeatureSource(*args, codec=make_codec("int8"), own_device=own_device)

    host, held = source(None), source(device)
    gid = torch.arange(0, 1000, 5, dtype=torch.int64)
    for name in ("fetch", "fetch_distinct"):
        got = getattr(held, name)(gid)
        assert got.device.type == device.type
        assert torch.equal(got.cpu(), getattr(host, name)(gid)), name
    want, split = host.fetch_split(gid), held.fetch_split(gid)
    assert split.local_LF.device.type == device.type
    assert torch.equal(split.local_LF.cpu(), want.local_LF)
    assert torch.equal(split.local_pos, want.local_pos)
    assert torch.equal(split.remote.data, want.remote.data)


def test_cached_source_reports_and_takes_the_adaptive_knobs(store4: Path) -> None:
    knobs = AdaptiveAdmission.Config(decay=0.9, warm_weight=0.5, margin=2.0)
    cache = CacheConfig(policy="adaptive", ratio=0.5, adaptive=knobs)
    source, ledger = _build(store4, CodecConfig(name="int8"), cache)
    checked: HaloFeatureSource = source  # the Protocol the trainer and layer 0 see
    policy = source.cache.policy
    assert isinstance(policy, AdaptiveAdmission) and policy.config == knobs
    presampled = ledger.snapshot()
    assert presampled.bytes["structure_request"] > 0  # the dry run behind the adaptive scores
    assert presampled.bytes["feature_request"] == 0  # scores need no feature rows
    stored = checked.warm_up()
    counters = checked.counters()
    assert counters is not None and counters.prefetch_rows >= stored > 0
    assert counters.capacity_rows == source.cache.capacity_rows > 0
    assert ledger.snapshot().bytes["feature_response"] == counters.prefetch_bytes
