"""GCN accuracy on the Planetoid public splits (issue 15, part 4), in-process runtime.

Trains gnnsys GCN with full neighbourhoods (fanouts -1,-1) through
``gnnsys.train.control.run.train_local`` (ranks as threads, every remote neighbor list, feature
row and degree through a shard owner and the ledger, exact sharded evaluation), at 1 and 4
METIS parts and several seeds, with Kipf & Welling's recipe: 2 layers, hidden 16, dropout 0.5,
Adam lr 0.01, weight decay 5e-4, 200 epochs, row-normalised features, full batch (every train
seed of a rank in one batch per epoch). Reports test accuracy at the epoch of best validation
accuracy (the runtime's model selection) and at the last epoch.

Prints one JSON line per run and one summary line per (dataset, parts)::

    python benchmarks/gcn_accuracy.py --root DATA_DIR > docs/results/gcn-planetoid.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from gnnsys.config import RunConfig
from gnnsys.datasets import load
from gnnsys.datasets.transforms import normalize_rows
from gnnsys.models import ModelConfig
from gnnsys.partitioners import partition
from gnnsys.sampler import NeighborSampler
from gnnsys.store import write_partitions
from gnnsys.store.source import DataConfig
from gnnsys.train.control.run import train_local
from gnnsys.train.trainer import Trainer

RECIPE: dict[str, Any] = {
    "fanouts": (-1, -1),
    "hidden": 16,
    "dropout": 0.5,
    "lr": 0.01,
    "weight_decay": 5e-4,
    "epochs": 200,
    "batch_size": 4096,  # > every rank's train seeds: one full batch per rank per epoch
    "feature_norm": "row",
    "partitioner": "metis",
}


def run_config(store: Path, parts: int, seed: int, recipe: dict[str, Any]) -> RunConfig:
    """The run: the recipe on ``store`` with ``parts`` ranks and seed ``seed``."""
    base = RunConfig()
    return replace(
        base,
        data=DataConfig(store=str(store)),
        cluster=replace(base.cluster, parts=parts, topology="partitioned"),
        sampler=NeighborSampler.Config(fanouts=recipe["fanouts"]),
        model=ModelConfig(name="gcn", hidden=recipe["hidden"], dropout=recipe["dropout"]),
        trainer=Trainer.Config(
            lr=recipe["lr"],
            weight_decay=recipe["weight_decay"],
            batch_size=recipe["batch_size"],
            seed=seed,
        ),
        loop=replace(base.loop, epochs=recipe["epochs"], progress=False, deadline_s=600.0),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="planetoid:cora,planetoid:citeseer")
    parser.add_argument("--parts", default="1,4")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--epochs", type=int, default=RECIPE["epochs"])
    parser.add_argument("--root", default=None)
    args = parser.parse_args()
    recipe = RECIPE | {"epochs": args.epochs}
    seeds = [int(v) for v in args.seeds.split(",")]
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="gnnsys-gcn-") as tmp:
        for name in args.datasets.split(","):
            graph = normalize_rows(load(name, root=args.root))  # recipe["feature_norm"] == "row"
            for parts in (int(p) for p in args.parts.split(",")):
                store = Path(tmp) / f"{name.replace(':', '-')}-{parts}" / "store"
                assignment = partition(graph, recipe["partitioner"], parts, seed=0)
                write_partitions(graph, assignment, store, num_hops=len(recipe["fanouts"]))
                best, final = [], []
                for seed in seeds:
                    start = time.perf_counter()
                    cfg = run_config(store, parts, seed, recipe)
                    summary = train_local(cfg, store.parent / f"run{seed}").summary
                    best.append(summary["best"]["test_acc"])
                    final.append(summary["final"]["test_acc"])
                    line = {"bench": "gcn_accuracy", "dataset": name, "parts": parts}
                    line |= {"seed": seed, "best_epoch": summary["best"]["epoch"]}
                    line |= {"val_acc": summary["best"]["val_acc"], "test_acc": best[-1]}
                    line |= {"final_test_acc": final[-1]}
                    line |= {"seconds": round(time.perf_counter() - start, 1)}
                    print(json.dumps(line), flush=True)
                out = {"bench": "gcn_accuracy_summary", "dataset": name, "parts": parts}
                out |= {"seeds": seeds, "recipe": {k: v for k, v in recipe.items()}}
                out |= {"test_acc_mean": round(statistics.fmean(best), 4)}
                out |= {"test_acc_std": round(statistics.stdev(best), 4) if len(best) > 1 else 0.0}
                out |= {"final_test_acc_mean": round(statistics.fmean(final), 4)}
                print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
