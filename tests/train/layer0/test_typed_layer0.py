"""Typed layer 0 without decoding or fetching every row (``PerTypeInputs.fetch_first``).

- ``--codec int8``: a featured type's halo rows are summed from their codes per relation, as
  ``--decode-halo`` would after decoding them: same messages and bytes, the same aggregation
  up to float summation order;
- ``--aggregate-at owner|auto``: owners sum their rows of the type per relation and send partial
  sums: the same losses up to float order, fewer feature bytes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from gnnsys.cli import main
from gnnsys.kernels import aggregate

pytestmark = pytest.mark.usefixtures("shared_stores")  # runs share their stores (conftest)

MAG = ["synthetic:mag", "-D", "scale=0.004", "-D", "reverse=true"]


def _train(out: Path, *flags: str, codec: str = "int8") -> list[dict[str, Any]]:
    argv = ["train", *MAG, "--parts", "2", "--epochs", "2", "--executor", "local",
            "--hidden", "16", "--fanouts", "4,3", "--batch-size", "128", "--codec", codec,
            "--no-progress", "--eval-every", "0", "--out", str(out), *flags]  # fmt: skip
    assert main(argv) == 0
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.timeout(300)
def test_fused_layer0_trains_as_decoding_does(tmp_path: Path) -> None:
    fused = _train(tmp_path / "fused", "--cache-policy", "degree", "--cache-ratio", "0.1")
    decoded = _train(
        tmp_path / "decoded", "--cache-policy", "degree", "--cache-ratio", "0.1", "--decode-halo"
    )
    for a, b in zip(fused, decoded, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-6)
        assert a["bytes"] == b["bytes"] and a["cache"] == b["cache"]  # same messages


@pytest.mark.timeout(300)
def test_owner_sums_train_as_the_requester_does(tmp_path: Path) -> None:
    placements = ("requester", "owner", "auto")
    runs = {a: _train(tmp_path / a, "--aggregate-at", a, codec="fp32") for a in placements}
    for placement in ("owner", "auto"):
        for a, b in zip(runs["requester"], runs[placement], strict=True):
            assert a["loss"] == pytest.approx(b["loss"], rel=1e-6)
            assert b["bytes"]["partial_response"] > 0
            assert b["bytes"]["feature_response"] < a["bytes"]["feature_response"]
            assert a["bytes"]["partial_request"] == 0


def test_relation_agg_equals_the_mean_of_fetched_rows(stores: dict[int, Path]) -> None:
    from dataclasses import replace

    from gnnsys.store.info import store_info
    from gnnsys.train.control.local_group import LocalWorkerGroup
    from gnnsys.train.control.run import worker_template
    from gnnsys.train.layer0.base import FirstLayerConfig, Placement
    from tests.train.test_rank_typed_graphs import _config, _rank_seeds

    cfg = replace(_config(stores[2], 2), layer0=FirstLayerConfig(placement=Placement.OWNER))
    template = worker_template(cfg, stores[2], store_info(stores[2]), "partitioned")
    group = LocalWorkerGroup(template, 60.0)
    group.start()
    try:
        trainer = group.workers[0].trainer
        assert set(trainer.inputs.owner_sums) == {"paper"} and not trainer.inputs.fused
        sub = trainer.sampler.sample(_rank_seeds(stores[2], 0)[0][:64], seed=7)
        x_dict, _, agg = trainer.inputs.fetch_first(sub)
        whole, _ = trainer.inputs.fetch(sub)
        assert {et for et in agg} == {et for et in sub.blocks[0] if et[0] == "paper"}
        for et, got in agg.items():
            block = sub.blocks[0][et]
            want = aggregate(whole["paper"][: block.num_src], block.rowptr, block.col, "mean")
            torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
        torch.testing.assert_close(x_dict["paper"], whole["paper"][: x_dict["paper"].shape[0]])
    finally:
        group.stop()


def test_fetch_first_sums_equal_the_mean_of_decoded_rows(stores: dict[int, Path]) -> None:
    from dataclasses import replace

    from gnnsys.cache import CodecConfig
    from gnnsys.store.info import store_info
    from gnnsys.train.control.local_group import LocalWorkerGroup
    from gnnsys.train.control.run import worker_template
    from tests.train.test_rank_typed_graphs import _config, _rank_seeds

    cfg = replace(_config(stores[2], 2), codec=CodecConfig(name="int8"))
    template = worker_template(cfg, stores[2], store_info(stores[2]), "partitioned")
    group = LocalWorkerGroup(template, 60.0)
    group.start()
    try:
        trainer = group.workers[1].trainer
        assert trainer.inputs.fused == frozenset({"paper"})
        sub = trainer.sampler.sample(_rank_seeds(stores[2], 1)[0][:64], seed=5)
        x_dict, _, agg = trainer.inputs.fetch_first(sub)
        whole, _ = trainer.inputs.fetch(sub)  # decoded rows of every sampled node
        assert agg and all(et[0] == "paper" for et in agg)
        for et, got in agg.items():
            block = sub.blocks[0][et]
            want = aggregate(whole["paper"][: block.num_src], block.rowptr, block.col, "mean")
            torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
            dst = et[2]
            torch.testing.assert_close(x_dict[dst], whole[dst][: x_dict[dst].shape[0]])
    finally:
        group.stop()
