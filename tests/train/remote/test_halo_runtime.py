"""The halo cache and codecs in the runtime: ledger exactness, budget, executors agreeing."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from gnnsys.cache import CacheConfig, CodecConfig
from gnnsys.cache.codecs import make_codec
from gnnsys.commands.train import add_parser, build_config
from gnnsys.config import RunConfig
from gnnsys.datasets.synthetic import sbm
from gnnsys.distributed.batches import epoch_positions
from gnnsys.sampler import CSRNeighborSource, NeighborSampler
from gnnsys.store import load_book, load_shard
from gnnsys.train.control.local_group import LocalOwnerClient
from gnnsys.train.control.run import train_local
from gnnsys.train.layer0.base import FirstLayerConfig, Placement
from gnnsys.train.remote.features import RoutedFeatureSource
from gnnsys.train.remote.ledger import Ledger
from gnnsys.train.remote.server import ShardOwner
from gnnsys.train.schedule import batch_seed_for
from tests.train.run_configs import sbm_run

pytestmark = pytest.mark.usefixtures("shared_stores")  # runs share their stores (conftest)

N, F = 1000, 16


def feature_path(
    *,
    codec: str = "fp32",
    lossy_codec: str = "int8",
    cache_policy: str = "none",
    cache_ratio: float = 0.0,
    aggregate_at: str = "requester",
) -> dict[str, Any]:
    """The ``codec``, ``cache`` and ``layer0`` configs of a run, from the old flat names."""
    return {
        "codec": CodecConfig(name=codec, lossy=lossy_codec),
        "cache": CacheConfig(policy=cache_policy, ratio=cache_ratio),
        "layer0": FirstLayerConfig(placement=Placement(aggregate_at)),
    }


def _config(parts: int, epochs: int = 2, **fetch: Any) -> RunConfig:
    return sbm_run(
        num_nodes=N, num_features=F, parts=parts, fanouts=(5, 5), hidden=32, batch_size=16,
        epochs=epochs, **feature_path(**fetch),
    )  # fmt: skip


def _remote_rows(run_dir: Path, cfg: RunConfig, epoch: int, num_batches: int) -> int:
    """Independent count: remote rows of every rank's batches, replayed on the whole graph."""
    store = run_dir / "store"
    book = load_book(store)
    graph = sbm(num_nodes=N, num_features=F)
    sampler = NeighborSampler(cfg.sampler, source=CSRNeighborSource.from_graph(graph))
    rows = 0
    for rank in range(book.num_parts):
        shard = load_shard(store, rank)
        assert shard.train_mask is not None
        train_gid = torch.from_numpy(np.asarray(shard.owned_gid)[np.asarray(shard.train_mask)])
        batches = epoch_positions(train_gid, num_batches, seed=cfg.trainer.seed, epoch=epoch)
        for b, pos in enumerate(batches):
            if pos.numel():
                sub = sampler.sample(
                    train_gid[pos], seed=batch_seed_for(cfg.trainer.seed, rank, epoch, b)
                )
                rows += int((book.owner(sub.n_id.numpy()) != rank).sum())
    return rows


def test_halo_rows_come_back_in_request_order_and_are_counted(tmp_path: Path) -> None:
    cfg = _config(parts=4)
    train_local(replace(cfg, loop=replace(cfg.loop, epochs=1)), tmp_path)
    store = tmp_path / "store"
    book = load_book(store)
    shard = load_shard(store, 0)
    assert shard.x is not None
    client = LocalOwnerClient([ShardOwner(str(store), p) for p in range(4)])
    ledger = Ledger()
    codec = make_codec("int8")
    source = RoutedFeatureSource(0, book.part_N, book.lid_N, shard.x, client, ledger, codec=codec)
    halo = np.flatnonzero(book.part_N != 0)[::-7].copy()  # descending, three owners
    own = np.flatnonzero(book.part_N == 0)[:5]
    gid = torch.from_numpy(np.concatenate([halo[:3], own, halo[3:]]))
    split = source.fetch_split(gid)
    assert torch.equal(split.local_pos, torch.arange(3, 8))
    x = torch.from_numpy(np.asarray(sbm(num_nodes=N, num_features=F).x, np.float32))
    want = codec.decode(codec.encode(x[torch.from_numpy(halo)]))
    assert torch.equal(codec.decode(split.remote), want)  # halo rows in request order
    assert torch.equal(split.local_LF, x[torch.from_numpy(own)])  # own rows from the shard
    snap = ledger.snapshot()
    assert snap.bytes["feature_request"] == 8 * halo.size
    assert snap.bytes["feature_response"] == halo.size * codec.row_nbytes(F)
    assert snap.messages["feature_request"] == 3  # one per remote owner
    assert source.counters() is None  # no cache: capacity 0, nothing to report


@pytest.mark.timeout(120)
def test_cached_run_ledger_matches_cache_counters_and_budget(tmp_path: Path) -> None:
    cfg = _config(parts=4, codec="int8", cache_policy="presample", cache_ratio=0.25)
    history = train_local(cfg, tmp_path).history
    row_bytes = make_codec("int8").row_nbytes(F)
    for m in history:
        cache = m["cache"]
        assert m["bytes"]["feature_response"] == cache["bytes_received"]
        assert m["bytes"]["feature_request"] == 8 * cache["rows_fetched"]
        assert cache["rows_fetched"] * row_bytes == cache["bytes_received"]
        assert cache["bytes_held"] <= cache["capacity_bytes"]
        assert cache["rows_requested"] == _remote_rows(tmp_path, cfg, m["epoch"], m["num_batches"])
        assert cache["rows_hit"] + cache["rows_fetched"] <= cache["rows_requested"]
        assert 0.0 < cache["hit_rate"] < 1.0
    assert history[0]["warmup_bytes"]["feature_response"] > 0  # the prefetch
    assert history[0]["warmup_bytes"]["structure_request"] > 0  # the presample dry run


@pytest.mark.timeout(120)
def test_cached_runs_repeat_exactly(tmp_path: Path) -> None:
    cfg = _config(parts=2, codec="int4", cache_policy="adaptive", cache_ratio=0.1)
    first = train_local(cfg, tmp_path / "a").history
    second = train_local(cfg, tmp_path / "b").history
    for a, b in zip(first, second, strict=True):
        assert a["bytes"] == b["bytes"] and a["cache"] == b["cache"]
        assert a["loss"] == b["loss"] and a["test_acc"] == b["test_acc"]


def test_auto_codec_resolves_on_the_driver(tmp_path: Path) -> None:
    result = train_local(_config(parts=2, epochs=1, codec="auto", lossy_codec="fp16"), tmp_path)
    assert result.summary["config"]["codec"]["name"] == "fp16"  # sbm features are not binary


def test_train_cli_sets_the_feature_path_configs() -> None:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(
        "train --cache-policy degree --cache-ratio 0.1 --codec int8 --wire zstd "
        "--aggregate-at auto".split()
    )
    cfg = build_config(args)
    assert (cfg.cache.policy, cfg.cache.ratio, cfg.cache.enabled) == ("degree", 0.1, True)
    assert (cfg.codec.name, cfg.codec.wire) == ("int8", "zstd")
    assert cfg.layer0.placement is Placement.AUTO and cfg.layer0.fused_dequant
    args = parser.parse_args("train --codec int4 --decode-halo".split())
    assert not build_config(args).layer0.fused_dequant


def _same_runs(first: list[dict[str, Any]], second: list[dict[str, Any]]) -> None:
    """Two runs' metrics lines agree on traffic, cache counters, loss and accuracy, exactly."""
    for a, b in zip(first, second, strict=True):
        assert a["bytes"] == b["bytes"] and a["messages"] == b["messages"]
        assert a["cache"] == b["cache"] and a["warmup_bytes"] == b["warmup_bytes"]
        assert a["loss"] == b["loss"] and a["test_acc"] == b["test_acc"]


@pytest.mark.ray
@pytest.mark.timeout(240)
def test_ray_and_local_executors_agree(ray_session: Any, tmp_path: Path) -> None:
    from gnnsys.train.control.run import train

    cfg = _config(parts=2, codec="int8", cache_policy="adaptive", cache_ratio=0.25)
    _same_runs(train(cfg, tmp_path / "ray").history, train_local(cfg, tmp_path / "local").history)
    summary = json.loads((tmp_path / "ray" / "summary.json").read_text())
    assert summary["config"]["cache"]["policy"] == "adaptive"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("placement", ["requester", "auto"])
def test_traffic_replay_equals_training_traffic(tmp_path: Path, placement: str) -> None:
    cfg = _config(
        parts=4, codec="int8", cache_policy="adaptive", cache_ratio=0.1, aggregate_at=placement
    )
    trained = train_local(cfg, tmp_path / "train").history
    replayed = train_local(cfg, tmp_path / "replay", traffic_only=True).history
    for t, r in zip(trained, replayed, strict=True):
        feature_keys = [k for k in t["bytes"] if k != "allreduce"]
        assert {k: t["bytes"][k] for k in feature_keys} == {k: r["bytes"][k] for k in feature_keys}
        assert t["cache"] == r["cache"] and t["warmup_bytes"] == r["warmup_bytes"]
        assert "test_acc" not in r and r["bytes"]["allreduce"] == 0


@pytest.mark.timeout(120)
def test_cache_never_changes_what_the_model_sees(tmp_path: Path) -> None:
    plain = train_local(_config(parts=4, codec="int4"), tmp_path / "plain").history
    cached = _config(parts=4, codec="int4", cache_policy="degree", cache_ratio=0.25)
    with_cache = train_local(cached, tmp_path / "cached").history
    assert [m["loss"] for m in plain] == [m["loss"] for m in with_cache]
    assert [m["test_acc"] for m in plain] == [m["test_acc"] for m in with_cache]
    assert with_cache[-1]["bytes"]["feature_response"] < plain[-1]["bytes"]["feature_response"]


@pytest.mark.ray
@pytest.mark.slow  # 15 s; remote owner reads also run in CI in test_liveness's evaluation test
@pytest.mark.timeout(240)
def test_owner_reads_local_equals_remote(ray_session: Any, tmp_path: Path) -> None:
    from gnnsys.train.control.checkpoint import load_checkpoint
    from gnnsys.train.control.run import train

    cfg = _config(parts=2, codec="int8", cache_policy="adaptive", cache_ratio=0.25)
    remote_cfg = replace(cfg, cluster=replace(cfg.cluster, owner_reads="remote"))
    remote = train(remote_cfg, tmp_path / "remote").history
    local_cfg = replace(cfg, cluster=replace(cfg.cluster, owner_reads="local"))
    _same_runs(remote, train(local_cfg, tmp_path / "local").history)
    a, b = load_checkpoint(tmp_path / "remote"), load_checkpoint(tmp_path / "local")
    assert a is not None and b is not None
    assert all(torch.equal(v, b.model_state[k]) for k, v in a.model_state.items())
    with pytest.raises(ValueError, match="owner_reads='nearby'"):
        replace(cfg.cluster, owner_reads="nearby")
    # auto: local on a Ray instance gnnsys starts itself, remote on a cluster it joins
    assert cfg.cluster.owner_reads == "auto" and cfg.cluster.reads() == "local"
    assert replace(cfg.cluster, address="10.0.0.1:6379").reads() == "remote"
