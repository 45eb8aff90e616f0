"""The reference backend is the spec: hand-computed values, gradcheck, input validation."""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import quantize, random_csr

from gnnsys.kernels import aggregate, use_backend
from gnnsys.kernels.csr import check_inputs, dequantize, transpose_csr
from gnnsys.kernels.reference import aggregate_reference

X = torch.tensor([[1.0, -2.0], [3.0, 5.0], [-4.0, 0.5]])
ROWPTR = torch.tensor([0, 2, 2, 5])  # row 0: {0, 1}; row 1: empty; row 2: {2, 2, 0}
COL = torch.tensor([0, 1, 2, 2, 0])


@pytest.mark.parametrize(
    ("reduce", "expected"),
    [
        ("sum", [[4.0, 3.0], [0.0, 0.0], [-7.0, -1.0]]),
        ("mean", [[2.0, 1.5], [0.0, 0.0], [-7 / 3, -1 / 3]]),
        ("max", [[3.0, 5.0], [0.0, 0.0], [1.0, 0.5]]),
    ],
)
def test_reference_by_hand(reduce: str, expected: list[list[float]]) -> None:
    with use_backend("reference"):
        out = aggregate(X, ROWPTR, COL, reduce)
    torch.testing.assert_close(out, torch.tensor(expected))


def test_dequant_matches_layout() -> None:
    x = torch.randn(6, 5)
    for bits in (8, 4):
        kw = quantize(x, bits)
        inputs = check_inputs(
            kw["x"], ROWPTR, COL, "sum", kw["scale"], kw["zero"], kw.get("num_features")
        )
        q = (
            kw["x"]
            if bits == 8
            else torch.stack([kw["x"] & 15, kw["x"] >> 4], 2).reshape(6, -1)[:, :5]
        )
        manual = (q.float() - kw["zero"].float()[:, None]) * kw["scale"].float()[:, None]
        torch.testing.assert_close(dequantize(inputs), manual)
        step = float(kw["scale"].float().max())
        assert (dequantize(inputs) - x).abs().max() <= step  # quantization error within a step


@pytest.mark.parametrize("reduce", ["sum", "mean", "max"])
def test_reference_gradcheck_float64(reduce: str) -> None:
    csr = random_csr(num_src=30, num_dst=20, max_deg=6, seed=2, hub_deg=12)
    x = torch.randn(csr.num_src, 2, dtype=torch.float64, requires_grad=True)

    def fn(t: torch.Tensor) -> torch.Tensor:
        return aggregate_reference(check_inputs(t, csr.rowptr, csr.col, reduce, None, None, None))

    assert torch.autograd.gradcheck(fn, (x,))


def test_transpose_csr_and_cache() -> None:
    rowptr_t, col_t = transpose_csr(ROWPTR, COL, 3)
    assert rowptr_t.tolist() == [0, 2, 3, 5] and col_t.tolist() == [0, 2, 0, 2, 2]
    again = transpose_csr(ROWPTR, COL, 3)
    assert again[0] is rowptr_t  # cached per tensor object
    col2 = COL.clone()
    assert transpose_csr(ROWPTR, col2, 3)[0] is not rowptr_t


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"reduce": "min"}, ValueError, "reduce='min'"),
        ({"x": torch.zeros(3, 2, dtype=torch.int32)}, TypeError, "int32"),
        ({"x": torch.zeros(3, 2, dtype=torch.int8)}, ValueError, "scale and zero"),
        ({"scale": torch.ones(3)}, ValueError, "scale/zero given"),
        ({"col": COL.float()}, TypeError, "int32 or int64"),
        ({"x": torch.zeros(3)}, ValueError, "expected \\[N, F\\]"),
        (
            {
                "x": torch.zeros(3, 2, dtype=torch.uint8),
                "scale": torch.ones(3),
                "zero": torch.ones(3),
            },
            ValueError,
            "num_features",
        ),
    ],
)
def test_bad_inputs_raise(kwargs: dict[str, object], error: type[Exception], match: str) -> None:
    args: dict[str, object] = {"x": X, "rowptr": ROWPTR, "col": COL, "reduce": "sum"}
    args.update(kwargs)
    with pytest.raises(error, match=match):
        aggregate(**args)
