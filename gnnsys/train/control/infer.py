"""Inference of a trained run: every node's predictions or embeddings, written by the ranks.

``infer`` is ``gnnsys predict`` and ``gnnsys embed`` without the CLI: given the run's config
(``RunConfig.from_run_dir``), it reads the run's newest intact checkpoint, checks that the
checkpoint, the config and the store are one run's (the identity fields a resume checks), starts
the run's worker group on the store (the same executors, the same resolved codec), loads the
weights and runs the sharded exact evaluation's layers; then every rank writes its owned nodes'
rows (``gnnsys.outputs``), so no process holds the whole graph's outputs. The driver writes the
manifest last.

The store may be another partition of the same graph (``store=``, e.g. 4 parts for a run trained
on 1): weights do not depend on the part count, and exact inference gives the same rows on any
partition (to float rounding; tested at 1 and 4 parts). A typed run's learnable embedding rows
(featureless node types) are held per rank in its checkpoint; on another partition they are
moved to the ranks that own them there (``reshard``; tested at 2 and 4 parts).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm import tqdm

from gnnsys.outputs import KINDS, OutputRequest, PartFile, publish, staging_dir
from gnnsys.train.control.checkpoint import (
    Checkpoint,
    identity_of,
    load_checkpoint,
    read_identity,
    store_identity,
)
from gnnsys.train.control.cluster import connect
from gnnsys.train.control.run import GroupPlan, resolve, worker_template

if TYPE_CHECKING:
    from gnnsys.config import RunConfig

__all__ = ["InferResult", "infer"]

log = logging.getLogger(__name__)

_MATCH = ("model.", "node_types", "link", "run.dataset", "store.dataset", "store.graph")
"""Identity fields a checkpoint and the store it is run on must share (any partition)."""
_SAME_PARTITION = ("store.partition", "store.content")
"""Further fields that must match when inference runs on the run's own store."""


@dataclass(frozen=True, slots=True)
class InferResult:
    """What ``infer`` wrote.

    Attributes:
        out: The outputs directory.
        manifest: Its ``manifest.json``.
        parts: Each rank's file, rows, seconds and peak RSS.
        seconds: Wall time from start to the published directory.
    """

    out: Path
    manifest: dict[str, Any]
    parts: list[PartFile]
    seconds: float


def infer(
    run_dir: str | os.PathLike[str],
    out: str | os.PathLike[str],
    config: RunConfig,
    *,
    kind: str,
    layer: int | None = None,
    store: str | os.PathLike[str] | None = None,
    node_types: tuple[str, ...] | None = None,
    nodes: np.ndarray | None = None,
    executor: str = "local",
    overwrite: bool = False,
) -> InferResult:
    """Write the run's predictions (``kind="predict"``) or embeddings (``"embed"``) to ``out``.

    Args:
        run_dir: The training run's directory.
        out: The outputs directory (``gnnsys.outputs``).
        config: The run's config (``RunConfig.from_run_dir(run_dir)``).
        kind: ``predict`` (logits -> ``pred``, ``probs``) or ``embed`` (layer ``layer``).
        layer: ``embed``: the layer whose outputs are written, 1 .. L; ``None``: the last
            hidden layer (``L - 1``), or ``L`` for a link run or a one-layer model.
        store: Run on this store (a partition of the same graph) instead of the run's own.
        node_types: Typed graphs: the types written (``predict``: the labelled type).
        nodes: Only these ids (of ``node_types[0]`` on a typed graph).
        executor: ``local`` (ranks as threads) or ``ray``.
        overwrite: Replace a non-empty ``out``.

    Raises:
        ValueError: Bad arguments, a run without config or checkpoint, or a store or
            checkpoint of another run (naming the fields that differ).
        CheckpointError: Every checkpoint of the run is corrupt.
        WorkerFailedError: A rank failed (the staging directory is removed).
    """
    start = time.perf_counter()
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r}; choose one of {KINDS}")
    config, ckpt, store_path = _inputs(Path(run_dir), config, store)
    steps = len(config.sampler.fanouts)
    layer = _layer(kind, layer, steps, config)
    staging = staging_dir(out, overwrite=overwrite)
    request = OutputRequest(kind, layer, str(staging), node_types, _sorted(nodes))
    try:
        parts = _run_group(config, ckpt, store_path, executor, request)
        manifest = {
            "kind": kind,
            "layer": layer,
            "num_layers": steps,
            "parts": len(parts),
            "node_types": list(node_types) if node_types else None,
            "typed": config.node_types is not None,
            "run": {"run_dir": str(Path(run_dir).resolve()), "epoch": ckpt.epoch},
            "store": str(store_path),
            "decoder": _decoder(config, ckpt, staging) if kind == "embed" else None,
        }
        published = publish(staging, Path(out), manifest, parts)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    from gnnsys.outputs import open as open_outputs

    final = open_outputs(published).manifest
    return InferResult(published, final, parts, time.perf_counter() - start)


def _inputs(
    run_dir: Path, config: RunConfig, store: str | os.PathLike[str] | None
) -> tuple[RunConfig, Checkpoint, Path]:
    """The run's config (on the chosen store), checkpoint and store, checked to be one run's."""
    from gnnsys.store import read_store_manifest

    if not run_dir.is_dir():
        raise ValueError(f"run directory {run_dir} does not exist")
    ckpt = load_checkpoint(run_dir)
    if ckpt is None:
        raise ValueError(f"{run_dir} has no checkpoint.pt; train (or resume) the run first")
    own = Path(config.data.store) if config.data.store else run_dir / "store"
    store_path = Path(store) if store is not None else own
    manifest = read_store_manifest(store_path)
    config = replace(
        config,
        data=replace(config.data, store=str(store_path)),
        cluster=replace(config.cluster, parts=manifest.num_parts),
        loop=replace(config.loop, resume=False, progress=False, tensorboard=None),
    )
    old = ckpt.identity or read_identity(run_dir)
    if old is None:
        raise ValueError(f"{run_dir} has neither a checkpoint identity nor run.json")
    new = identity_of(config.to_json(), store_identity(manifest))
    keys = _MATCH + (() if store is not None else _SAME_PARTITION)
    a, b = old.as_dict(), new.as_dict()
    differ = sorted(k for k in a.keys() & b.keys() if k.startswith(keys) and a[k] != b[k])
    if differ:
        shown = "; ".join(f"{k}: run {a[k]} vs {b[k]}" for k in differ)
        raise ValueError(
            f"the checkpoint of {run_dir} and the store {store_path} are not one run's ({shown}); "
            "pass the store the run trained on (or another partition of the same graph)"
        )
    return config, ckpt, store_path


def _decoder(config: RunConfig, ckpt: Checkpoint, staging: Path) -> dict[str, str] | None:
    """A link run's decoder, written beside its embeddings (``Outputs.score`` reads it)."""
    import io

    import torch
    import xxhash

    from gnnsys.store.diskio import atomic_write

    if config.link is None:
        return None
    state = {
        k.removeprefix("decoder."): v
        for k, v in ckpt.model_state.items()
        if k.startswith("decoder.")
    }
    buffer = io.BytesIO()
    torch.save(state, buffer)
    atomic_write(staging / "decoder.pt", buffer.getvalue())
    digest = xxhash.xxh3_128(buffer.getvalue()).hexdigest()
    return {"name": config.link.decoder, "file": "decoder.pt", "xxh3_128": digest}


def _layer(kind: str, layer: int | None, steps: int, config: RunConfig) -> int:
    """The table written (module docstring of ``gnnsys.outputs``)."""
    if kind == "predict":
        if layer not in (None, steps):
            raise ValueError(f"predict writes the last layer's logits; drop layer={layer}")
        if config.link is not None:
            raise ValueError("predict needs a node-classification run; use embed for link runs")
        return steps
    if layer is None:
        return steps if config.link is not None or steps == 1 else steps - 1
    if not 1 <= layer <= steps:
        raise ValueError(f"layer={layer}; the model has {steps} layers: choose 1 .. {steps}")
    return layer


def _sorted(nodes: np.ndarray | None) -> np.ndarray | None:
    if nodes is None:
        return None
    ids = np.unique(np.asarray(nodes, dtype=np.int64))
    if ids.size and int(ids[0]) < 0:
        raise ValueError(f"nodes has negative id {int(ids[0])}; ids are >= 0")
    return ids


def _per_rank_state(ckpt: Checkpoint, store: Path, parts: int) -> list[dict[str, Any]]:
    """One per-rank state per rank of ``store``'s partition (the RNG is unused by inference).

    A typed run's learnable embedding rows live in its ranks' states: on another partition
    they are moved to the ranks that own them there (``gnnsys.train.embedding.reshard``).
    """
    states = ckpt.rng_by_rank
    if not any("owned" in s for s in states):
        return [states[r % len(states)] for r in range(parts)]
    from gnnsys.store import read_shard
    from gnnsys.train.embedding import reshard

    types = list(states[0]["owned"]["shards"])
    owned = []
    for part in range(parts):  # each rank's ids of every featureless type, read once
        nodes = read_shard(store, part, verify=False).nodes
        owned.append({t: np.asarray(nodes[t].owned_lid, dtype=np.int64) for t in types})
    same = len(states) == parts and all(
        np.array_equal(ids[t], state["owned"]["shards"][t]["owned_lid"].numpy())
        for ids, state in zip(owned, states, strict=True)
        for t in types
    )
    return states if same else reshard(states, owned)


def _run_group(
    config: RunConfig, ckpt: Checkpoint, store: Path, executor: str, request: OutputRequest
) -> list[PartFile]:
    """Start the run's group on ``store``, load the weights, run the layers, write the parts."""
    started = connect(config.cluster) if executor == "ray" else False
    try:
        config, info, topology = resolve(config, store, executor)
        group = GroupPlan(executor, worker_template(config, store, info, topology))
        workers = group.make(config, 0)
        ckpt = replace(ckpt, rng_by_rank=_per_rank_state(ckpt, store, config.cluster.parts))
        try:
            workers.start()
            workers.load(ckpt)
            with tqdm(total=request.layer + 1, desc=request.kind, unit="step") as bar:
                return workers.infer(request, lambda done: bar.update(done - bar.n))
        finally:
            workers.stop()
    finally:
        if started:
            import ray

            ray.shutdown()
