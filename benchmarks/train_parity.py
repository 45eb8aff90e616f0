"""Accuracy parity: 4-worker METIS-partitioned training vs the same model single-process.

For each dataset and seed, trains gnnsys SAGE twice with the same fanouts, epochs, learning rate
and global batch size (single process: ``B``; distributed: ``B / 4`` per worker):

* ``single``: the pure-torch ``Trainer`` in one process over the graph in memory
  (``gnnsys.testing.in_memory``: the typed sampler over the whole graph), no store, no Ray;
* ``distributed``: ``gnnsys.train.control.run.train`` with 4 Ray workers on a 4-part METIS store
  (remote sampling and feature fetch, gloo allreduce).

Both report exact layer-wise test accuracy at the epoch of best validation accuracy. Prints one
JSON line per run and one summary line per dataset (means over seeds, difference in points).

Usage (heavy: wrap in the shared lock)::

    flock /tmp/gnnsys-heavy.lock python benchmarks/train_parity.py [--datasets cora,facebook]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from gnnsys.config import RunConfig
from gnnsys.datasets import load
from gnnsys.models import ModelConfig
from gnnsys.partitioners import partition
from gnnsys.sampler import NeighborSampler
from gnnsys.store import write_partitions
from gnnsys.store.source import DataConfig
from gnnsys.testing.in_memory import one_type_trainer
from gnnsys.testing.reference import full_block
from gnnsys.train.control.run import train
from gnnsys.train.schedule import steps_per_epoch
from gnnsys.train.trainer import Trainer
from gnnsys.types import ONE_RELATION, ONE_TYPE, Graph

SETTINGS: dict[str, dict[str, Any]] = {
    "cora": {
        "dataset": "planetoid:cora",
        "fanouts": (15, 10),
        "batch": 64,
        "epochs": 30,
        "lr": 0.01,
        "hidden": 64,
    },
    "facebook": {
        "dataset": "musae:facebook",
        "fanouts": (10, 5),
        "batch": 1024,
        "epochs": 5,
        "lr": 0.005,
        "hidden": 64,
    },
}
PARTS = 4


def _accs(model: torch.nn.Module, graph: Graph, block: Any, x: torch.Tensor) -> dict[str, float]:
    model.eval()
    with torch.no_grad():
        layers = len(cast(Any, model).layers)
        logits = model({ONE_TYPE: x}, ({ONE_RELATION: block},) * layers)[ONE_TYPE]
    pred = logits.argmax(-1).numpy()
    assert graph.y is not None
    out = {}
    for split in ("val", "test"):
        mask = getattr(graph, f"{split}_mask")
        out[split] = float((pred[mask] == graph.y[mask]).mean())
    return out


def single(graph: Graph, s: dict[str, Any], seed: int) -> dict[str, Any]:
    assert graph.x is not None
    trainer = one_type_trainer(
        graph, Trainer.Config(lr=s["lr"], batch_size=s["batch"], seed=seed),
        hidden=s["hidden"], fanouts=s["fanouts"], model_seed=seed,
    )  # fmt: skip
    model = trainer.model
    block = full_block(graph.indptr, graph.indices, graph.num_nodes)
    x = torch.from_numpy(np.asarray(graph.x, dtype=np.float32))
    best = {"val": -1.0, "test": 0.0}
    for epoch in range(s["epochs"]):
        trainer.train_epoch(epoch, steps_per_epoch([trainer.batch_plan()]))
        accs = _accs(model, graph, block, x)
        if accs["val"] > best["val"]:
            best = accs
    return {"val_acc": best["val"], "test_acc": best["test"]}


def distributed(store: Path, s: dict[str, Any], seed: int, out: Path) -> dict[str, Any]:
    base = RunConfig()
    cfg = replace(
        base,
        data=DataConfig(store=str(store)),
        cluster=replace(base.cluster, parts=PARTS, topology="partitioned"),
        sampler=NeighborSampler.Config(fanouts=s["fanouts"]),
        model=ModelConfig(hidden=s["hidden"]),
        trainer=Trainer.Config(lr=s["lr"], batch_size=s["batch"] // PARTS, seed=seed),
        loop=replace(base.loop, epochs=s["epochs"], progress=False, deadline_s=600.0),
    )
    best = train(cfg, out).summary["best"]
    return {"val_acc": best["val_acc"], "test_acc": best["test_acc"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="cora,facebook")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--root", default=None)
    args = parser.parse_args()
    seeds = [int(v) for v in args.seeds.split(",")]
    with tempfile.TemporaryDirectory(prefix="gnnsys-parity-") as tmp:
        for name in args.datasets.split(","):
            s = SETTINGS[name]
            graph = load(s["dataset"], root=args.root)
            store = Path(tmp) / name / "store"
            write_partitions(graph, partition(graph, "metis", PARTS, seed=0), store, num_hops=2)
            results: dict[str, list[float]] = {"single": [], "distributed": []}
            for seed in seeds:
                for system in ("single", "distributed"):
                    start = time.perf_counter()
                    if system == "single":
                        got = single(graph, s, seed)
                    else:
                        got = distributed(store, s, seed, Path(tmp) / name / f"run{seed}")
                    results[system].append(got["test_acc"])
                    line = {"bench": "parity", "dataset": s["dataset"], "system": system}
                    line |= {"seed": seed, **got, "seconds": round(time.perf_counter() - start, 1)}
                    print(json.dumps(line), flush=True)
            mean = {k: statistics.fmean(v) for k, v in results.items()}
            summary = {"bench": "parity_summary", "dataset": s["dataset"], "parts": PARTS}
            summary |= {"fanouts": list(s["fanouts"]), "epochs": s["epochs"], "seeds": seeds}
            summary |= {f"{k}_test_acc_mean": round(v, 4) for k, v in mean.items()}
            summary["diff_points"] = round(100 * (mean["distributed"] - mean["single"]), 2)
            print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
