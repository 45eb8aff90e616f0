"""Layer 0 from compressed halo rows (``PerTypeInputs`` fused types): equal to decoding first.

Same traffic as decoding: the rows are fetched through the same ``RoutedFeatureSource``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor

from gnnsys.cache import SplitRows
from gnnsys.cache.codecs import make_codec
from gnnsys.models import GAT, GCN, SAGE, BlockModel
from gnnsys.train.control.run import train_local
from gnnsys.train.device import StepDevice, StepInputs, to_host
from gnnsys.train.inputs import PerTypeInputs
from gnnsys.train.layer0.base import FirstLayerConfig
from gnnsys.train.remote.ledger import Ledger
from gnnsys.types import ONE_RELATION, ONE_TYPE
from tests.train.conftest import LocalOwnerClient
from tests.train.layer0.typed_batch import TypedBatch, runtime_inputs, typed_batch, typed_copy
from tests.train.remote.test_halo_runtime import _config

pytestmark = pytest.mark.usefixtures("shared_stores")  # runs share their stores (conftest)

PART = 2
F = 16


def _model(name: str) -> BlockModel:
    torch.manual_seed(0)
    model: BlockModel = {"sage": SAGE, "gcn": GCN, "gat": GAT}[name](16, 8, 4, num_layers=2)
    return model.eval()


def _batch(store: Path, codec: str, *, fanouts: tuple[int, ...] = (6, 4)) -> TypedBatch:
    """A batch of part ``PART`` whose destinations include halo nodes (2 hops: hop-1 nodes
    owned elsewhere), rows in ``codec``."""
    client = LocalOwnerClient(store, 4)
    return typed_batch(store, PART, client, fanouts=fanouts, num_seeds=64, seed=3, codec=codec)


def _fused(features: Any, *, weighted: bool = False) -> PerTypeInputs:
    return PerTypeInputs({ONE_TYPE: features}, {}, frozenset({ONE_TYPE}), weighted=weighted)


@torch.no_grad()
@pytest.mark.parametrize("codec", ["int8", "int4"])
@pytest.mark.parametrize("name", ["sage", "gcn"])
def test_equals_decoding_first(store4: Path, codec: str, name: str, device: torch.device) -> None:
    """The fetch stage's rows, copied to the device encoded, sum there to the decoded sum."""
    batch = _batch(store4, codec)
    block, n_id = batch.block(), batch.n_id
    model = _model(name)
    x_NF = batch.features.fetch(n_id)  # decoded float32 rows: the reference
    is_halo = torch.from_numpy(batch.part_N[n_id.numpy()] != PART)
    assert bool(is_halo[: block.num_dst].any()) and bool(is_halo[block.num_dst :].any())
    inputs = _fused(batch.features, weighted=name == "gcn")
    x_dict, _, agg, pending = inputs.prepare_first(batch.sub)
    assert not x_dict and not agg and set(pending) == {ONE_TYPE}

    def finish(x: dict[str, Tensor], a: dict[Any, Tensor], p: Any) -> tuple[Tensor, Tensor]:
        x, a = dict(x), dict(a)
        inputs.finish_first(x, a, p)
        return a[ONE_RELATION], x[ONE_TYPE]

    step = StepDevice(device)
    moved = step.copy(StepInputs((x_dict, agg, pending), finish))
    rows = moved.args[2][ONE_TYPE].rows
    assert rows.remote.data.dtype in (torch.int8, torch.uint8)  # still encoded
    assert rows.remote.data.device.type == device.type
    agg_MF, x_dst_MF = to_host(step.forward(moved))
    want = model.layers[0].aggregate(x_NF, block)
    err = float((agg_MF - want).abs().max())
    assert err <= 1e-5 * max(1.0, float(want.abs().max())), f"max abs diff {err:.3g}"
    assert torch.equal(x_dst_MF, x_NF[: block.num_dst])
    typed = typed_copy(model, name)
    logits = typed.forward_from_first_agg(
        {ONE_TYPE: x_dst_MF}, batch.sub.blocks, {ONE_RELATION: agg_MF}
    )[ONE_TYPE]
    want_logits = model(x_NF, batch.homogeneous_blocks())
    torch.testing.assert_close(logits, want_logits, rtol=1e-5, atol=1e-5)


def test_same_messages_and_bytes_as_decoding(store4: Path) -> None:
    batch = _batch(store4, "int8")
    decode_ledger, fused_ledger = Ledger(), Ledger()
    batch.features_with(decode_ledger).fetch(batch.n_id)
    _fused(batch.features_with(fused_ledger)).fetch_first(batch.sub)
    a, b = decode_ledger.snapshot(), fused_ledger.snapshot()
    assert a.bytes == b.bytes and a.messages == b.messages
    assert a.bytes["feature_response"] > 0


@torch.no_grad()
def test_only_owned_or_only_halo_rows(store4: Path) -> None:
    batch = _batch(store4, "int8", fanouts=(5,))  # 1 hop from owned seeds: both kinds
    features = batch.features
    model = _model("sage")
    want = model.layers[0].aggregate(features.fetch(batch.n_id), batch.block())

    class Only:
        """Every source owned (``halo=False``) or every source a halo row (``halo=True``)."""

        codec = make_codec("int8")

        def __init__(self, halo: bool) -> None:
            self.halo = halo

        def fetch_split(self, gid: Tensor) -> SplitRows:
            rows = features.fetch(gid)
            pos = torch.arange(gid.numel())
            none = torch.zeros(0, dtype=torch.int64)
            if self.halo:
                return SplitRows(none, rows[:0], pos, self.codec.encode(rows))
            return SplitRows(pos, rows, none, self.codec.empty(0, F))

    for halo in (False, True):
        got = _fused(Only(halo)).fetch_first(batch.sub)[2][ONE_RELATION]
        tol = 0.05 * float(want.abs().max()) if halo else 1e-5  # halo=True re-quantizes rows
        assert float((got - want).abs().max()) <= tol, f"halo={halo}"


@pytest.mark.parametrize(
    ("model", "codec", "layer0", "fused"),
    [
        ("sage", "int8", {}, True),
        ("gcn", "int4", {}, True),
        ("sage", "int8", {"fused_dequant": False}, False),  # --decode-halo
        ("sage", "fp16", {}, False),  # no fused aggregation in the codec
        ("sage", "fp32", {}, False),
        ("gat", "int8", {}, False),  # attention: not a linear reduction
    ],
)
def test_built_only_where_it_applies(
    store4: Path, model: str, codec: str, layer0: dict[str, Any], fused: bool
) -> None:
    inputs = runtime_inputs(store4, 1, model=model, codec=codec, layer0=FirstLayerConfig(**layer0))
    assert inputs.fused == (frozenset({ONE_TYPE}) if fused else frozenset())
    assert not inputs.owner_sums
    assert inputs.weighted == (model == "gcn")
    assert make_codec("int8").fused_aggregate and not make_codec("fp16").fused_aggregate


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
