"""The small ``synthetic:sbm`` runs the training tests build (one builder, many tests)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from gnnsys.config import RunConfig
from gnnsys.sampler import NeighborSampler
from gnnsys.store.source import DataConfig


def sbm_run(
    *,
    num_nodes: int,
    num_features: int,
    parts: int,
    fanouts: tuple[int, ...],
    hidden: int,
    batch_size: int,
    epochs: int,
    deadline_s: float = 60.0,
    topology: str = "partitioned",
    model: str | None = None,
    dropout: float | None = None,
    trainer: dict[str, Any] | None = None,
    loop: dict[str, Any] | None = None,
    **stages: Any,
) -> RunConfig:
    """A ``RunConfig`` on a seeded ``synthetic:sbm`` graph, randomly partitioned.

    ``trainer``/``loop`` override fields of those configs; ``stages`` replaces whole stage
    configs (``codec=``, ``cache=``, ``layer0=``, ...).
    """
    cfg = RunConfig()
    model_cfg = replace(cfg.model, hidden=hidden)
    if model is not None:
        model_cfg = replace(model_cfg, name=model)
    if dropout is not None:
        model_cfg = replace(model_cfg, dropout=dropout)
    return replace(
        cfg,
        data=DataConfig(
            dataset="synthetic:sbm",
            partitioner="random",
            dataset_params=(("num_nodes", num_nodes), ("num_features", num_features)),
        ),
        cluster=replace(cfg.cluster, parts=parts, topology=topology),
        sampler=NeighborSampler.Config(fanouts=fanouts),
        model=model_cfg,
        trainer=replace(cfg.trainer, batch_size=batch_size, lr=0.01, **(trainer or {})),
        loop=replace(
            cfg.loop, epochs=epochs, progress=False, deadline_s=deadline_s, **(loop or {})
        ),
        **stages,
    )


def host_and_device_rows(cfg: RunConfig, tmp_path: Path) -> dict[str, tuple[list[Any], Any]]:
    """``cfg`` trained with its rows on the host and on the device (``--features-on``).

    A degree cache at ratio 0.5 either way. Returns placement -> (metrics lines, model state).
    """
    from gnnsys.cache import CacheConfig
    from gnnsys.train.control.checkpoint import load_checkpoint
    from gnnsys.train.control.run import train_local

    runs = {}
    for placement in ("host", "device"):
        cache = CacheConfig(policy="degree", ratio=0.5, placement=placement)
        result = train_local(replace(cfg, cache=cache), tmp_path / placement)
        ckpt = load_checkpoint(tmp_path / placement)
        assert ckpt is not None
        runs[placement] = (result.history, ckpt.model_state)
    return runs
