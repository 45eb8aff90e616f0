"""Owner-side layer-0 aggregation in the runtime (issue 8): equality with the requester path.

In-process tests call the same ``ShardOwner`` objects directly; the ``ray`` tests go through real
``ShardOwner`` actors and ``RayOwnerClient``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import Tensor

from gnnsys.cache.codecs import Codec, EncodedRows, FP32Codec, make_codec
from gnnsys.models import GAT, GCN, SAGE, BlockModel
from gnnsys.sampler import CSRNeighborSource, NeighborSampler
from gnnsys.store import load_book, load_shard
from gnnsys.train.layer0.base import FirstLayerConfig, Placement
from gnnsys.train.layer0.owner_sums import (
    FirstLayerAggregator,
    build_first_layer,
    linear_first_layer,
    resolve_placement,
)
from gnnsys.train.remote.client import OwnerClient, RayOwnerClient
from gnnsys.train.remote.degrees import RoutedDegreeSource
from gnnsys.train.remote.features import RoutedFeatureSource
from gnnsys.train.remote.ledger import Ledger
from gnnsys.train.remote.routed import RoutedNeighborSource
from gnnsys.train.remote.server import ShardOwner
from gnnsys.train.trainer import Trainer
from gnnsys.types import SampledSubgraph
from tests.train.conftest import LocalOwnerClient
from tests.train.run_configs import sbm_run

PART = 1
FANOUTS = (6, 4)
FP32 = FP32Codec()


class PartialClient(LocalOwnerClient):
    """``LocalOwnerClient`` plus the owner-side aggregation call."""

    def partial_many(
        self,
        req_by_part: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray | None]],
        codec: Codec,
        node_type: str | None = None,
    ) -> dict[int, EncodedRows]:
        self.calls += [("partial", p) for p in req_by_part]
        return {
            p: self.owners[p].partial_sums(rowptr, gid, weight, codec, node_type)
            for p, (rowptr, gid, weight) in req_by_part.items()
        }


@dataclass
class Batch:
    """One sampled batch of part ``PART`` and the handles that produced it."""

    sub: SampledSubgraph
    features: RoutedFeatureSource
    part_N: np.ndarray
    client: Any
    sampler: NeighborSampler
    train_gid: Tensor
    features_with: Callable[[Ledger], RoutedFeatureSource]
    """Another no-cache source of the same part, counting into the given ledger."""


def _batch(store: Path, client: OwnerClient, *, seed: int = 3) -> Batch:
    book = load_book(store)
    shard = load_shard(store, PART)
    assert shard.x is not None
    local = CSRNeighborSource.from_shard(shard, book.lid_N)
    source = RoutedNeighborSource(PART, book.part_N, local, client, Ledger())
    degrees = RoutedDegreeSource.fetch(shard, book.part_N, client, Ledger())  # GCN: global
    sampler = NeighborSampler(
        NeighborSampler.Config(fanouts=FANOUTS), source=source, degrees=degrees
    )
    train_gid = torch.from_numpy(np.asarray(shard.owned_gid, dtype=np.int64))[:64]
    x = shard.x

    def features_with(ledger: Ledger) -> RoutedFeatureSource:
        return RoutedFeatureSource(PART, book.part_N, book.lid_N, x, client, ledger)

    sub = sampler.sample(train_gid, seed=seed)
    return Batch(
        sub, features_with(Ledger()), book.part_N, client, sampler, train_gid, features_with
    )


def _aggregator(
    batch: Batch,
    placement: str,
    ledger: Ledger,
    codec: Codec = FP32,
    features: Any = None,
) -> FirstLayerAggregator:
    return FirstLayerAggregator(
        FirstLayerConfig(placement=Placement(placement)),
        part=PART,
        part_N=batch.part_N,
        num_features=16,
        client=batch.client,
        ledger=ledger,
        codec=codec,
        features=batch.features if features is None else features,
    )


def _model(name: str) -> BlockModel:
    torch.manual_seed(0)
    cls = {"sage": SAGE, "gcn": GCN, "gat": GAT}[name]
    model = cls(16, 8, 4, num_layers=2, dropout=0.0)
    return model.eval()


@torch.no_grad()
def _check_layer1_equal(batch: Batch, name: str, placement: str) -> FirstLayerAggregator:
    model = _model(name)
    x_NF = batch.features.fetch(batch.sub.n_id)
    block = batch.sub.blocks[0]
    want = model.layers[0](x_NF, block)
    agg = _aggregator(batch, placement, Ledger())
    first = agg.gather(model.layers[0], batch.sub)
    got = model.layers[0].combine(first.agg_MF, first.x_dst_MF, block)
    err = float((got - want).abs().max())
    assert err <= 1e-5, f"{name}/{placement}: layer-1 max abs diff {err:.3g}"
    logits = model.forward_from_first_agg(first.agg_MF, first.x_dst_MF, batch.sub.blocks)
    assert torch.allclose(logits, model(x_NF, batch.sub.blocks), atol=1e-5)
    return agg


def _independent_bytes(
    agg: FirstLayerAggregator, batch: Batch, model: BlockModel
) -> dict[str, int]:
    """Recount what the ledger should hold from the plan alone (pairs, groups, F = 16)."""
    plan = agg.plan(model.layers[0], batch.sub)
    weighted = isinstance(model, GCN)
    pairs = sum(int(r.src_gid.numel()) for r in plan.requests)
    groups = sum(r.num_groups for r in plan.requests)
    return {
        "partial_request": 8 * (groups + len(plan.requests)) + (12 if weighted else 8) * pairs,
        "partial_response": 4 * 16 * groups,
        "partial_pairs": pairs,
        "partial_sums": groups,
        "rows_avoided": plan.rows_avoided,
    }


@pytest.mark.parametrize("name", ["sage", "gcn"])
@pytest.mark.parametrize("placement", ["owner", "auto"])
def test_layer1_equals_requester_in_process(store4: Path, name: str, placement: str) -> None:
    batch = _batch(store4, PartialClient(store4, 4))
    _check_layer1_equal(batch, name, placement)


@pytest.mark.parametrize("name", ["sage", "gcn"])
def test_ledger_counts_equal_independent_count(store4: Path, name: str) -> None:
    batch = _batch(store4, PartialClient(store4, 4))
    ledger = Ledger()
    agg = _aggregator(batch, "owner", ledger)
    model = _model(name)
    agg.gather(model.layers[0], batch.sub)
    want = _independent_bytes(agg, batch, model)
    snap = ledger.snapshot()
    assert want["partial_pairs"] > 0 and want["rows_avoided"] > 0
    assert snap.bytes["partial_request"] == want["partial_request"]
    assert snap.bytes["partial_response"] == want["partial_response"]
    for counter in ("partial_pairs", "partial_sums", "rows_avoided"):
        assert snap.counts[counter] == want[counter], counter
    owners = {r.part for r in agg.plan(model.layers[0], batch.sub).requests}
    assert snap.messages["partial_request"] == len(owners)
    partial_calls = [p for kind, p in batch.client.calls if kind == "partial"]
    assert sorted(partial_calls) == sorted(owners)  # one call per owner


def test_owner_fetches_fewer_rows_and_auto_is_never_worse(store4: Path) -> None:
    batch = _batch(store4, PartialClient(store4, 4))
    model = _model("sage")
    ledgers = {}
    for placement in ("owner", "auto"):
        ledgers[placement] = Ledger()
        features = batch.features_with(ledgers[placement])
        agg = _aggregator(batch, placement, ledgers[placement], features=features)
        agg.gather(model.layers[0], batch.sub)
    ledgers["requester"] = Ledger()
    batch.features_with(ledgers["requester"]).fetch(batch.sub.n_id)

    def remote(snap: Any) -> int:
        cats = ("feature_request", "feature_response", "partial_request", "partial_response")
        return int(sum(snap.bytes[c] for c in cats))

    snaps = {k: v.snapshot() for k, v in ledgers.items()}
    avoided = snaps["owner"].counts["rows_avoided"]
    requested = snaps["requester"].bytes["feature_request"] // 8
    assert snaps["owner"].bytes["feature_request"] // 8 == requested - avoided
    assert remote(snaps["auto"]) <= remote(snaps["requester"])


def test_resident_rows_are_aggregated_locally(store4: Path) -> None:
    batch = _batch(store4, PartialClient(store4, 4))

    class Resident:
        """Every row resident: nothing goes to the owners as pairs."""

        def fetch(self, gid: Tensor) -> Tensor:
            return batch.features.fetch(gid)

        def resident_mask(self, gid: Tensor) -> Tensor:
            return torch.ones(gid.shape[0], dtype=torch.bool)

    ledger = Ledger()
    model = _model("sage")
    agg = _aggregator(batch, "owner", ledger, features=Resident())
    first = agg.gather(model.layers[0], batch.sub)
    assert not first.plan.requests and bool(first.plan.need_row_N.all())
    assert ledger.snapshot().bytes["partial_request"] == 0


def test_int8_partials_travel_encoded(store4: Path) -> None:
    batch = _batch(store4, PartialClient(store4, 4))
    ledger = Ledger()
    model = _model("sage")
    agg = _aggregator(batch, "owner", ledger, codec=make_codec("int8"))
    first = agg.gather(model.layers[0], batch.sub)
    groups = sum(r.num_groups for r in first.plan.requests)
    assert ledger.snapshot().bytes["partial_response"] == groups * (16 + 4)  # F bytes + fp16 x2
    exact = model.layers[0].aggregate(batch.features.fetch(batch.sub.n_id), batch.sub.blocks[0])
    assert float((first.agg_MF - exact).abs().max()) < 0.1 * float(exact.abs().max())


def test_gat_and_max_fall_back_with_one_notice(caplog: pytest.LogCaptureFixture) -> None:
    gat = _model("gat")
    sage_max = SAGE(16, 8, 4, num_layers=2)
    for layer in sage_max.layers:
        layer.reduce = "max"
    assert linear_first_layer(gat) is None and linear_first_layer(sage_max) is None
    assert linear_first_layer(_model("gcn")) is not None
    with caplog.at_level(logging.WARNING, logger="gnnsys.train.layer0.owner_sums"):
        assert resolve_placement(gat, Placement.OWNER) is Placement.REQUESTER
        assert resolve_placement(gat, Placement.AUTO, announce=False) is Placement.REQUESTER
        got = build_first_layer(
            FirstLayerConfig(placement=Placement.AUTO),
            gat,
            codec=FP32Codec(),
            features=None,  # type: ignore[arg-type]  # a fallback never fetches
            part=3,  # not rank 0: no second notice
            part_N=np.zeros(4, dtype=np.int64),
            num_features=16,
            client=PartialClient.__new__(PartialClient),
            ledger=Ledger(),
        )
    assert got is None
    notices = [r for r in caplog.records if "not linear" in r.getMessage()]
    assert len(notices) == 1 and "GATLayer" in notices[0].getMessage()
    assert resolve_placement(_model("sage"), Placement.OWNER) is Placement.OWNER
    with pytest.raises(ValueError, match="placement='owners'; choose one of requester"):
        FirstLayerConfig(placement="owners")  # type: ignore[arg-type]  # as the CLI passes it
    with pytest.raises(ValueError, match="requester"):
        FirstLayerAggregator(
            FirstLayerConfig(),  # requester: rows travel, nothing to aggregate at owners
            part=0,
            part_N=np.zeros(4, dtype=np.int64),
            num_features=16,
            client=PartialClient.__new__(PartialClient),
            ledger=Ledger(),
            codec=FP32Codec(),
            features=None,  # type: ignore[arg-type]
        )


@pytest.mark.parametrize("name", ["sage", "gcn"])
def test_trainer_step_with_owner_aggregation_matches_requester(store4: Path, name: str) -> None:
    losses = {}
    for placement in ("requester", "owner"):
        batch = _batch(store4, PartialClient(store4, 4))
        ledger = Ledger()
        first = None if placement == "requester" else _aggregator(batch, placement, ledger)
        trainer = Trainer(
            Trainer.Config(batch_size=32, lr=0.01),
            model=_model(name).train(),
            sampler=batch.sampler,
            features=batch.features,
            train_gid=batch.train_gid,
            train_y=torch.zeros(batch.train_gid.shape[0], dtype=torch.int64),
            first_layer=first,
        )
        stats = [trainer.train_epoch(epoch, 2) for epoch in range(2)]
        losses[placement] = [s.loss_sum for s in stats]
    assert np.allclose(losses["owner"], losses["requester"], rtol=1e-5, atol=1e-6)


# --- through real ShardOwner actors ---------------------------------------------------------------


@pytest.fixture(scope="module")
def actor_client(ray_session: Any, store4: Path) -> Any:
    owners = [ray_session.remote(ShardOwner).remote(str(store4), p) for p in range(4)]
    ray_session.get([o.ping.remote() for o in owners], timeout=60)
    yield RayOwnerClient(owners, deadline_s=60.0)
    for owner in owners:
        ray_session.kill(owner)


@pytest.mark.ray
@pytest.mark.timeout(300)  # includes starting the session's Ray (78 s seen on the loaded box)
@pytest.mark.parametrize("name", ["sage", "gcn"])
def test_layer1_equals_requester_through_actors(store4: Path, actor_client: Any, name: str) -> None:
    batch = _batch(store4, actor_client, seed=11)
    _check_layer1_equal(batch, name, "owner")


@pytest.mark.ray
@pytest.mark.timeout(300)  # includes starting the session's Ray (78 s seen on the loaded box)
@pytest.mark.parametrize("name", ["sage", "gcn"])
def test_ledger_equals_independent_count_through_actors(
    store4: Path, actor_client: Any, name: str
) -> None:
    batch = _batch(store4, actor_client, seed=12)
    ledger = Ledger()
    agg = _aggregator(batch, "owner", ledger)
    model = _model(name)
    agg.gather(model.layers[0], batch.sub)
    want = _independent_bytes(agg, batch, model)
    snap = ledger.snapshot()
    assert snap.bytes["partial_request"] == want["partial_request"] > 0
    assert snap.bytes["partial_response"] == want["partial_response"] > 0
    assert snap.counts["rows_avoided"] == want["rows_avoided"]


@pytest.mark.ray
@pytest.mark.timeout(300)  # includes starting the session's Ray (78 s seen on the loaded box)
def test_gat_falls_back_through_actors(
    store4: Path, actor_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    batch = _batch(store4, actor_client, seed=13)
    with caplog.at_level(logging.WARNING, logger="gnnsys.train.layer0.owner_sums"):
        got = build_first_layer(
            FirstLayerConfig(placement=Placement.OWNER),
            _model("gat"),
            codec=FP32Codec(),
            features=batch.features,
            part=0,
            part_N=batch.part_N,
            num_features=16,
            client=actor_client,
            ledger=Ledger(),
        )
    assert got is None
    assert sum("not linear" in r.getMessage() for r in caplog.records) == 1


# --- the whole runtime (in-process executor, same workers as Ray) ---------------------------------


def _run_config(placement: str, model: str, **fetch: Any) -> Any:
    from tests.train.remote.test_halo_runtime import feature_path

    return sbm_run(
        num_nodes=600, num_features=16, parts=2, fanouts=(4, 3), model=model, hidden=16,
        dropout=0.0, batch_size=32, epochs=2, **feature_path(aggregate_at=placement, **fetch),
    )  # fmt: skip


@pytest.mark.timeout(120)
@pytest.mark.parametrize("model", ["sage", "gcn"])
def test_train_local_owner_matches_requester(tmp_path: Path, model: str) -> None:
    from gnnsys.train.control.run import train_local

    got = {p: train_local(_run_config(p, model), tmp_path / p) for p in ("requester", "owner")}
    for want, have in zip(got["requester"].history, got["owner"].history, strict=True):
        assert have["loss"] == pytest.approx(want["loss"], rel=1e-4)
        assert have["bytes"]["partial_request"] > 0 and want["bytes"]["partial_request"] == 0
        assert have["bytes"]["feature_request"] < want["bytes"]["feature_request"]


@pytest.mark.timeout(120)
def test_train_local_owner_with_halo_cache(tmp_path: Path) -> None:
    """Cached rows are resident: aggregated locally, exact, and never sent as pairs."""
    from gnnsys.train.control.run import train_local

    cache = {"cache_policy": "degree", "cache_ratio": 0.5}
    got = {
        p: train_local(_run_config(p, "sage", **cache), tmp_path / p) for p in ("requester", "auto")
    }
    for want, have in zip(got["requester"].history, got["auto"].history, strict=True):
        assert have["loss"] == pytest.approx(want["loss"], rel=1e-4)
        assert have["cache"]["rows_hit"] > 0
        remote = ("feature_request", "feature_response", "partial_request", "partial_response")
        assert sum(have["bytes"][c] for c in remote) <= sum(want["bytes"][c] for c in remote)


def test_auto_fetches_rows_the_cache_would_admit(store4: Path) -> None:
    """A row the cache keeps is free later, so ``auto`` fetches it; ``owner`` still sums it."""
    batch = _batch(store4, PartialClient(store4, 4))

    class AdmitAll:
        """A source whose cache would keep every halo row (``HaloFeatureSource.would_admit``)."""

        def fetch(self, gid: Tensor) -> Tensor:
            return batch.features.fetch(gid)

        def resident_mask(self, gid: Tensor) -> Tensor:
            return batch.features.resident_mask(gid)

        def would_admit(self, gid: Tensor) -> Tensor:
            return torch.ones(gid.shape[0], dtype=torch.bool)

    model = _model("sage")
    auto = _aggregator(batch, "auto", Ledger(), features=AdmitAll())
    owner = _aggregator(batch, "owner", Ledger(), features=AdmitAll())
    got_auto, got_owner = (a.gather(model.layers[0], batch.sub) for a in (auto, owner))
    assert got_auto.plan.requests == () and got_owner.plan.requests
    torch.testing.assert_close(got_auto.agg_MF, got_owner.agg_MF, atol=1e-5, rtol=1e-5)
