"""The torch backend (CPU default) vs the reference: every reduce x dtype, edge cases, grads."""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import Csr, compare_grads, compare_to_reference, inputs_for, random_csr

from gnnsys.kernels import aggregate, use_backend

DTYPES = ["fp32", "fp16", "bf16", "int8", "int4"]
REDUCES = ["sum", "mean", "max"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduce", REDUCES)
def test_matches_reference(small_csr: Csr, dtype: str, reduce: str) -> None:
    compare_to_reference("torch", small_csr, dtype, reduce, num_features=37)


@pytest.mark.parametrize("num_features", [100, 1433])
@pytest.mark.parametrize("dtype", ["fp32", "int8", "int4"])
def test_feature_dims_not_power_of_two(num_features: int, dtype: str) -> None:
    csr = random_csr(num_src=50, num_dst=12, max_deg=6, seed=3, hub_deg=40)
    compare_to_reference("torch", csr, dtype, "mean", num_features)


@pytest.mark.parametrize("reduce", REDUCES)
def test_gradients_match_reference(small_csr: Csr, reduce: str) -> None:
    compare_grads("torch", small_csr, reduce)


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_index_dtypes_and_noncontiguous(small_csr: Csr, index_dtype: torch.dtype) -> None:
    x_wide = torch.randn(small_csr.num_src, 40)
    x = x_wide[:, ::2]  # non-contiguous view, F = 20
    col = torch.stack([small_csr.col, small_csr.col], 1)[:, 0].to(index_dtype)  # strided col
    rowptr = small_csr.rowptr.to(index_dtype)
    for reduce in REDUCES:
        with use_backend("reference"):
            ref = aggregate(x.contiguous(), small_csr.rowptr, small_csr.col, reduce)
        with use_backend("torch"):
            out = aggregate(x, rowptr, col, reduce)
        torch.testing.assert_close(out, ref)


def test_zero_edges_and_zero_rows() -> None:
    x = torch.randn(4, 3, requires_grad=True)
    rowptr = torch.zeros(3, dtype=torch.long)
    col = torch.zeros(0, dtype=torch.long)
    for reduce in REDUCES:
        out = aggregate(x, rowptr, col, reduce)
        assert out.shape == (2, 3) and not out.any()
        out.sum().backward()
    assert x.grad is not None and not x.grad.any()
    assert aggregate(x, torch.zeros(1, dtype=torch.long), col).shape == (0, 3)


def test_quantized_has_no_grad(small_csr: Csr) -> None:
    q = torch.randint(-128, 128, (small_csr.num_src, 8), dtype=torch.int8)
    ones = torch.ones(small_csr.num_src, dtype=torch.float16)
    out = aggregate(q, small_csr.rowptr, small_csr.col, "mean", scale=ones, zero=ones)
    assert out.dtype == torch.float32 and not out.requires_grad


@pytest.mark.parametrize("reduce", REDUCES)
def test_gradcheck_float64(reduce: str) -> None:
    csr = random_csr(num_src=20, num_dst=12, max_deg=5, seed=4, hub_deg=9)
    x = torch.randn(csr.num_src, 2, dtype=torch.float64, requires_grad=True)
    with use_backend("torch"):
        assert torch.autograd.gradcheck(lambda t: aggregate(t, csr.rowptr, csr.col, reduce), (x,))


def test_int8_workspace_reuse_keeps_earlier_results(small_csr: Csr) -> None:
    """The repack buffer is reused across calls; earlier outputs must not alias it."""
    outs, refs = [], []
    for seed, f in ((0, 24), (1, 8)):
        kw = inputs_for(
            "int8", torch.randn(small_csr.num_src, f, generator=torch.Generator().manual_seed(seed))
        )
        x = kw.pop("x")
        outs.append(aggregate(x, small_csr.rowptr, small_csr.col, "sum", **kw))
        with use_backend("reference"):
            refs.append(aggregate(x, small_csr.rowptr, small_csr.col, "sum", **kw))
    for out, ref in zip(outs, refs, strict=True):
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-4)


def test_edge_mean_weights_are_cached_inverse_degrees(small_csr: Csr) -> None:
    from gnnsys.kernels.csr import edge_mean_weights

    w = edge_mean_weights(small_csr.rowptr, small_csr.col, small_csr.num_src)
    deg = small_csr.rowptr.diff()
    expected = torch.repeat_interleave(1.0 / deg.clamp(min=1).float(), deg)
    torch.testing.assert_close(w, expected, rtol=0, atol=0)
    assert edge_mean_weights(small_csr.rowptr, small_csr.col, small_csr.num_src) is w
