from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnsys.distributed.batches import epoch_positions
from gnnsys.testing.in_memory import one_type_trainer
from gnnsys.testing.reference import full_block
from gnnsys.train.schedule import (
    BatchPlan,
    global_windows,
    item_keys,
    steps_per_epoch,
)
from gnnsys.train.trainer import Trainer
from gnnsys.types import ONE_RELATION, ONE_TYPE, Graph


@pytest.mark.parametrize(("num_seeds", "num_batches"), [(10, 3), (7, 7), (2, 5), (0, 2)])
@pytest.mark.parametrize("schedule", ["global", "max"])
def test_epoch_positions_are_a_split_permutation(
    num_seeds: int, num_batches: int, schedule: str
) -> None:
    ids = torch.arange(num_seeds) * 7 + 3
    batches = epoch_positions(ids, num_batches, seed=3, epoch=2, schedule=schedule)
    assert len(batches) == num_batches
    assert sorted(torch.cat(batches).tolist()) == list(range(num_seeds))
    if schedule == "max":  # the rank's share split in turn: near-equal batches
        sizes = [int(b.numel()) for b in batches]
        assert max(sizes) - min(sizes) <= 1
    again = epoch_positions(ids, num_batches, seed=3, epoch=2, schedule=schedule)
    assert all(torch.equal(a, b) for a, b in zip(batches, again, strict=True))


def test_epoch_positions_drop_last_and_unshuffled() -> None:
    ids = torch.arange(10)
    full = epoch_positions(ids, 3, seed=0, epoch=0, batch_size=3)
    assert [int(b.numel()) for b in full] == [3, 3, 3]
    assert len(set(torch.cat(full).tolist())) == 9
    plain = epoch_positions(ids, 2, seed=0, epoch=0, shuffle=False)
    assert [b.tolist() for b in plain] == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]


def test_global_windows_split_any_partition_into_the_one_part_batches() -> None:
    ids = torch.randperm(500, generator=torch.Generator().manual_seed(0))[:300]
    keys = item_keys(ids, seed=5, epoch=1)
    assert keys.dtype.name == "uint64" and len(set(keys.tolist())) == 300
    whole = [ids[p] for p in global_windows(keys, 4)]
    assert sorted(torch.cat(whole).tolist()) == sorted(ids.tolist())  # each id once
    parts = [ids[ids % 3 == r] for r in range(3)]  # any split of the ids into ranks
    shares = [[p[q] for q in global_windows(item_keys(p, seed=5, epoch=1), 4)] for p in parts]
    for b in range(4):
        assert sorted(torch.cat([s[b] for s in shares]).tolist()) == sorted(whole[b].tolist())
    assert not torch.equal(whole[0], ids[global_windows(item_keys(ids, seed=5, epoch=2), 4)[0]])
    links = torch.stack([ids, ids.flip(0)])  # a link's key mixes both endpoints
    assert not np.array_equal(item_keys(links, seed=5, epoch=1), keys)


def test_epoch_positions_reject_zero() -> None:
    with pytest.raises(ValueError, match="num_batches=0"):
        epoch_positions(torch.arange(5), 0, seed=0, epoch=0)


def _trainer(graph: Graph, seed: int, device: torch.device | str = "cpu") -> Trainer:
    config = Trainer.Config(lr=0.01, batch_size=16, seed=seed)
    return one_type_trainer(graph, config, hidden=32, model_seed=seed, device=device)


def test_single_process_loop_learns_and_is_deterministic(
    tiny_graph: Graph, device: torch.device
) -> None:
    # dropout draws from torch's global RNG, so the two runs go one after the other
    a = _trainer(tiny_graph, 0, device)
    losses = []
    for epoch in range(4):
        stats = a.train_epoch(epoch, steps_per_epoch([a.batch_plan()]))
        assert stats.num_seeds == int(tiny_graph.train_mask.sum())  # type: ignore[union-attr]
        losses.append(stats.loss_sum / stats.num_seeds)
    assert losses[-1] < losses[0]
    b = _trainer(tiny_graph, 0, device)
    for epoch in range(4):
        b.train_epoch(epoch, steps_per_epoch([b.batch_plan()]))
    for key, value in a.model.state_dict().items():
        assert value.device.type == device.type, key
        assert torch.equal(value, b.model.state_dict()[key]), key
    block = full_block(tiny_graph.indptr, tiny_graph.indices, tiny_graph.num_nodes)
    host = a.host_model()
    assert all(p.device.type == "cpu" for p in host.parameters())
    x = torch.from_numpy(tiny_graph.x)  # type: ignore[arg-type]
    logits = host.eval()({ONE_TYPE: x}, ({ONE_RELATION: block},) * 2)[ONE_TYPE]
    assert logits.shape == (tiny_graph.num_nodes, tiny_graph.num_classes)


def test_state_roundtrip_restores_rng(tiny_graph: Graph, device: torch.device) -> None:
    a = _trainer(tiny_graph, 1, device)
    a.train_epoch(0, steps_per_epoch([a.batch_plan()]))
    state = a.state()
    a.train_epoch(1, steps_per_epoch([a.batch_plan()]))
    b = _trainer(tiny_graph, 1, device)  # same run seed (batch order); weights from the state
    b.load_state(state["model"], state["optimizer"], state["rng"])
    b.train_epoch(1, steps_per_epoch([b.batch_plan()]))
    for key, value in a.model.state_dict().items():
        assert torch.equal(value, b.model.state_dict()[key]), key


def test_ranks_loading_one_state_do_not_share_optimizer_moments(tiny_graph: Graph) -> None:
    # Regression: the in-process executor hands every rank the same checkpoint dict; torch keeps
    # loaded state tensors as its own, so two ranks' Adam moments were one tensor.
    a = _trainer(tiny_graph, 2)
    a.train_epoch(0, 1)
    state = a.state()
    b, c = _trainer(tiny_graph, 2), _trainer(tiny_graph, 2)
    for t in (b, c):
        t.load_state(state["model"], state["optimizer"], state["rng"])
    moments = [
        {id(v) for s in t.optimizer.state.values() for v in s.values() if torch.is_tensor(v)}
        for t in (b, c)
    ]
    assert moments[0].isdisjoint(moments[1])
    assert moments[0].isdisjoint(
        {id(v) for s in state["optimizer"]["state"].values() for v in s.values()}
    )


def test_steps_per_epoch_global_is_one_parts_count_and_max_caps_batches() -> None:
    # ranks of 470, 180, 190, 160 seeds at 256 each: the global batch 1024 over 1000 seeds
    plans = [BatchPlan(n, 256, "global") for n in (470, 180, 190, 160)]
    assert steps_per_epoch(plans) == 1 == steps_per_epoch([BatchPlan(1000, 1024, "global")])
    capped = [BatchPlan(n, 256, "max") for n in (470, 180, 190, 160)]
    assert steps_per_epoch(capped) == 2  # ceil(470 / 256)
    assert steps_per_epoch([BatchPlan(0, 8, "global"), BatchPlan(0, 8, "global")]) == 1
    with pytest.raises(ValueError, match="no batch plans"):
        steps_per_epoch([])
    with pytest.raises(ValueError, match="disagree"):
        steps_per_epoch([BatchPlan(1, 1, "global"), BatchPlan(1, 1, "max")])


def test_unknown_schedule_names_the_choices() -> None:
    with pytest.raises(ValueError, match="schedule='even'.*global, max"):
        Trainer.Config(schedule="even")
