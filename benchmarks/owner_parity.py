"""Owner-side aggregation (issue 8): accuracy parity and remote feature bytes per placement.

For each dataset, seed and placement (``requester``, ``owner``, ``auto``), trains SAGE-mean on a
4-part METIS store with the in-process executor
``gnnsys.train.control.run.train_local`` (threads, the same Trainer, feature sources,
ShardOwner code and ledger as the Ray runtime) and prints one JSON line: exact test accuracy at the
epoch of best validation accuracy, and per-epoch traffic means:

* ``feature_bytes``: ``feature_request + feature_response`` (rows still fetched);
* ``partial_bytes``: ``partial_request + partial_response`` (pairs sent, partial sums returned);
* ``remote_feature_bytes``: their sum, what layer 1's inputs cost on the wire.

A summary line per dataset gives mean test accuracy per placement, ``owner - requester`` in
points, and each placement's bytes as a ratio of ``requester``'s (same run, same batches).

Usage (heavy: wrap in the shared lock)::

    flock /tmp/gnnsys-heavy.lock python benchmarks/owner_parity.py \
        [--datasets cora,facebook] [--seeds 0,1,2] [--placements requester,owner,auto] \
        [--codec fp32] [--cache-policy none --cache-ratio 0]
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

from gnnsys.cache import CacheConfig, CodecConfig
from gnnsys.config import RunConfig
from gnnsys.datasets import load
from gnnsys.models import ModelConfig
from gnnsys.partitioners import partition
from gnnsys.sampler import NeighborSampler
from gnnsys.store import write_partitions
from gnnsys.store.source import DataConfig
from gnnsys.train.control.run import train_local
from gnnsys.train.layer0.base import FirstLayerConfig, Placement
from gnnsys.train.trainer import Trainer

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
    "sbm": {  # bytes figure (issue 8 asks for synthetic:sbm): 100k nodes, F = 64 Gaussian
        "dataset": "synthetic:sbm",
        "fanouts": (15, 10),
        "batch": 4096,
        "epochs": 2,
        "lr": 0.003,
        "hidden": 64,
    },
}
PARTS = 4
FEATURE = ("feature_request", "feature_response")
PARTIAL = ("partial_request", "partial_response")


def run_one(
    store: Path, s: dict[str, Any], seed: int, fetch: dict[str, Any], out: Path
) -> dict[str, Any]:
    """Train once; test accuracy at the best validation epoch and mean per-epoch traffic."""
    base = RunConfig()
    cfg = replace(
        base,
        data=DataConfig(store=str(store)),
        cluster=replace(base.cluster, parts=PARTS, topology="partitioned"),
        sampler=NeighborSampler.Config(fanouts=s["fanouts"]),
        model=ModelConfig(name=s.get("model", "sage"), hidden=s["hidden"]),
        trainer=Trainer.Config(lr=s["lr"], batch_size=s["batch"] // PARTS, seed=seed),
        loop=replace(base.loop, epochs=s["epochs"], progress=False, deadline_s=600.0),
        **fetch,  # codec, cache and layer0 configs
    )
    result = train_local(cfg, out)
    best = result.summary["best"]
    history = result.history

    def per_epoch(cats: tuple[str, ...]) -> float:
        return statistics.fmean(sum(m["bytes"][c] for c in cats) for m in history)

    got = {"val_acc": best["val_acc"], "test_acc": best["test_acc"]}
    got["feature_bytes"] = round(per_epoch(FEATURE))
    got["partial_bytes"] = round(per_epoch(PARTIAL))
    got["remote_feature_bytes"] = got["feature_bytes"] + got["partial_bytes"]
    warm = history[0].get("warmup_bytes", {})
    got["warmup_feature_bytes"] = sum(warm.get(c, 0) for c in FEATURE)  # cache prefetch, once
    if "counts" in history[-1]:
        got["counts_per_epoch"] = {
            k: round(statistics.fmean(m["counts"][k] for m in history))
            for k in history[-1]["counts"]
        }
    return got


def summarize(name: str, s: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean accuracy per placement, owner-requester difference, byte ratios to requester."""
    placements = sorted({r["placement"] for r in rows})
    mean_acc = {
        p: statistics.fmean(r["test_acc"] for r in rows if r["placement"] == p) for p in placements
    }
    mean_bytes = {
        p: statistics.fmean(r["remote_feature_bytes"] for r in rows if r["placement"] == p)
        for p in placements
    }
    out: dict[str, Any] = {"bench": "owner_parity_summary", "dataset": s["dataset"], "parts": PARTS}
    out |= {"model": s["model"], "fanouts": list(s["fanouts"]), "epochs": s["epochs"]}
    out |= {f"{p}_test_acc_mean": round(v, 4) for p, v in mean_acc.items()}
    out |= {f"{p}_remote_feature_bytes": round(v) for p, v in mean_bytes.items()}
    if "requester" in mean_acc:
        for p in placements:
            if p != "requester":
                out[f"{p}_minus_requester_points"] = round(
                    100 * (mean_acc[p] - mean_acc["requester"]), 2
                )
                out[f"{p}_bytes_ratio"] = round(mean_bytes[p] / max(mean_bytes["requester"], 1), 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="cora,facebook", help="cora, facebook, sbm")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--placements", default="requester,owner,auto")
    parser.add_argument("--codec", default="fp32")
    parser.add_argument("--cache-policy", default="none")
    parser.add_argument("--cache-ratio", type=float, default=0.0)
    parser.add_argument("--model", default="sage", help="sage or gcn (gat falls back)")
    parser.add_argument("--epochs", type=int, default=None, help="override the preset epochs")
    parser.add_argument("--root", default=None)
    args = parser.parse_args()
    seeds = [int(v) for v in args.seeds.split(",")]
    with tempfile.TemporaryDirectory(prefix="gnnsys-owner-parity-") as tmp:
        for name in args.datasets.split(","):
            s = dict(SETTINGS[name]) | {"model": args.model}
            if args.epochs is not None:
                s["epochs"] = args.epochs
            graph = load(s["dataset"], root=args.root)
            store = Path(tmp) / name / "store"
            write_partitions(graph, partition(graph, "metis", PARTS, seed=0), store, num_hops=2)
            rows = []
            for seed in seeds:
                for placement in args.placements.split(","):
                    fetch = {
                        "codec": CodecConfig(name=args.codec),
                        "cache": CacheConfig(policy=args.cache_policy, ratio=args.cache_ratio),
                        "layer0": FirstLayerConfig(placement=Placement(placement)),
                    }
                    start = time.perf_counter()
                    got = run_one(store, s, seed, fetch, Path(tmp) / name / f"{placement}{seed}")
                    line = {
                        "bench": "owner_parity",
                        "dataset": s["dataset"],
                        "placement": placement,
                    }
                    line |= {
                        "model": args.model,
                        "seed": seed,
                        "codec": args.codec,
                        "cache_policy": args.cache_policy,
                    }
                    line |= {"cache_ratio": args.cache_ratio, **got}
                    line["seconds"] = round(time.perf_counter() - start, 1)
                    rows.append(line)
                    print(json.dumps(line), flush=True)
            summary = summarize(name, s, rows)
            summary |= {"codec": args.codec, "cache_policy": args.cache_policy}
            summary |= {"cache_ratio": args.cache_ratio, "seeds": seeds}
            print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
