"""Heterogeneous training: accuracy at 1 vs P parts, bytes per epoch by node type, time, memory.

Two kinds of measurement on heterogeneous stores written beforehand by ``gnnsys partition``
(e.g. ``synthetic:mag -D scale=0.52 -D reverse=true``, 1,008,666 nodes):

- ``--mode train``: ``gnnsys train``'s code path (``gnnsys.train.control.run.train`` on Ray, or
  ``train_local`` with ``--executor local``) for ``--epochs`` epochs with exact sharded
  evaluation after each (``gnnsys.train.eval.sharded``); prints one ``hetero_epoch`` line per
  epoch (loss, accuracies, epoch and evaluation seconds, training bytes by node type and
  category, peak RSS per worker) and a ``hetero_train`` summary (test accuracy at the best
  validation epoch);
- ``--mode bytes``: a traffic replay of epoch 0 (``train_local(traffic_only=True)``: the same
  sampling and fetching as training, no model), so bytes per epoch by node type can be compared
  across codecs and caches cheaply; prints one ``hetero_bytes`` line.

Use a per-rank batch of ``B / P`` at ``P`` parts to keep the global batch (and the number of
steps per epoch) of the 1-part run.

    python benchmarks/train_types.py --store DIR --parts 4 --batch-size 256 --epochs 3
    python benchmarks/train_types.py --store DIR --parts 4 --mode bytes --codec paper=int8 \\
        --cache-ratio 0.5
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from gnnsys.cache import CacheConfig
from gnnsys.config import RunConfig
from gnnsys.models import ModelConfig
from gnnsys.sampler import NeighborSampler
from gnnsys.store import read_store_manifest
from gnnsys.store.source import DataConfig
from gnnsys.train.control.coordinator import Coordinator
from gnnsys.train.node_types import NodeTypesConfig
from gnnsys.train.trainer import Trainer


def _config(args: argparse.Namespace) -> RunConfig:
    base = RunConfig()
    cache = CacheConfig()
    if args.cache_ratio:
        cache = CacheConfig(policy="degree", ratio=args.cache_ratio)
    return replace(
        base,
        data=DataConfig(dataset="synthetic:mag", store=args.store),
        cluster=replace(base.cluster, parts=args.parts),
        sampler=NeighborSampler.Config(fanouts=tuple(int(f) for f in args.fanouts.split(","))),
        model=ModelConfig(hidden=args.hidden, dropout=args.dropout),
        trainer=Trainer.Config(lr=args.lr, batch_size=args.batch_size, seed=args.seed),
        loop=Coordinator.Config(epochs=args.epochs, progress=False, deadline_s=args.deadline),
        codec=replace(base.codec, name=args.codec),
        cache=cache,
        node_types=NodeTypesConfig(model=args.model),
        eval=replace(base.eval, test_at_end=False),
    )


def _common(args: argparse.Namespace) -> dict[str, Any]:
    manifest = read_store_manifest(args.store)
    return {
        "dataset": manifest.dataset,
        "num_nodes": manifest.num_nodes,
        "num_edges": manifest.num_edges,
        "strategy": manifest.strategy,
        "parts": args.parts,
        "model": args.model,
        "fanouts": args.fanouts,
        "batch_size_per_rank": args.batch_size,
        "hidden": args.hidden,
        "lr": args.lr,
        "codec": args.codec,
        "cache_ratio": args.cache_ratio,
        "seed": args.seed,
    }


def _mib(values: dict[str, int]) -> float:
    return round(sum(values.values()) / 2**20, 3)


def run_train(args: argparse.Namespace) -> None:
    """Train and print ``hetero_epoch`` lines and a ``hetero_train`` summary."""
    from gnnsys.train.control.run import train, train_local

    cfg = _config(args)
    out = Path(args.out or tempfile.mkdtemp(prefix="hetero-train-"))
    start = time.perf_counter()
    result = (train if args.executor == "ray" else train_local)(cfg, out)
    common = _common(args) | {"executor": args.executor}
    for m in result.history:
        by_type = m.get("bytes_by_type", {})
        line = {
            "bench": "hetero_epoch",
            **common,
            "epoch": m["epoch"],
            "loss": round(m["loss"], 5),
            **{k: m.get(k) for k in ("train_acc", "val_acc", "test_acc")},
            "epoch_seconds": round(m["seconds"]["total"], 2),
            "eval_seconds": round(m["seconds"]["eval"], 2),
            "seconds_split": {k: round(v, 2) for k, v in m["seconds"].items()},
            "bytes_by_type": by_type,
            "mib_by_type": {t: _mib(v) for t, v in by_type.items()},
            "total_mib": _mib(m["bytes"]),
            "allreduce_mib": round(m["bytes"]["allreduce"] / 2**20, 3),
            "num_batches": m["num_batches"],
            "peak_rss_mib_per_worker": [round(b / 2**20, 1) for b in m["peak_rss_bytes"]],
        }
        print(json.dumps(line), flush=True)
    best = result.summary["best"] or {}
    summary = {
        "bench": "hetero_train",
        **common,
        "epochs": args.epochs,
        "best_epoch": best.get("epoch"),
        "best_val_acc": best.get("val_acc"),
        "test_acc_at_best_val": best.get("test_acc"),
        "final_test_acc": result.history[-1].get("test_acc"),
        "driver_peak_rss_mib": round(result.summary["driver_peak_rss_bytes"] / 2**20, 1),
        "wall_seconds": round(time.perf_counter() - start, 1),
        "run_dir": str(out),
    }
    print(json.dumps(summary), flush=True)


def run_bytes(args: argparse.Namespace) -> None:
    """Replay epoch 0's traffic and print a ``hetero_bytes`` line."""
    from gnnsys.train.control.run import train_local

    cfg = _config(replace(args, epochs=1))
    out = Path(args.out or tempfile.mkdtemp(prefix="hetero-bytes-"))
    start = time.perf_counter()
    line = train_local(cfg, out, traffic_only=True).history[0]
    by_type = line.get("bytes_by_type", {})
    print(
        json.dumps(
            {
                "bench": "hetero_bytes",
                **_common(args),
                "bytes_by_type": by_type,
                "mib_by_type": {t: _mib(v) for t, v in by_type.items()},
                "total_mib_without_allreduce": _mib(
                    {k: v for k, v in line["bytes"].items() if k != "allreduce"}
                ),
                "warmup_mib": _mib(line["warmup_bytes"]),
                "cache": line.get("cache"),
                "num_batches": line["num_batches"],
                "replay_seconds": round(time.perf_counter() - start, 1),
            }
        ),
        flush=True,
    )


def main() -> None:
    """Parse the flags and run one measurement."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", required=True)
    p.add_argument("--parts", type=int, required=True)
    p.add_argument("--mode", choices=("train", "bytes"), default="train")
    p.add_argument("--executor", choices=("ray", "local"), default="ray")
    p.add_argument("--model", choices=("sage", "gat", "rgcn"), default="sage")
    p.add_argument("--fanouts", default="10,5")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--codec", default="fp32", help="e.g. paper=int8,author=fp16")
    p.add_argument("--cache-ratio", type=float, default=0.0, help="degree cache budget ratio")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--deadline", type=float, default=600.0)
    p.add_argument("--out", help="run directory (default: a temporary one)")
    args = p.parse_args()
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    (run_train if args.mode == "train" else run_bytes)(args)


if __name__ == "__main__":
    main()
