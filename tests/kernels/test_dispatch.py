"""Backend choice: default per device, use_backend override, GNNSYS_KERNEL, lazy imports."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from gnnsys.kernels import aggregate, backend_for, use_backend


def run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if k not in ("GNNSYS_KERNEL",)}
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "-c", code], env=full_env, capture_output=True, text=True, timeout=120
    )


def test_default_and_nested_override() -> None:
    x = torch.zeros(2, 2)
    if "GNNSYS_KERNEL" not in os.environ:
        assert backend_for(x) == "torch"
    with use_backend("reference"):
        assert backend_for(x) == "reference"
        with use_backend("torch"):
            assert backend_for(x) == "torch"
        assert backend_for(x) == "reference"
    with pytest.raises(ValueError, match="choose one of"):
        with use_backend("cuda"):
            pass


def test_import_is_lazy() -> None:
    code = (
        "import sys, gnnsys.kernels, gnnsys.models; "
        "assert 'triton' not in sys.modules, 'triton imported'; "
        "assert 'torch_geometric' not in sys.modules, 'torch_geometric imported'"
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr


def test_env_override_and_bad_value() -> None:
    code = (
        "import torch; from gnnsys.kernels import backend_for, aggregate; "
        "print(backend_for(torch.zeros(1, 1))); "
        "aggregate(torch.ones(2, 1), torch.tensor([0, 2]), torch.tensor([0, 1]))"
    )
    ok = run_python(code, GNNSYS_KERNEL="reference")
    assert ok.returncode == 0 and ok.stdout.strip() == "reference", ok.stderr
    bad = run_python(code, GNNSYS_KERNEL="fast")
    assert bad.returncode != 0 and "GNNSYS_KERNEL='fast'" in bad.stderr


def test_pyg_aggregation_with_ptr() -> None:
    from gnnsys.kernels import FusedMeanAggregation

    msgs = torch.arange(10.0).view(5, 2)
    ptr = torch.tensor([0, 2, 2, 5])
    out = FusedMeanAggregation()(msgs, ptr=ptr, dim_size=3)
    expected = torch.stack([msgs[:2].mean(0), torch.zeros(2), msgs[2:].mean(0)])
    torch.testing.assert_close(out, expected)
    with use_backend("reference"):
        torch.testing.assert_close(aggregate(msgs, ptr, torch.arange(5)), expected)
