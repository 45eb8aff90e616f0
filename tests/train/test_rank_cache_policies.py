"""Typed halo caches admit by ``presample`` and ``adaptive`` too (scored by a dry run of the typed
sampler, per node type), and a typed run stays identical at every prefetch depth with them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from gnnsys.cache.admission import presample_counts, presample_scores
from gnnsys.cli import main
from gnnsys.sampler import CSRNeighborSource, NeighborSampler
from gnnsys.types import Graph

pytestmark = pytest.mark.usefixtures("shared_stores")  # runs share their stores (conftest)

MAG = ["synthetic:mag", "-D", "scale=0.004", "-D", "reverse=true"]


def _train(out: Path, *flags: str) -> list[dict[str, Any]]:
    argv = ["train", *MAG, "--parts", "2", "--epochs", "2", "--executor", "local",
            "--hidden", "16", "--fanouts", "4,3", "--batch-size", "128", "--no-progress",
            "--eval-every", "0", "--out", str(out), *flags]  # fmt: skip
    assert main(argv) == 0
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.timeout(300)
@pytest.mark.parametrize(  # adaptive warm-starts from presample's counts; presample alone: --all
    "policy", [pytest.param("presample", marks=pytest.mark.slow), "adaptive"]
)
def test_scored_policies_run_and_do_not_depend_on_prefetch(policy: str, tmp_path: Path) -> None:
    flags = ("--cache-policy", policy, "--cache-ratio", "0.1", "--presample-epochs", "2")
    sync = _train(tmp_path / "k0", *flags, "--prefetch", "0")
    ahead = _train(tmp_path / "k2", *flags, "--prefetch", "2")
    for a, b in zip(sync, ahead, strict=True):
        assert a["loss"] == b["loss"] and a["bytes"] == b["bytes"] and a["cache"] == b["cache"]
    assert sync[0]["cache"]["rows_hit"] > 0
    assert sync[0]["warmup_bytes"]["structure_response"] > 0  # the dry run sampled remotely


def test_presample_counts_of_one_type_are_presample_scores(tiny_graph: Graph) -> None:
    sampler = NeighborSampler(
        NeighborSampler.Config(fanouts=(3, 2)),
        source=CSRNeighborSource(tiny_graph.indptr, tiny_graph.indices),
    )
    owned = torch.zeros(tiny_graph.num_nodes, dtype=torch.bool)
    owned[: tiny_graph.num_nodes // 2] = True
    seeds = torch.arange(tiny_graph.num_nodes // 2)
    scores = presample_scores(sampler, seeds, owned, batch_size=16, epochs=2, seed=3)
    counts = presample_counts(
        lambda s, b: {"v": sampler.sample(s, seed=b).n_id}, seeds, {"v": owned},
        batch_size=16, epochs=2, seed=3,
    )  # fmt: skip
    assert torch.equal(scores, counts["v"]) and float(scores.sum()) > 0
    assert float(scores[owned].sum()) == 0.0
