"""``RunConfig``: the composition of the stage configs of one training run, nothing else.

Every field is the frozen ``Config`` of the component that uses it, defined next to it (data:
``gnnsys.store.source``; sampler; codec and cache: ``gnnsys.cache``; model: ``gnnsys.models``;
layer 0: ``gnnsys.train.layer0.base``; cluster, trainer, loop and failures: ``gnnsys.train``).
Each validates its own values when constructed, so a bad flag fails here, before anything
starts. Derive variants with ``dataclasses.replace`` (``presets.py`` does) and never mutate one
after it is shipped to Ray.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import sys
import types
import typing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gnnsys.cache import CacheConfig, CodecConfig
from gnnsys.models import ModelConfig
from gnnsys.sampler import NeighborSampler
from gnnsys.store.source import DataConfig
from gnnsys.train.control.cluster_config import ClusterConfig
from gnnsys.train.control.coordinator import Coordinator
from gnnsys.train.control.failure import FailurePolicy
from gnnsys.train.eval.evaluate import EvalConfig
from gnnsys.train.layer0.base import FirstLayerConfig
from gnnsys.train.link.config import LinkConfig
from gnnsys.train.node_types import NodeTypesConfig
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
    node_types: NodeTypesConfig | None = None
    """A heterogeneous dataset or store (``gnnsys train synthetic:mag``): typed owners and
    trainers, per-relation fanouts, per-type codecs, learnable embeddings; ``None`` for
    homogeneous graphs."""

    def to_json(self) -> dict[str, Any]:
        """Plain JSON-ready dict (for ``summary.json``; enums are ``str`` subclasses)."""
        return asdict(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> RunConfig:
        """Inverse of :meth:`to_json` after a JSON round trip (``summary.json``'s ``config``).

        Every stage config validates its values again; a field missing from ``obj`` (a run
        written before the field existed) takes its default.

        Raises:
            ValueError: A value its config refuses, or a shape that fits no field.
        """
        from gnnsys.run_file import renamed_keys

        out: RunConfig = _decode(cls, renamed_keys(obj))
        return out

    def to_toml(self, header: str = "") -> str:
        """The settings as a TOML document, every set key (``RUN_DIR/config.toml``).

        ``RunConfig.from_toml`` of the text gives this config back; ``gnnsys train --config``
        reads it (see ``gnnsys.run_file``).
        """
        from gnnsys import run_file

        return run_file.dump(self, header)

    @classmethod
    def from_toml(cls, path: str | os.PathLike[str], base: RunConfig | None = None) -> RunConfig:
        """``base`` (default: ``RunConfig()``) with the tables and keys of the TOML file applied.

        Raises:
            ValueError: The file is unreadable or not TOML, or has an unknown table or key, a
                value of the wrong type or one its stage's config refuses; each names the
                file, the key's path (``[trainer] batch_size``) and what it takes.
        """
        from gnnsys import run_file

        table = run_file.read(path)
        out: RunConfig = run_file.apply_table(base or cls(), table, (), str(path))
        return out

    @classmethod
    def from_run_dir(cls, run_dir: str | os.PathLike[str]) -> RunConfig:
        """The config a run trained with: ``summary.json``'s (resolved), else ``run.json``'s.

        Raises:
            ValueError: Neither file has one (not a run directory, or a run that never got
                past its pre-flight).
        """
        for name in ("summary.json", "run.json"):
            try:
                obj = json.loads((Path(run_dir) / name).read_text()).get("config")
            except (OSError, ValueError):
                continue
            if obj is not None:
                return cls.from_json(obj)
        raise ValueError(
            f"{run_dir} has no summary.json or run.json with a config; pass a gnnsys train run "
            "directory"
        )


def _decode(kind: Any, value: Any) -> Any:
    """``value`` (JSON) as type ``kind``: dataclasses, optionals, tuples, dicts and enums."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if dataclasses.is_dataclass(kind) and isinstance(kind, type):
        if not isinstance(value, dict):
            raise ValueError(f"{kind.__name__}: expected an object, got {value!r}")
        module = vars(sys.modules[kind.__module__])
        hints = typing.get_type_hints(kind, globalns=module, localns=dict(vars(kind)))
        fields = {f.name for f in dataclasses.fields(kind) if f.init}
        return kind(**{k: _decode(hints[k], v) for k, v in value.items() if k in fields})
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        return _decode(next(a for a in args if a is not type(None)), value)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_decode(args[0], v) for v in value)
        return tuple(_decode(a, v) for a, v in zip(args, value, strict=True))
    if origin is dict:
        return {_decode(args[0], k): _decode(args[1], v) for k, v in value.items()}
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return kind(value)
    if kind is float and isinstance(value, int):
        return float(value)
    return value
