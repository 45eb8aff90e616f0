"""Distributed training cost: epoch time, bytes per epoch and peak RSS per worker, P = 1, 2, 4.

Runs ``gnnsys.train.control.run.train`` on synthetic:sbm (100k nodes) for each P in one Ray
instance and prints one JSON line per P (the last epoch's figures, so actor start-up and first-touch
page faults are excluded) plus a ratio line against P=1 measured in the same run. ``--rmat`` instead
trains the products-size synthetic:rmat graph (2.4M nodes) with 4 workers for one epoch.

Usage (heavy: wrap in the shared lock)::

    flock /tmp/gnnsys-heavy.lock python benchmarks/train.py [--parts 1,2,4] [--epochs 2]
    flock /tmp/gnnsys-heavy.lock python benchmarks/train.py --rmat
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from gnnsys.config import RunConfig
from gnnsys.sampler import NeighborSampler
from gnnsys.store.source import DataConfig
from gnnsys.train.control.run import train


def _line(cfg: RunConfig, result: Any, wall: float) -> dict[str, Any]:
    last = result.history[-1]
    return {
        "bench": "train",
        "dataset": cfg.data.dataset,
        "parts": cfg.cluster.parts,
        "topology": result.summary["config"]["cluster"]["topology"],
        "partitioner": cfg.data.partitioner,
        "epochs": len(result.history),
        "epoch_seconds": round(last["seconds"]["total"], 3),
        "seconds_split": {k: round(v, 3) for k, v in last["seconds"].items()},
        "bytes_per_epoch": last["bytes"],
        "total_bytes_per_epoch": sum(last["bytes"].values()),
        "messages_per_epoch": last["messages"],
        "peak_rss_mib_per_worker": [round(b / 2**20, 1) for b in last["peak_rss_bytes"]],
        "driver_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "test_acc": round(last["test_acc"], 4),
        "num_batches": last["num_batches"],
        "wall_seconds": round(wall, 1),
    }


def _run(cfg: RunConfig, out: Path) -> dict[str, Any]:
    start = time.perf_counter()
    result = train(cfg, out)
    line = _line(cfg, result, time.perf_counter() - start)
    print(json.dumps(line), flush=True)
    return line


def sbm_sweep(parts: list[int], epochs: int, topology: str, out: Path) -> None:
    base = RunConfig()
    lines = {}
    for p in parts:
        cfg = replace(
            base,
            cluster=replace(base.cluster, parts=p, topology=topology),
            loop=replace(base.loop, epochs=epochs, progress=False, deadline_s=600.0),
        )
        lines[p] = _run(cfg, out / f"sbm-p{p}")
    ref = lines[parts[0]]
    for p, line in lines.items():
        print(
            json.dumps(
                {
                    "bench": "train_ratio",
                    "parts": p,
                    "vs_parts": parts[0],
                    "epoch_time_ratio": round(line["epoch_seconds"] / ref["epoch_seconds"], 3),
                    "bytes_ratio": None
                    if not ref["total_bytes_per_epoch"]
                    else round(line["total_bytes_per_epoch"] / ref["total_bytes_per_epoch"], 3),
                }
            )
        )


def rmat_epoch(out: Path) -> None:
    base = RunConfig()
    cfg = replace(
        base,
        data=DataConfig(
            dataset="synthetic:rmat",
            partitioner="random",
            dataset_params=(("num_nodes", 2_449_029),),
        ),
        cluster=replace(base.cluster, parts=4, topology="partitioned"),
        sampler=NeighborSampler.Config(fanouts=(15, 10)),
        loop=replace(base.loop, epochs=1, progress=False, deadline_s=1200.0),
    )
    _run(cfg, out / "rmat-p4")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="1,2,4")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--topology", default="partitioned")
    parser.add_argument("--rmat", action="store_true", help="products-size R-MAT, 4 workers")
    parser.add_argument("--out", help="run directories (default: a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gnnsys-bench-train-") as tmp:
        out = Path(args.out or tmp)
        if args.rmat:
            rmat_epoch(out)
        else:
            sbm_sweep([int(p) for p in args.parts.split(",")], args.epochs, args.topology, out)


if __name__ == "__main__":
    main()
