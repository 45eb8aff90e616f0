"""Shared fixtures: small synthetic graphs and one Ray instance per test session.

Without a GPU, Triton kernels run in its interpreter (``TRITON_INTERPRET=1``). Triton reads the
variable when it is first imported, and some test modules import it indirectly (PyG does when
Triton is installed) before the kernel tests are collected, so it is set here, first; an
explicit value (e.g. ``0`` in the GPU check) is left alone.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import torch

if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

from gnnsys.datasets.synthetic import sbm  # noqa: E402  (after TRITON_INTERPRET is set)
from gnnsys.types import Graph  # noqa: E402

DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]
"""Devices the device-parametrised tests run on (PyG's ``withCUDA``): CPU everywhere, CUDA
where torch sees a GPU (the GPU check runs them there)."""


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> torch.device:
    """The step's device of a device-parametrised test."""
    return torch.device(str(request.param))


@pytest.fixture(scope="session")
def tiny_graph() -> Graph:
    """A 1000-node SBM graph with 16 features and 4 classes."""
    return sbm(num_nodes=1000, num_classes=4, avg_degree=8, num_features=16, seed=0)


@pytest.fixture(scope="session")
def ray_session() -> Iterator[Any]:
    """One local Ray instance for the whole test session (loopback, no dashboard).

    Logical CPUs exceed the 2 physical cores so 4 workers plus owners can be scheduled.
    """
    ray = pytest.importorskip("ray")
    ray.init(
        address="local",  # never join another user's running cluster on this machine
        num_cpus=16,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        log_to_driver=False,
        object_store_memory=512 * 1024 * 1024,
    )
    yield ray
    ray.shutdown()
