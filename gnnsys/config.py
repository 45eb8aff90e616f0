"""``RunConfig``: the composition of the stage configs of one training run, nothing else.

Every field is the frozen ``Config`` of the component that uses it, defined next to it (data:
``gnnsys.store.source``; sampler; codec and cache: ``gnnsys.cache``; model: ``gnnsys.models``;
layer 0: ``gnnsys.train.layer0.base``; cluster, trainer, loop and failures: ``gnnsys.train``).
Each validates its own values when constructed, so a bad flag fails here, before anything
starts. Derive variants with ``dataclasses.replace`` (``presets.py`` does) and never mutate one
after it is shipped to Ray.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from gnnsys.cache import CacheConfig, CodecConfig
from gnnsys.models import ModelConfig
from gnnsys.sampler import NeighborSampler
from gnnsys.store.source import DataConfig
from gnnsys.train.control.cluster_config import ClusterConfig
from gnnsys.train.control.coordinator import Coordinator
from gnnsys.train.control.failure import FailurePolicy
from gnnsys.train.evaluate import EvalConfig
from gnnsys.train.hetero.config import HeteroConfig
from gnnsys.train.layer0.base import FirstLayerConfig
from gnnsys.train.link.config import LinkConfig
from gnnsys.train.trainer import Trainer

__all__ = ["RunConfig"]


@dataclass(frozen=True, kw_only=True, slots=True)
class RunConfig:
    """One run: data, cluster, sampler, model, optimiser, loop, failures, features, task."""

    data: DataConfig = field(default_factory=DataConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    sampler: NeighborSampler.Config = field(default_factory=NeighborSampler.Config)
    model: ModelConfig = field(default_factory=ModelConfig)
    trainer: Trainer.Config = field(default_factory=Trainer.Config)
    loop: Coordinator.Config = field(default_factory=Coordinator.Config)
    failure: FailurePolicy.Config = field(default_factory=FailurePolicy.Config)
    codec: CodecConfig = field(default_factory=CodecConfig)
    """How remote feature rows are encoded (``--codec``, ``--wire``)."""
    cache: CacheConfig = field(default_factory=CacheConfig)
    """Each worker's halo cache (``--cache-*``)."""
    layer0: FirstLayerConfig = field(default_factory=FirstLayerConfig)
    """Where layer 0 aggregates (``--aggregate-at``, ``--decode-halo``)."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    link: LinkConfig | None = None
    """The link-prediction task (``--task link``; its split is ``data.link_split``); ``None``
    trains node classification."""
    hetero: HeteroConfig | None = None
    """A heterogeneous dataset or store (``gnnsys train synthetic:mag``): typed owners and
    trainers, per-relation fanouts, per-type codecs, learnable embeddings; ``None`` for
    homogeneous graphs."""

    def to_json(self) -> dict[str, Any]:
        """Plain JSON-ready dict (for ``summary.json``; enums are ``str`` subclasses)."""
        return asdict(self)
