"""``RunConfig``: the composition of the stage configs of one training run, nothing else.

Every field is the frozen ``Config`` of the component that uses it; derive variants with
``dataclasses.replace`` (``presets.py`` does) and never mutate one after it is shipped to Ray.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from gnnsys.sampler import NeighborSampler
from gnnsys.train.control.coordinator import Coordinator
from gnnsys.train.control.failure import FailurePolicy
from gnnsys.train.control.prepare import DataSpec
from gnnsys.train.control.run import ClusterSpec
from gnnsys.train.evaluate import EvalConfig
from gnnsys.train.models import ModelSpec
from gnnsys.train.remote.fetch_spec import FetchSpec
from gnnsys.train.trainer import Trainer

__all__ = ["RunConfig"]


@dataclass(frozen=True, kw_only=True, slots=True)
class RunConfig:
    """One training run: data, cluster, sampler, model, optimiser, loop, failures, fetch, eval."""

    data: DataSpec = field(default_factory=DataSpec)
    cluster: ClusterSpec = field(default_factory=ClusterSpec)
    sampler: NeighborSampler.Config = field(default_factory=NeighborSampler.Config)
    model: ModelSpec = field(default_factory=ModelSpec)
    trainer: Trainer.Config = field(default_factory=Trainer.Config)
    loop: Coordinator.Config = field(default_factory=Coordinator.Config)
    failure: FailurePolicy.Config = field(default_factory=FailurePolicy.Config)
    fetch: FetchSpec = field(default_factory=FetchSpec)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON-ready dict (for ``summary.json``)."""
        return asdict(self)
