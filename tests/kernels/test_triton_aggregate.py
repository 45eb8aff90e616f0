"""The Triton kernel against the reference: interpreter on CPU (CI), compiled on a GPU.

Sizes follow the interpreter's cost (~10 ms per program): ~120 destination rows per launch, and
F = 1433 only on a dozen rows.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from kernel_helpers import Csr, compare_grads, compare_to_reference, random_csr

from gnnsys.kernels import HAS_TRITON, aggregate, use_backend

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
pytestmark = pytest.mark.skipif(
    not HAS_TRITON or not (INTERPRET or torch.cuda.is_available()),
    reason="needs triton plus TRITON_INTERPRET=1 or a CUDA device",
)
DEVICE = "cpu" if INTERPRET else "cuda"


def on_device(csr: Csr) -> Csr:
    return Csr(csr.rowptr.to(DEVICE), csr.col.to(DEVICE), csr.num_src)


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16", "int8", "int4"])
@pytest.mark.parametrize("reduce", ["sum", "mean", "max"])
def test_matches_reference(small_csr: Csr, dtype: str, reduce: str) -> None:
    compare_to_reference("triton", on_device(small_csr), dtype, reduce, num_features=37)


@pytest.mark.parametrize(("num_features", "dtype"), [(100, "fp32"), (1433, "int8"), (1433, "fp16")])
def test_feature_dims_not_power_of_two(num_features: int, dtype: str) -> None:
    csr = random_csr(num_src=40, num_dst=8, max_deg=5, seed=3, hub_deg=45)
    compare_to_reference("triton", on_device(csr), dtype, "mean", num_features)


@pytest.mark.parametrize("reduce", ["sum", "mean", "max"])
def test_gradients_match_reference(small_csr: Csr, reduce: str) -> None:
    compare_grads("triton", on_device(small_csr), reduce)


def test_gradients_equal_torch_path(small_csr: Csr) -> None:
    x = torch.randn(small_csr.num_src, 16)
    csr = on_device(small_csr)
    grads = []
    for backend in ("torch", "triton"):
        xg = x.to(DEVICE).requires_grad_(True)
        with use_backend(backend):
            aggregate(xg, csr.rowptr, csr.col, "mean").sum().backward()
        assert xg.grad is not None
        grads.append(xg.grad)
    torch.testing.assert_close(grads[1], grads[0])


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_index_dtypes_and_noncontiguous(index_dtype: torch.dtype) -> None:
    csr = on_device(random_csr(num_src=60, num_dst=40, max_deg=10, seed=5, hub_deg=70))
    x = torch.randn(csr.num_src, 48, device=DEVICE)[:, ::3]  # non-contiguous, F = 16
    col = torch.stack([csr.col, csr.col], 1)[:, 1].to(index_dtype)
    with use_backend("reference"):
        ref = aggregate(x.contiguous(), csr.rowptr, csr.col, "sum")
    with use_backend("triton"):
        out = aggregate(x, csr.rowptr.to(index_dtype), col, "sum")
    torch.testing.assert_close(out, ref)


def test_deterministic(small_csr: Csr) -> None:
    csr = on_device(small_csr)
    x = torch.randn(csr.num_src, 8, device=DEVICE)
    with use_backend("triton"):
        first = aggregate(x, csr.rowptr, csr.col, "sum")
        assert torch.equal(first, aggregate(x, csr.rowptr, csr.col, "sum"))


@pytest.mark.skipif(not INTERPRET, reason="bounds check runs only for CPU tensors")
def test_out_of_range_col_raises_instead_of_segfault() -> None:
    with use_backend("triton"), pytest.raises(ValueError, match="col has ids"):
        aggregate(torch.randn(3, 2), torch.tensor([0, 2]), torch.tensor([0, 99]), "sum")


@pytest.mark.skipif(not INTERPRET, reason="interpreter run")
def test_env_switch_runs_triton_in_subprocess() -> None:
    code = (
        "import torch; from gnnsys.kernels import aggregate, backend_for; "
        "x = torch.randn(5, 3); "
        "out = aggregate(x, torch.tensor([0, 2, 3]), torch.tensor([1, 4, 0])); "
        "assert backend_for(x) == 'triton', backend_for(x); "
        "assert 'gnnsys.kernels.triton_aggregate' in __import__('sys').modules; "
        "torch.testing.assert_close(out, torch.stack([(x[1] + x[4]) / 2, x[0]]))"
    )
    env = {**os.environ, "GNNSYS_KERNEL": "triton", "TRITON_INTERPRET": "1"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)
