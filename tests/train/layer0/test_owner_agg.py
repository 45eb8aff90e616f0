"""Owner-side layer-0 aggregation in the runtime (issue 8): equality with the requester path.

In-process tests call the same ``ShardOwner`` objects directly; the ``ray`` tests go through real
``ShardOwner`` actors and ``RayOwnerClient``. A batch is the runtime's typed batch of a one-type
store (``tests.train.layer0.typed_batch``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import Tensor

from gnnsys.cache.codecs import Codec, FP32Codec, make_codec
from gnnsys.models import GCN, SAGE, BlockModel, GCNLayer
from gnnsys.testing.in_memory import one_type_model
from gnnsys.train.inputs import PerTypeInputs
from gnnsys.train.layer0.base import FirstLayerConfig, Placement
from gnnsys.train.layer0.owner_sums import FirstLayerAggregator
from gnnsys.train.layer0.plan import PartialPlan
from gnnsys.train.remote.client import RayOwnerClient
from gnnsys.train.remote.ledger import Ledger
from gnnsys.train.remote.server import ShardOwner
from gnnsys.train.trainer import Trainer
from gnnsys.types import ONE_TYPE
from tests.train.conftest import LocalOwnerClient
from tests.train.layer0.typed_batch import TypedBatch, runtime_inputs, typed_batch, typed_copy
from tests.train.run_configs import sbm_run

pytestmark = pytest.mark.usefixtures("shared_stores")  # runs share their stores (conftest)

PART = 1
FANOUTS = (6, 4)
FP32 = FP32Codec()


def _batch(store: Path, client: Any, *, seed: int = 3) -> TypedBatch:
    return typed_batch(store, PART, client, fanouts=FANOUTS, num_seeds=64, seed=seed)


def _aggregator(
    batch: TypedBatch,
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
        node_type=ONE_TYPE,
    )


def _model(name: str) -> BlockModel:
    torch.manual_seed(0)
    cls = {"sage": SAGE, "gcn": GCN}[name]
    model = cls(16, 8, 4, num_layers=2, dropout=0.0)
    return model.eval()


def _first(agg: FirstLayerAggregator, name: str, batch: TypedBatch) -> tuple[Tensor, Tensor]:
    """``(agg_MF, x_dst_MF)`` of the one relation, as ``PerTypeInputs`` asks for them."""
    block = batch.block()
    if name == "gcn":
        sums, roots = agg.weighted_sums([block], batch.n_id)
        return sums[0], roots
    means, roots = agg.relations_agg([block], batch.n_id, root_rows=block.num_dst)
    return means[0], roots


def _plan(agg: FirstLayerAggregator, name: str, batch: TypedBatch) -> PartialPlan:
    """The plan :func:`_first` ran (pure: no cache here, or one that does not change)."""
    block = batch.block()
    if name == "gcn":
        return agg.plan_block(block, batch.n_id, GCNLayer.src_scale(block), None)
    return agg.plan_block(block, batch.n_id, None, block.num_dst)


@torch.no_grad()
def _check_layer1_equal(batch: TypedBatch, name: str, placement: str) -> None:
    model = _model(name)
    x_NF = batch.features.fetch(batch.n_id)
    block, blocks = batch.block(), batch.homogeneous_blocks()
    want = model.layers[0](x_NF, block)
    agg_MF, x_dst_MF = _first(_aggregator(batch, placement, Ledger()), name, batch)
    got = model.layers[0].combine(agg_MF, x_dst_MF, block)
    err = float((got - want).abs().max())
    assert err <= 1e-5, f"{name}/{placement}: layer-1 max abs diff {err:.3g}"
    typed = typed_copy(model, name)
    relation = next(iter(batch.sub.blocks[0]))
    logits = typed.forward_from_first_agg(
        {ONE_TYPE: x_dst_MF}, batch.sub.blocks, {relation: agg_MF}
    )
    assert torch.allclose(logits[ONE_TYPE], model(x_NF, blocks), atol=1e-5)


def _independent_bytes(agg: FirstLayerAggregator, batch: TypedBatch, name: str) -> dict[str, int]:
    """Recount what the ledger should hold from the plan alone (pairs, groups, F = 16)."""
    plan = _plan(agg, name, batch)
    weighted = name == "gcn"
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
    _check_layer1_equal(_batch(store4, LocalOwnerClient(store4, 4)), name, placement)


@pytest.mark.parametrize("name", ["sage", "gcn"])
def test_ledger_counts_equal_independent_count(store4: Path, name: str) -> None:
    batch = _batch(store4, LocalOwnerClient(store4, 4))
    ledger = Ledger()
    agg = _aggregator(batch, "owner", ledger)
    _first(agg, name, batch)
    want = _independent_bytes(agg, batch, name)
    snap = ledger.snapshot()
    assert want["partial_pairs"] > 0 and want["rows_avoided"] > 0
    assert snap.bytes["partial_request"] == want["partial_request"]
    assert snap.bytes["partial_response"] == want["partial_response"]
    for counter in ("partial_pairs", "partial_sums", "rows_avoided"):
        assert snap.counts[counter] == want[counter], counter
    owners = {r.part for r in _plan(agg, name, batch).requests}
    assert snap.messages["partial_request"] == len(owners)
    partial_calls = [p for kind, p in batch.client.calls if kind == "partial"]
    assert sorted(partial_calls) == sorted(owners)  # one call per owner


def test_owner_fetches_fewer_rows_and_auto_is_never_worse(store4: Path) -> None:
    batch = _batch(store4, LocalOwnerClient(store4, 4))
    ledgers = {}
    for placement in ("owner", "auto"):
        ledgers[placement] = Ledger()
        features = batch.features_with(ledgers[placement])
        _first(_aggregator(batch, placement, ledgers[placement], features=features), "sage", batch)
    ledgers["requester"] = Ledger()
    batch.features_with(ledgers["requester"]).fetch(batch.n_id)

    def remote(snap: Any) -> int:
        cats = ("feature_request", "feature_response", "partial_request", "partial_response")
        return int(sum(snap.bytes[c] for c in cats))

    snaps = {k: v.snapshot() for k, v in ledgers.items()}
    avoided = snaps["owner"].counts["rows_avoided"]
    requested = snaps["requester"].bytes["feature_request"] // 8
    assert snaps["owner"].bytes["feature_request"] // 8 == requested - avoided
    assert remote(snaps["auto"]) <= remote(snaps["requester"])


def test_resident_rows_are_aggregated_locally(store4: Path) -> None:
    batch = _batch(store4, LocalOwnerClient(store4, 4))

    class Resident:
        """Every row resident: nothing goes to the owners as pairs."""

        def fetch(self, gid: Tensor) -> Tensor:
            return batch.features.fetch(gid)

        def resident_mask(self, gid: Tensor) -> Tensor:
            return torch.ones(gid.shape[0], dtype=torch.bool)

    ledger = Ledger()
    agg = _aggregator(batch, "owner", ledger, features=Resident())
    _first(agg, "sage", batch)
    plan = _plan(agg, "sage", batch)
    assert not plan.requests and bool(plan.need_row_N.all())
    assert ledger.snapshot().bytes["partial_request"] == 0


def test_int8_partials_travel_encoded(store4: Path) -> None:
    batch = _batch(store4, LocalOwnerClient(store4, 4))
    ledger = Ledger()
    model = _model("sage")
    agg = _aggregator(batch, "owner", ledger, codec=make_codec("int8"))
    agg_MF, _ = _first(agg, "sage", batch)
    groups = sum(r.num_groups for r in _plan(agg, "sage", batch).requests)
    assert groups > 0
    assert ledger.snapshot().bytes["partial_response"] == groups * (16 + 4)  # F bytes + fp16 x2
    exact = model.layers[0].aggregate(batch.features.fetch(batch.n_id), batch.block())
    assert float((agg_MF - exact).abs().max()) < 0.1 * float(exact.abs().max())


@pytest.mark.parametrize(("model", "link"), [("gat", False), ("sage", True)])
def test_no_owner_sums_without_a_linear_layer_0_with_one_notice(
    store4: Path, model: str, link: bool, caplog: pytest.LogCaptureFixture
) -> None:
    from gnnsys.train.link.config import LinkConfig

    owner = FirstLayerConfig(placement=Placement.OWNER)
    task = {"link": LinkConfig()} if link else {}
    with caplog.at_level(logging.WARNING, logger="gnnsys.train.rank"):
        for part in (0, 1):  # rank 0 only: one notice per run
            inputs = runtime_inputs(store4, part, model=model, codec="fp32", layer0=owner, **task)
            assert not inputs.owner_sums and not inputs.fused
    notices = [r.getMessage() for r in caplog.records if "takes no owner sums" in r.getMessage()]
    assert len(notices) == 1
    assert ("link prediction" if link else "--model gat") in notices[0]
    sage = runtime_inputs(store4, 1, model="sage", codec="fp32", layer0=owner)
    assert set(sage.owner_sums) == {ONE_TYPE}
    with pytest.raises(ValueError, match="placement='owners'; choose one of requester"):
        FirstLayerConfig(placement="owners")  # type: ignore[arg-type]  # as the CLI passes it
    with pytest.raises(ValueError, match="requester"):
        FirstLayerAggregator(
            FirstLayerConfig(),  # requester: rows travel, nothing to aggregate at owners
            part=0,
            part_N=np.zeros(4, dtype=np.int64),
            num_features=16,
            client=LocalOwnerClient.__new__(LocalOwnerClient),
            ledger=Ledger(),
            codec=FP32Codec(),
            features=None,  # type: ignore[arg-type]
            node_type=ONE_TYPE,
        )


@pytest.mark.parametrize("name", ["sage", "gcn"])
def test_trainer_step_with_owner_aggregation_matches_requester(store4: Path, name: str) -> None:
    losses = {}
    for placement in ("requester", "owner"):
        batch = _batch(store4, LocalOwnerClient(store4, 4))
        owner_sums = {}
        if placement == "owner":
            owner_sums = {ONE_TYPE: _aggregator(batch, placement, Ledger())}
        inputs = PerTypeInputs(
            {ONE_TYPE: batch.features}, {}, owner_sums=owner_sums, weighted=name == "gcn"
        )
        torch.manual_seed(0)
        trainer = Trainer(
            Trainer.Config(batch_size=32, lr=0.01),
            model=one_type_model(16, 8, 4, 2, model=name, dropout=0.0),
            sampler=batch.sampler,
            inputs=inputs,
            train_lid=batch.train_lid,
            train_y=torch.zeros(batch.train_lid.shape[0], dtype=torch.int64),
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
    _first(agg, name, batch)
    want = _independent_bytes(agg, batch, name)
    snap = ledger.snapshot()
    assert snap.bytes["partial_request"] == want["partial_request"] > 0
    assert snap.bytes["partial_response"] == want["partial_response"] > 0
    assert snap.counts["rows_avoided"] == want["rows_avoided"]


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
    batch = _batch(store4, LocalOwnerClient(store4, 4))

    class AdmitAll:
        """A source whose cache would keep every halo row (``HaloFeatureSource.would_admit``)."""

        def fetch(self, gid: Tensor) -> Tensor:
            return batch.features.fetch(gid)

        def resident_mask(self, gid: Tensor) -> Tensor:
            return batch.features.resident_mask(gid)

        def would_admit(self, gid: Tensor) -> Tensor:
            return torch.ones(gid.shape[0], dtype=torch.bool)

    auto = _aggregator(batch, "auto", Ledger(), features=AdmitAll())
    owner = _aggregator(batch, "owner", Ledger(), features=AdmitAll())
    got_auto, got_owner = (_first(a, "sage", batch)[0] for a in (auto, owner))
    assert _plan(auto, "sage", batch).requests == () and _plan(owner, "sage", batch).requests
    torch.testing.assert_close(got_auto, got_owner, atol=1e-5, rtol=1e-5)
