"""Layer 0 from compressed halo rows (FusedFirstLayer): equal to decoding first, same traffic."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import Tensor

from gnnsys.cache import SplitRows
from gnnsys.cache.codecs import Codec, FP32Codec, make_codec
from gnnsys.models import GAT, GCN, SAGE, BlockModel
from gnnsys.sampler import CSRNeighborSource, NeighborSampler
from gnnsys.store import load_book, load_shard
from gnnsys.train.control.run import train_local
from gnnsys.train.device import StepDevice, StepInputs, to_host
from gnnsys.train.layer0.base import FirstLayerConfig
from gnnsys.train.layer0.fused import FusedFirstLayer
from gnnsys.train.layer0.owner_sums import build_first_layer
from gnnsys.train.remote.features import RoutedFeatureSource
from gnnsys.train.remote.ledger import Ledger
from gnnsys.types import SampledSubgraph
from tests.train.conftest import LocalOwnerClient
from tests.train.remote.test_halo_runtime import _config

PART = 2
F = 16
FP32 = FP32Codec()


def _model(name: str, reduce: str = "mean") -> BlockModel:
    torch.manual_seed(0)
    model: BlockModel = {"sage": SAGE, "gcn": GCN, "gat": GAT}[name](16, 8, 4, num_layers=2)
    for layer in model.layers if name == "sage" else ():
        layer.reduce = reduce
    return model.eval()


def _features(store: Path, codec: str, ledger: Ledger | None = None) -> RoutedFeatureSource:
    """Part ``PART``'s feature source, no cache, rows in ``codec``."""
    book = load_book(store)
    shard = load_shard(store, PART)
    assert shard.x is not None
    client = LocalOwnerClient(store, 4)
    return RoutedFeatureSource(
        PART, book.part_N, book.lid_N, shard.x, client, ledger or Ledger(), codec=make_codec(codec)
    )


def _fused(codec: str, features: object) -> FusedFirstLayer:
    return FusedFirstLayer(make_codec(codec), num_features=F, features=features)  # type: ignore[arg-type]


def _sub_and_features(store: Path, codec: str) -> tuple[SampledSubgraph, RoutedFeatureSource]:
    book = load_book(store)
    shard = load_shard(store, PART)
    features = _features(store, codec)
    graph_source = CSRNeighborSource.from_shard(shard, book.lid_N)
    sampler = NeighborSampler(NeighborSampler.Config(fanouts=(5,)), source=graph_source)
    seeds = torch.from_numpy(np.asarray(shard.owned_gid, dtype=np.int64))[:40]
    return sampler.sample(seeds, seed=7), features


def _two_layer_sub(store: Path, codec: str) -> tuple[SampledSubgraph, RoutedFeatureSource]:
    """A 2-hop batch whose destinations include halo nodes (hop-1 nodes owned elsewhere)."""
    from gnnsys.train.remote.degrees import RoutedDegreeSource
    from gnnsys.train.remote.routed import RoutedNeighborSource

    book = load_book(store)
    shard = load_shard(store, PART)
    assert shard.x is not None
    client = LocalOwnerClient(store, 4)
    local = CSRNeighborSource.from_shard(shard, book.lid_N)
    source = RoutedNeighborSource(PART, book.part_N, local, client, Ledger())
    degrees = RoutedDegreeSource.fetch(shard, book.part_N, client, Ledger())  # GCN: global
    sampler = NeighborSampler(
        NeighborSampler.Config(fanouts=(6, 4)), source=source, degrees=degrees
    )
    features = _features(store, codec)
    seeds = torch.from_numpy(np.asarray(shard.owned_gid, dtype=np.int64))[:64]
    return sampler.sample(seeds, seed=3), features


@torch.no_grad()
@pytest.mark.parametrize("codec", ["int8", "int4"])
@pytest.mark.parametrize(("name", "reduce"), [("sage", "mean"), ("sage", "sum"), ("gcn", "")])
def test_equals_decoding_first(
    store4: Path, codec: str, name: str, reduce: str, device: torch.device
) -> None:
    """The fetch stage's rows, copied to the device encoded, sum there to the decoded sum."""
    sub, features = _two_layer_sub(store4, codec)
    block = sub.blocks[0]
    model = _model(name, reduce)
    x_NF = features.fetch(sub.n_id)  # decoded float32 rows: the reference
    is_halo = torch.from_numpy(load_book(store4).part_N[sub.n_id.numpy()] != PART)
    assert bool(is_halo[: block.num_dst].any()) and bool(is_halo[block.num_dst :].any())
    fused = _fused(codec, features)
    step = StepDevice(device)
    moved = step.copy(StepInputs((fused.prepare(model.layers[0], sub),), fused.finish))
    assert moved.args[0].rows.remote.data.dtype in (torch.int8, torch.uint8)  # still encoded
    assert moved.args[0].rows.remote.data.device.type == device.type
    first = to_host(step.forward(moved))
    want = model.layers[0].aggregate(x_NF, block)
    err = float((first.agg_MF - want).abs().max())
    assert err <= 1e-5 * max(1.0, float(want.abs().max())), f"max abs diff {err:.3g}"
    assert torch.equal(first.x_dst_MF, x_NF[: block.num_dst])
    assert first.plan is None
    logits = model.forward_from_first_agg(first.agg_MF, first.x_dst_MF, sub.blocks)
    torch.testing.assert_close(logits, model(x_NF, sub.blocks), rtol=1e-5, atol=1e-5)


def test_same_messages_and_bytes_as_decoding(store4: Path) -> None:
    sub, _ = _two_layer_sub(store4, "int8")
    decode_ledger, fused_ledger = Ledger(), Ledger()
    _features(store4, "int8", decode_ledger).fetch(sub.n_id)
    fused = _fused("int8", _features(store4, "int8", fused_ledger))
    fused.gather(_model("sage").layers[0], sub)
    a, b = decode_ledger.snapshot(), fused_ledger.snapshot()
    assert a.bytes == b.bytes and a.messages == b.messages
    assert a.bytes["feature_response"] > 0


@torch.no_grad()
def test_only_owned_or_only_halo_rows(store4: Path) -> None:
    sub, features = _sub_and_features(store4, "int8")  # 1 hop from owned seeds: both kinds
    model = _model("sage")
    want = model.layers[0].aggregate(features.fetch(sub.n_id), sub.blocks[0])

    class Only:
        """Every source owned (``halo=False``) or every source a halo row (``halo=True``)."""

        def __init__(self, halo: bool) -> None:
            self.halo = halo

        def fetch_split(self, gid: Tensor) -> SplitRows:
            rows = features.fetch(gid)
            pos = torch.arange(gid.numel())
            none = torch.zeros(0, dtype=torch.int64)
            codec = make_codec("int8")
            if self.halo:
                return SplitRows(none, rows[:0], pos, codec.encode(rows))
            return SplitRows(pos, rows, none, codec.empty(0, F))

    for halo in (False, True):
        got = _fused("int8", Only(halo)).gather(model.layers[0], sub).agg_MF
        tol = 0.05 * float(want.abs().max()) if halo else 1e-5  # halo=True re-quantizes rows
        assert float((got - want).abs().max()) <= tol, f"halo={halo}"


def test_built_only_where_it_applies() -> None:
    def build(config: FirstLayerConfig, model: BlockModel, codec: Codec = FP32) -> object:
        return build_first_layer(
            config,
            model,
            codec=codec,
            features=None,  # type: ignore[arg-type]  # only kept, never called here
            part=1,
            part_N=np.zeros(4, dtype=np.int64),
            num_features=F,
            client=LocalOwnerClient.__new__(LocalOwnerClient),
            ledger=Ledger(),
        )

    sage, gat = _model("sage"), _model("gat")
    on, off = FirstLayerConfig(), FirstLayerConfig(fused_dequant=False)
    int8, int4, fp16 = make_codec("int8"), make_codec("int4"), make_codec("fp16")
    assert int8.fused_aggregate and int4.fused_aggregate and not fp16.fused_aggregate
    assert isinstance(build(on, sage, int8), FusedFirstLayer)
    assert isinstance(build(on, _model("gcn"), int4), FusedFirstLayer)
    assert build(off, sage, int8) is None
    assert build(on, sage, fp16) is None and build(on, sage) is None
    assert build(on, gat, int8) is None
    with pytest.raises(ValueError, match="no fused dequantization"):
        _fused("fp16", None)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("cache", [False, True])
def test_training_matches_decoding_first(tmp_path: Path, cache: bool) -> None:
    extra = {"cache_policy": "adaptive", "cache_ratio": 0.25} if cache else {}
    cfg = _config(parts=4, codec="int8", **extra)
    fused = train_local(cfg, tmp_path / "fused").history
    decoded_cfg = replace(cfg, layer0=replace(cfg.layer0, fused_dequant=False))
    decoded = train_local(decoded_cfg, tmp_path / "decoded").history
    for a, b in zip(fused, decoded, strict=True):
        assert a["bytes"] == b["bytes"] and a["messages"] == b["messages"]
        assert a.get("cache") == b.get("cache")
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4)
    assert fused[-1]["test_acc"] == pytest.approx(decoded[-1]["test_acc"], abs=0.01)
