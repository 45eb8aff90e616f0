"""Evaluation runs: bounded in rows and edges; a linear run's sums from two tables."""

from __future__ import annotations

import pytest
import torch

from gnnsys.kernels import aggregate
from gnnsys.train.eval import runs as eval_runs
from gnnsys.train.eval.evaluate import EvalConfig
from gnnsys.types import Block

ET = ("node", "to", "node")


def _block(degrees: list[int], num_src: int, seed: int = 0) -> Block:
    g = torch.Generator().manual_seed(seed)
    rowptr = torch.zeros(len(degrees) + 1, dtype=torch.int64)
    rowptr[1:] = torch.cumsum(torch.tensor(degrees), 0)
    col = torch.randint(0, num_src, (int(rowptr[-1]),), generator=g)
    return Block(num_src=num_src, num_dst=len(degrees), rowptr=rowptr, col=col, e_id=col * 0)


def test_runs_cover_every_row_once_within_the_row_and_edge_bounds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(eval_runs, "RUN_ROWS", 4)
    degrees = [0, 1, 9, 2, 2, 0, 0, 0, 0, 0, 3, 1]  # sparse rows: the row bound cuts them
    block = _block(degrees, 20)
    runs = eval_runs.destination_runs({ET: block}, {"node": 12}, EvalConfig(chunk_edges=5))
    [(first, _), *_] = runs["node"]
    assert first == 0 and runs["node"][-1][1] == 12
    ends = [hi for _, hi in runs["node"][:-1]]
    assert ends == [lo for lo, _ in runs["node"][1:]]  # contiguous
    for lo, hi in runs["node"]:
        assert hi - lo <= 4
        assert sum(degrees[lo:hi]) <= 5 or hi - lo == 1  # a row above the bound runs alone
    assert runs["node"] == [(0, 2), (2, 3), (3, 7), (7, 11), (11, 12)]


@pytest.mark.parametrize("col_dtype", [torch.int32, torch.int64])
def test_two_table_sum_equals_the_sum_over_the_concatenated_rows(col_dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(1)
    own, halo = torch.randn(7, 5, generator=g), torch.randn(4, 5, generator=g)
    block = _block([3, 0, 5, 1, 4], 11)
    col = block.col.to(col_dtype)
    got = eval_runs.two_table_sum(own, halo, block.rowptr, col)
    want = aggregate(torch.cat([own, halo]), block.rowptr, block.col, "sum")
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)  # summation order differs
    only_own = col.clamp(max=6)  # every source owned: one kernel call
    torch.testing.assert_close(
        eval_runs.two_table_sum(own, halo, block.rowptr, only_own),
        aggregate(own, block.rowptr, only_own.long(), "sum"),
    )
