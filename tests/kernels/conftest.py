"""Kernel-test fixtures. Runs Triton kernels in the interpreter when no GPU is present.

``TRITON_INTERPRET`` is read by ``triton.jit`` when ``gnnsys.kernels.triton_aggregate`` is
imported, so it is set here, before any test module can import it (an explicit value, e.g. ``0``
in the GPU check, is left alone).
"""

from __future__ import annotations

import os

import pytest
import torch

if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"


from kernel_helpers import Csr, random_csr  # noqa: E402  (after TRITON_INTERPRET is set)


@pytest.fixture(scope="session")
def small_csr() -> Csr:
    """160 source rows, 120 destinations, a hub of degree 80 (> any block size), empty rows."""
    return random_csr(num_src=160, num_dst=120, max_deg=20, seed=0, hub_deg=80)
