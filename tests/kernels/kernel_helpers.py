"""Helpers shared by the kernel tests: random CSRs, quantization, tolerance checks."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Csr:
    """A random CSR: ``num_dst`` rows over ``num_src`` source rows."""

    rowptr: torch.Tensor
    col: torch.Tensor
    num_src: int

    @property
    def num_dst(self) -> int:
        return int(self.rowptr.shape[0]) - 1


def random_csr(num_src: int, num_dst: int, max_deg: int, seed: int, hub_deg: int = 0) -> Csr:
    """Degrees in ``[0, max_deg]``, row 0 of degree ``hub_deg`` if set, rows 1 and 2 empty."""
    gen = torch.Generator().manual_seed(seed)
    deg = torch.randint(0, max_deg + 1, (num_dst,), generator=gen)
    if hub_deg:
        deg[0] = hub_deg
    deg[1:3] = 0
    rowptr = torch.zeros(num_dst + 1, dtype=torch.long)
    rowptr[1:] = deg.cumsum(0)
    col = torch.randint(0, num_src, (int(rowptr[-1]),), generator=gen)
    return Csr(rowptr, col, num_src)


def quantize(x_NF: torch.Tensor, bits: int) -> dict[str, object]:
    """Per-row affine quantization in the agreed layout: kwargs for ``aggregate``."""
    levels = (1 << bits) - 1
    lo, hi = x_NF.min(1).values, x_NF.max(1).values
    scale = ((hi - lo) / levels).clamp(min=1e-3).half()
    qmin = -128 if bits == 8 else 0
    zero = (qmin - lo / scale.float()).half()
    q = torch.round(x_NF / scale.float()[:, None] + zero.float()[:, None]).clamp(
        qmin, qmin + levels
    )
    if bits == 8:
        return {"x": q.to(torch.int8), "scale": scale, "zero": zero}
    q_u8 = q.to(torch.uint8)
    if q_u8.shape[1] % 2:
        q_u8 = torch.cat([q_u8, torch.zeros(q_u8.shape[0], 1, dtype=torch.uint8)], 1)
    packed = q_u8[:, 0::2] | (q_u8[:, 1::2] << 4)
    return {"x": packed, "scale": scale, "zero": zero, "num_features": int(x_NF.shape[1])}


def inputs_for(dtype: str, x_NF: torch.Tensor) -> dict[str, object]:
    """``aggregate`` kwargs holding ``x_NF`` as ``dtype`` (fp32, fp16, bf16, int8 or int4)."""
    if dtype in ("int8", "int4"):
        return quantize(x_NF, 8 if dtype == "int8" else 4)
    return {
        "x": x_NF.to(
            getattr(torch, {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}[dtype])
        )
    }


def assert_matches(out: torch.Tensor, ref: torch.Tensor, rel: float, what: str = "") -> None:
    """``max |out - ref| <= rel * max(1, max |ref|)``; the message gives max and mean diff."""
    assert out.shape == ref.shape and out.dtype == ref.dtype, (out.shape, out.dtype, ref.dtype)
    diff = (out.double() - ref.double()).abs()
    bound = rel * max(1.0, float(ref.double().abs().max()) if ref.numel() else 1.0)
    max_d = float(diff.max()) if diff.numel() else 0.0
    mean_d = float(diff.mean()) if diff.numel() else 0.0
    assert max_d <= bound, f"{what}: max diff {max_d:.3g} > {bound:.3g} (mean diff {mean_d:.3g})"


REL_TOL: dict[str, float] = {"fp32": 1e-5, "fp16": 2e-3, "bf16": 1.6e-2, "int8": 1e-5, "int4": 1e-5}
"""Relative tolerance against the reference: a couple of ulps of the output dtype."""


def compare_to_reference(
    backend: str, csr: Csr, dtype: str, reduce: str, num_features: int, *, seed: int = 0
) -> None:
    """``aggregate`` on ``backend`` equals the reference for one (dtype, reduce, F) case."""
    from gnnsys.kernels import aggregate, use_backend

    gen = torch.Generator().manual_seed(seed)
    kw = inputs_for(dtype, torch.randn(csr.num_src, num_features, generator=gen))
    kw = {k: v.to(csr.rowptr.device) if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
    x = kw.pop("x")
    with use_backend("reference"):
        ref = aggregate(x, csr.rowptr, csr.col, reduce, **kw)
    with use_backend(backend):
        out = aggregate(x, csr.rowptr, csr.col, reduce, **kw)
    assert_matches(out, ref, REL_TOL[dtype], f"{backend} {dtype} {reduce} F={num_features}")


def compare_grads(backend: str, csr: Csr, reduce: str, num_features: int = 24) -> None:
    """Gradient of ``aggregate`` on ``backend`` w.r.t. fp32 ``x`` equals the reference's."""
    from gnnsys.kernels import aggregate, use_backend

    gen = torch.Generator().manual_seed(1)
    x = torch.randn(csr.num_src, num_features, generator=gen).to(csr.rowptr.device)
    grad = torch.randn(csr.num_dst, num_features, generator=gen).to(csr.rowptr.device)
    grads = []
    for name in ("reference", backend):
        xg = x.clone().requires_grad_(True)
        with use_backend(name):
            aggregate(xg, csr.rowptr, csr.col, reduce).backward(grad)
        assert xg.grad is not None
        grads.append(xg.grad)
    assert_matches(grads[1], grads[0], 1e-5, f"{backend} grad {reduce}")
