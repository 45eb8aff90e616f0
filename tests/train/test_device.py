"""The step's device: the driver's plan, the transfer stage's copies, device-independent state."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from gnnsys.cache import CacheConfig, CodecConfig
from gnnsys.cache.codecs import EncodedRows
from gnnsys.testing.in_memory import one_type_trainer
from gnnsys.train.control.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from gnnsys.train.control.cluster_config import ClusterConfig
from gnnsys.train.control.run import train_local
from gnnsys.train.device import (
    DevicePlan,
    StepDevice,
    StepInputs,
    map_tensors,
    plan_devices,
    rank_device,
    to_host,
    visible_index,
)
from gnnsys.train.layer0.base import FirstLayerConfig
from gnnsys.train.trainer import Trainer
from gnnsys.types import Block, Graph, SampledSubgraph
from tests.train.run_configs import host_and_device_rows, sbm_run

pytestmark = pytest.mark.usefixtures("shared_stores")  # runs share their stores (conftest)

NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error without a GPU")


# ---- the driver's plan (pure) ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("choice", "parts", "gpus", "want"),
    [
        ("cpu", 2, 8, DevicePlan("cpu")),
        ("auto", 2, 0, DevicePlan("cpu")),
        ("auto", 2, 2, DevicePlan("cuda", 1.0, "nccl")),
        ("cuda", 1, 1, DevicePlan("cuda", 1.0, "nccl")),
        ("cuda", 4, 1, DevicePlan("cuda", 0.25, "gloo")),  # four ranks share one GPU
        ("cuda", 4, 2, DevicePlan("cuda", 0.5, "gloo")),
        ("cuda", 3, 2, DevicePlan("cuda", 0.5, "gloo")),
    ],
)
def test_plan_gives_each_trainer_a_gpu_or_a_share(
    choice: str, parts: int, gpus: float, want: DevicePlan
) -> None:
    assert plan_devices(choice, parts=parts, gpus=gpus) == want


def test_plan_refuses_cuda_without_a_gpu_and_unknown_devices() -> None:
    with pytest.raises(ValueError, match="--device cuda, but the run sees no GPU.*--device cpu"):
        plan_devices("cuda", parts=2, gpus=0)
    with pytest.raises(ValueError, match="device='tpu'; choose one of cpu, cuda, auto"):
        plan_devices("tpu", parts=1, gpus=0)
    with pytest.raises(ValueError, match="device='gpu'; choose cpu, cuda or auto"):
        ClusterConfig(device="gpu")


@pytest.mark.parametrize(
    ("gpu_ids", "visible", "want"),
    [([3], "3", 0), (["1"], "0,1", 1), ([2, 5], "5,2", 1), ([0], None, 0)],
)
def test_a_ray_actor_finds_its_gpu_among_the_visible_ones(
    gpu_ids: list[object], visible: str | None, want: int
) -> None:
    assert visible_index(gpu_ids, visible) == want


@NO_GPU
def test_a_rank_placed_on_cuda_without_one_says_so() -> None:
    assert rank_device("cpu", 3) == torch.device("cpu")
    with pytest.raises(ValueError, match="rank 1 was placed on cuda.*--device cpu"):
        rank_device("cuda", 1)


# ---- the transfer stage ------------------------------------------------------------------------
def _sub(device: torch.device | str = "cpu") -> SampledSubgraph:
    block = Block(
        num_src=3,
        num_dst=2,
        rowptr=torch.tensor([0, 1, 3], device=device),
        col=torch.tensor([2, 0, 1], device=device),
        e_id=torch.full((3,), -1, device=device),
    )
    return SampledSubgraph(torch.arange(3, device=device), (block,), 2, (2, 1), (3,))


def test_map_tensors_reaches_every_tensor_of_records_and_containers() -> None:
    rows = EncodedRows("int8", 4, torch.zeros(2, 4, dtype=torch.int8), torch.ones(2), torch.ones(2))
    tree = ({"a": _sub(), "b": [rows, 5, "x"]}, None)
    seen: list[torch.Tensor] = []
    out = map_tensors(tree, lambda t: seen.append(t) or t + 1)
    assert len(seen) == 1 + 3 + 3  # n_id, the block's rowptr, col, e_id; payload, scale, zero
    assert torch.equal(out[0]["a"].blocks[0].col, torch.tensor([3, 1, 2]))
    assert out[0]["b"][1:] == [5, "x"] and out[1] is None
    assert torch.equal(tree[0]["a"].blocks[0].col, torch.tensor([2, 0, 1]))  # the input unchanged


def test_a_cpu_step_copies_nothing() -> None:
    step = StepDevice("cpu")
    x = torch.randn(4, 3)
    moved = step.copy(StepInputs((x, _sub()), lambda x, sub: x.sum(0) + sub.n_id.sum()))
    assert moved.args[0] is x  # no copy, so the step is the synchronous one, bit for bit
    assert moved.ready is not None  # the same event calls, through torch.cpu's shims
    assert torch.equal(step.forward(moved), x.sum(0) + 3)
    assert step.rng_state() is None and step.peak_bytes() == 0


def test_copies_are_ready_before_the_forward_reads_them(device: torch.device) -> None:
    """Many large copies in flight: each forward sees its batch's values, never a stale one."""
    step = StepDevice(device)
    batches = [torch.full((1024, 256), float(i)) for i in range(8)]
    pending = [step.copy(StepInputs((x,), lambda x: x.sum())) for x in batches]
    for i, inputs in enumerate(pending):
        assert inputs.args[0].device.type == device.type
        assert float(step.forward(inputs)) == i * 1024 * 256
    assert to_host(pending[0].args[0]).device.type == "cpu"


def test_learnable_rows_keep_their_gradient_through_the_copy(device: torch.device) -> None:
    """A typed run's embedding rows cross to the device on the autograd graph."""
    step = StepDevice(device)
    leaf = torch.randn(5, 3, requires_grad=True)
    moved = step.copy(StepInputs(({"author": leaf},), lambda x: (x["author"] * 2).sum()))
    step.forward(moved).backward()
    assert leaf.grad is not None and torch.equal(leaf.grad, torch.full((5, 3), 2.0))


# ---- state: device-independent -------------------------------------------------------------
def _trainer(graph: Graph, device: torch.device | str) -> Trainer:
    config = Trainer.Config(lr=0.01, batch_size=32, seed=0)
    return one_type_trainer(graph, config, fanouts=(4, 4), device=device)


def test_state_is_host_tensors_and_resumes_on_another_device(
    tiny_graph: Graph, device: torch.device, tmp_path: Path
) -> None:
    """Saved on ``device`` (a GPU run's state carries its RNG too), resumed on the CPU."""
    a = _trainer(tiny_graph, device)
    a.train_epoch(0, 4)
    state = a.state()
    a.train_epoch(1, 4)  # dropout draws from the process's RNG: one trainer after the other
    if device.type == "cpu":  # what a GPU run's state holds beside the CPU RNG
        state["rng"]["cuda"] = torch.zeros(16, dtype=torch.uint8)
    found: list[str] = []
    map_tensors(state, lambda t: found.append(t.device.type) or t)
    assert found and set(found) == {"cpu"}
    save_checkpoint(tmp_path, Checkpoint(0, state["model"], state["optimizer"], [state["rng"]]))
    ckpt = load_checkpoint(tmp_path)
    assert ckpt is not None
    b = _trainer(tiny_graph, "cpu")
    b.load_state(ckpt.model_state, ckpt.optimizer_state, ckpt.rng_by_rank[0])
    b.train_epoch(1, 4)
    for key, value in a.model.state_dict().items():  # on one device: bit-identical
        got = b.model.state_dict()[key]
        if device.type == "cpu":
            assert torch.equal(value, got), key
        else:  # another device's kernels sum in another order; dropout masks differ
            torch.testing.assert_close(value.cpu(), got, rtol=0.1, atol=0.05)


def test_a_run_resumes_whatever_its_device(tmp_path: Path) -> None:
    """``--device`` may change on resume (``cluster.device`` is not part of the identity)."""
    cfg = sbm_run(
        num_nodes=300, num_features=8, parts=2, fanouts=(3, 3), hidden=8, batch_size=32, epochs=1
    )
    first = train_local(replace(cfg, cluster=replace(cfg.cluster, device="cpu")), tmp_path)
    assert first.summary["device"] == {"kind": "cpu", "gpus_per_trainer": 0.0, "backend": "gloo"}
    again = replace(cfg, cluster=replace(cfg.cluster, device="auto"))
    again = replace(again, loop=replace(again.loop, epochs=2, resume=True))
    result = train_local(again, tmp_path)
    assert [m["epoch"] for m in result.history] == [0, 1]
    want = "cuda" if torch.cuda.is_available() else "cpu"
    assert result.summary["device"]["kind"] == want


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("codec", "aggregate_at"), [("fp32", "requester"), ("int8", "requester"), ("fp32", "owner")]
)
def test_features_on_the_device_train_the_same_weights(
    tmp_path: Path, device: torch.device, codec: str, aggregate_at: str
) -> None:
    """Own rows and the halo cache on the trainer's device: the batch's rows gathered there
    (int8: summed there by the fused layer 0; owner sums: combined on the host)."""
    cfg = sbm_run(
        num_nodes=400, num_features=8, parts=2, fanouts=(4, 3), hidden=8, batch_size=32, epochs=2,
        codec=CodecConfig(name=codec), layer0=FirstLayerConfig(placement=aggregate_at),
    )  # fmt: skip
    cfg = replace(cfg, cluster=replace(cfg.cluster, device=device.type))
    runs = host_and_device_rows(cfg, tmp_path)
    (hist_a, state_a), (hist_b, state_b) = runs["host"], runs["device"]
    assert [m["cache"]["rows_hit"] for m in hist_a] == [m["cache"]["rows_hit"] for m in hist_b]
    assert hist_a[-1]["cache"]["rows_hit"] > 0 and hist_a[-1]["bytes"] == hist_b[-1]["bytes"]
    for key, value in state_a.items():  # one device, the same sums: the same weights
        torch.testing.assert_close(value, state_b[key], rtol=0, atol=0)
    with pytest.raises(ValueError, match="placement='gpu'; choose host or device"):
        CacheConfig(placement="gpu")


@NO_GPU
def test_a_cuda_run_without_a_gpu_fails_before_it_starts(tmp_path: Path) -> None:
    cfg = sbm_run(
        num_nodes=200, num_features=8, parts=1, fanouts=(3,), hidden=8, batch_size=32, epochs=1
    )
    with pytest.raises(ValueError, match="--device cuda, but the run sees no GPU"):
        train_local(replace(cfg, cluster=replace(cfg.cluster, device="cuda")), tmp_path)
    assert not (tmp_path / "checkpoint.pt").exists()
