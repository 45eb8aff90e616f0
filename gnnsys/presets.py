"""Named run configurations, as functions (``gnnsys train --preset NAME``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from gnnsys.config import RunConfig
from gnnsys.store.source import DataConfig

__all__ = ["PRESETS", "default", "facebook_4parts", "cora_4parts"]


def default() -> RunConfig:
    """The embedded main job: synthetic:sbm (100k nodes), 2 METIS parts, GraphSAGE, 3 epochs."""
    return RunConfig()


def cora_4parts() -> RunConfig:
    """Cora split into 4 METIS parts (accuracy-parity runs)."""
    base = RunConfig()
    return replace(
        base,
        data=DataConfig(dataset="planetoid:cora", partitioner="metis"),
        cluster=replace(base.cluster, parts=4),
        loop=replace(base.loop, epochs=20),
        trainer=replace(base.trainer, batch_size=64, lr=0.01),
    )


def facebook_4parts() -> RunConfig:
    """Facebook page-page split into 4 METIS parts (accuracy-parity runs)."""
    base = RunConfig()
    return replace(
        base,
        data=DataConfig(dataset="musae:facebook", partitioner="metis"),
        cluster=replace(base.cluster, parts=4),
        loop=replace(base.loop, epochs=10),
    )


PRESETS: dict[str, Callable[[], RunConfig]] = {
    "default": default,
    "cora_4parts": cora_4parts,
    "facebook_4parts": facebook_4parts,
}
"""Preset name -> function returning its ``RunConfig``."""
