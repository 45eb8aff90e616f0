"""Owner-side partial aggregation equals requester-side aggregation on the same batch."""

from __future__ import annotations

import pytest
import torch

from gnnsys.models.layers import GCNLayer, SAGELayer
from gnnsys.sampler import CSRNeighborSource, NeighborSampler
from gnnsys.train.layer0.plan import combine_partials, owner_partial_sums, plan_partial
from gnnsys.types import Graph

NUM_PARTS = 3


def first_block(graph: Graph) -> tuple[torch.Tensor, object, torch.Tensor]:
    sampler = NeighborSampler(
        NeighborSampler.Config(fanouts=(5, 5)), source=CSRNeighborSource.from_graph(graph)
    )
    seeds = torch.arange(0, 1000, 37)
    sub = sampler.sample(seeds, seed=7)
    part_all = torch.arange(graph.num_nodes) % NUM_PARTS
    return sub.n_id, sub.blocks[0], part_all


def answer(plan, x_all: torch.Tensor) -> dict[int, torch.Tensor]:
    """Each owner sums its own rows (here the owner's rows are the global rows)."""
    return {
        r.part: owner_partial_sums(x_all, r.src_gid, r.group_rowptr, r.src_weight)
        for r in plan.requests
    }


@pytest.mark.parametrize("placement", ["owner", "auto", "requester"])
@pytest.mark.parametrize("layer_kind", ["sage", "gcn"])
def test_owner_equals_requester(tiny_graph: Graph, placement: str, layer_kind: str) -> None:
    torch.manual_seed(0)
    n_id, block, part_all = first_block(tiny_graph)
    x_all = torch.from_numpy(tiny_graph.x)
    x_NF = x_all[n_id]
    part_N = part_all[n_id]
    layer = SAGELayer(16, 8) if layer_kind == "sage" else GCNLayer(16, 8)
    weight = GCNLayer.src_scale(block) if layer_kind == "gcn" else None
    reduce = "mean" if layer_kind == "sage" else "sum"
    plan = plan_partial(
        block,
        n_id,
        part_N,
        my_part=0,
        available_N=torch.zeros(len(n_id), dtype=torch.bool),
        placement=placement,
        row_bytes=16 * 4,
        src_weight_N=weight,
    )
    if placement == "owner":
        assert plan.requests and plan.rows_avoided > 0
    masked = torch.where(plan.need_row_N[:, None], x_NF, torch.full_like(x_NF, float("nan")))
    agg = combine_partials(
        plan, block, masked, answer(plan, x_all), reduce=reduce, src_weight_N=weight
    )
    expected = layer(x_NF, block)
    got = layer.combine(agg, x_NF[: block.num_dst], block)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def plan_for(graph: Graph, placement: str, *, cached: bool = False):
    """Plan part 0's first block with nothing (or everything) available without a fetch."""
    n_id, block, part_all = first_block(graph)
    available = torch.full((len(n_id),), cached, dtype=torch.bool)
    plan = plan_partial(
        block, n_id, part_all[n_id], my_part=0, available_N=available, placement=placement
    )
    return plan, block


def test_requester_placement_sends_nothing(tiny_graph: Graph) -> None:
    plan, _ = plan_for(tiny_graph, "requester")
    assert plan.requests == () and plan.rows_avoided == 0 and bool(plan.need_row_N.all())


def test_cached_rows_stay_local(tiny_graph: Graph) -> None:
    plan, block = plan_for(tiny_graph, "owner", cached=True)
    assert plan.requests == () and plan.local_col.numel() == block.num_edges


@pytest.mark.parametrize(("row_bytes", "sum_bytes"), [(64, None), (64, 64), (2, 64), (64, 2)])
def test_auto_never_costs_more_than_rows(
    tiny_graph: Graph, row_bytes: int, sum_bytes: int | None
) -> None:
    """Also when rows and sums travel in different formats (binary rows, float32 sums)."""
    n_id, block, part_all = first_block(tiny_graph)
    part_N = part_all[n_id]
    none = torch.zeros(len(n_id), dtype=torch.bool)
    auto = plan_partial(
        block,
        n_id,
        part_N,
        my_part=0,
        available_N=none,
        placement="auto",
        row_bytes=row_bytes,
        sum_bytes=sum_bytes,
    )
    per_sum = row_bytes if sum_bytes is None else sum_bytes

    def cost(plan) -> int:
        remote_rows = int(((part_N != 0) & plan.need_row_N).sum())
        partial = sum(r.request_nbytes() + r.num_groups * per_sum for r in plan.requests)
        return remote_rows * (8 + row_bytes) + partial

    req = plan_partial(block, n_id, part_N, my_part=0, available_N=none, placement="requester")
    assert cost(auto) <= cost(req)


def test_bad_placement_is_a_clear_error() -> None:
    from gnnsys.train.layer0.base import FirstLayerConfig, Placement

    with pytest.raises(ValueError, match="placement='nowhere'; choose one of requester"):
        FirstLayerConfig(placement="nowhere")  # type: ignore[arg-type]  # validated once, here
    assert FirstLayerConfig(placement="auto").placement is Placement.AUTO  # type: ignore[arg-type]
