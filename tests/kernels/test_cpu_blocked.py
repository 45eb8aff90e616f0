"""The blocked CPU path (feature tiles x edge chunks) vs the reference, forced on small graphs."""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import Csr, assert_matches, compare_grads, compare_to_reference, random_csr

from gnnsys.kernels import aggregate, cpu_blocked, use_backend


@pytest.fixture
def force_blocked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every fp32 table takes the blocked path, in chunks of 16 edges and tiles of 8 columns."""
    monkeypatch.setattr(cpu_blocked, "MIN_TABLE_BYTES", 0)
    monkeypatch.setattr(cpu_blocked, "CHUNK_EDGES", 16)
    monkeypatch.setattr(cpu_blocked, "TILE_BYTES", 32)


@pytest.mark.usefixtures("force_blocked")
@pytest.mark.parametrize("reduce", ["sum", "mean"])
@pytest.mark.parametrize("num_features", [1, 8, 37, 100])
def test_forward_matches_reference(small_csr: Csr, reduce: str, num_features: int) -> None:
    assert cpu_blocked.use_blocked(torch.zeros(1, 1))
    compare_to_reference("torch", small_csr, "fp32", reduce, num_features)


@pytest.mark.usefixtures("force_blocked")
@pytest.mark.parametrize("reduce", ["sum", "mean", "max"])
@pytest.mark.parametrize("dtype", ["int8", "int4"])
def test_quantized_chunks_match_reference(small_csr: Csr, dtype: str, reduce: str) -> None:
    compare_to_reference("torch", small_csr, dtype, reduce, num_features=37)


@pytest.mark.usefixtures("force_blocked")
@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_gradients_match_reference(small_csr: Csr, reduce: str) -> None:
    compare_grads("torch", small_csr, reduce, num_features=37)


@pytest.mark.usefixtures("force_blocked")
def test_chunks_cover_every_row_once(small_csr: Csr) -> None:
    plan = cpu_blocked.chunk_plan(small_csr.rowptr, small_csr.col, small_csr.num_src)
    rows = [q for q0, q1, _, _ in plan.bounds for q in range(q0, q1)]
    assert rows == list(range(small_csr.num_dst))
    edges = [(e0, e1) for _, _, e0, e1 in plan.bounds]
    assert edges[0][0] == 0 and edges[-1][1] == small_csr.col.shape[0]
    assert all(a[1] == b[0] for a, b in zip(edges[:-1], edges[1:], strict=True))
    assert len(plan.bounds) > 5  # the hub row (80 edges) and 16-edge chunks: many chunks


@pytest.mark.usefixtures("force_blocked")
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_index_dtypes_noncontiguous_and_empty(small_csr: Csr, index_dtype: torch.dtype) -> None:
    x = torch.randn(small_csr.num_src, 40)[:, ::2]  # non-contiguous, F = 20
    col = torch.stack([small_csr.col, small_csr.col], 1)[:, 0].to(index_dtype)
    rowptr = small_csr.rowptr.to(index_dtype)
    for reduce in ("sum", "mean"):
        with use_backend("reference"):
            ref = aggregate(x.contiguous(), small_csr.rowptr, small_csr.col, reduce)
        out = aggregate(x, rowptr, col, reduce)
        assert_matches(out, ref, 1e-5, f"blocked {reduce} {index_dtype}")
    empty = aggregate(x, torch.zeros(4, dtype=index_dtype), torch.zeros(0, dtype=index_dtype))
    assert empty.shape == (3, 20) and not empty.any()


@pytest.mark.usefixtures("force_blocked")
def test_staging_reuse_keeps_earlier_results() -> None:
    """The staging buffer is reused across calls; earlier outputs must not alias it."""
    csr = random_csr(num_src=30, num_dst=20, max_deg=6, seed=5)
    outs, refs = [], []
    for seed, f in ((0, 24), (1, 8), (2, 40)):
        x = torch.randn(csr.num_src, f, generator=torch.Generator().manual_seed(seed))
        outs.append(aggregate(x, csr.rowptr, csr.col, "mean"))
        with use_backend("reference"):
            refs.append(aggregate(x, csr.rowptr, csr.col, "mean"))
    for out, ref in zip(outs, refs, strict=True):
        assert_matches(out, ref, 1e-5, "after reuse")


def test_thp_empty_is_a_plain_tensor() -> None:
    t = cpu_blocked.thp_empty((3 << 20,), torch.float32)  # 12 MiB: advised
    assert t.shape == (3 << 20,) and t.dtype == torch.float32 and t.is_contiguous()
    t.fill_(1.5)
    t.resize_(10)  # an ordinary, resizable torch storage
    assert float(t.sum()) == 15.0


def test_small_or_non_fp32_tables_take_the_plain_path() -> None:
    assert not cpu_blocked.use_blocked(torch.zeros(1000, 128))
    assert not cpu_blocked.use_blocked(torch.zeros(1, 1, dtype=torch.float16))
