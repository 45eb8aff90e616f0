"""The typed runtime on a homogeneous store against the node runtime: epoch time, same batches.

Issue 23 folds the node runtime (``NodeRank``) into the typed one (``RankRuntime``), whose
one-type case trains bit-identically (``tests/train/hetero/test_one_type.py``). This measures
what the fold would cost in speed: the same store, the same config, the in-process executor,
run through each runtime in alternating rounds. Per run it reports the median epoch after the
first (``seconds.total`` of ``metrics.jsonl``; the lower middle one), its stages and its loss;
per part count the ratio typed / node of each round and their median.

The graph is ``synthetic:rmat`` (``--num-nodes``, F = 100), SAGE 2 x 128, fanouts 15,10, a
global batch of 1024 (``1024 / P`` per rank), ``--prefetch 2``; one part is replicated, more
are partitioned. One JSON line per run. ``--eval`` also runs the exact evaluation after every
epoch and reports its median seconds (``seconds.eval``) and the typed / node ratio of those.

Usage::

    python benchmarks/one_type.py --work /tmp/one-type [--parts 1 2] [--rounds 5] [--epochs 4]
        [--eval]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from gnnsys.config import ClusterConfig, RunConfig
from gnnsys.models import ModelConfig
from gnnsys.sampler import NeighborSampler
from gnnsys.store.source import DataConfig
from gnnsys.train.control.run import train_local
from gnnsys.train.eval.evaluate import EvalConfig
from gnnsys.train.node_types import NodeTypesConfig
from gnnsys.train.trainer import Trainer

GNNSYS = [sys.executable, "-m", "gnnsys"]


def write_store(work: Path, num_nodes: int, parts: int) -> Path:
    """A ``parts``-part store of the graph (written once, reused by every round)."""
    store = work / f"store-n{num_nodes}-p{parts}"
    if not (store / "manifest.json").exists():
        cmd = [*GNNSYS, "partition", "synthetic:rmat", "-D", f"num_nodes={num_nodes}"]
        cmd += ["--parts", str(parts), "--out", str(store)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return store


def config(store: Path, parts: int, epochs: int, evaluate: bool = False) -> RunConfig:
    """The run both runtimes train (the node runtime's; ``hetero`` set picks the typed one)."""
    cfg = RunConfig(
        data=DataConfig(store=str(store)),
        cluster=ClusterConfig(parts=parts, topology="replicated" if parts == 1 else "partitioned"),
        sampler=NeighborSampler.Config(fanouts=(15, 10)),
        model=ModelConfig(name="sage", hidden=128, dropout=0.0),
        trainer=Trainer.Config(batch_size=1024 // parts, lr=0.01, prefetch=2),
        eval=EvalConfig(every=1 if evaluate else 0),
    )
    return replace(cfg, loop=replace(cfg.loop, epochs=epochs, progress=False))


def run(cfg: RunConfig, out: Path, runtime: str) -> dict[str, Any]:
    """One run; its median epoch after the first."""
    if runtime == "typed":
        cfg = replace(cfg, node_types=NodeTypesConfig(input_type="node"))
    result = train_local(cfg, out)
    lines = result.history[1:] if len(result.history) > 1 else result.history
    mid = sorted(lines, key=lambda m: m["seconds"]["total"])[(len(lines) - 1) // 2]
    secs = mid["seconds"]
    evals = sorted(m["seconds"]["eval"] for m in lines if "eval" in m["seconds"])
    return {
        "bench": "one_type",
        "runtime": runtime,
        "parts": cfg.cluster.parts,
        "epoch_seconds": round(secs["total"], 3),
        "median_of": len(lines),
        "stages": {k: round(v, 3) for k, v in secs.items() if k not in ("total", "eval")},
        "eval_seconds": round(evals[(len(evals) - 1) // 2], 3) if evals else None,
        "loss": round(mid["loss"], 6),
        "num_batches": mid["num_batches"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--num-nodes", type=int, default=2**20)
    parser.add_argument("--parts", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--eval", action="store_true", help="evaluate after every epoch")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    for parts in args.parts:
        store = write_store(args.work, args.num_nodes, parts)
        cfg = config(store, parts, args.epochs, args.eval)
        ratios, eval_ratios = [], []
        for r in range(args.rounds):
            got = {}
            for runtime in ("node", "typed"):
                row = run(cfg, args.work / f"run-p{parts}-{runtime}-{r}", runtime)
                got[runtime] = row["epoch_seconds"]
                got[f"{runtime}_eval"] = row["eval_seconds"]
                print(json.dumps({**row, "round": r}), flush=True)
            ratios.append(got["typed"] / got["node"])
            if args.eval:
                eval_ratios.append(got["typed_eval"] / got["node_eval"])
        summary = {
            "bench": "one_type",
            "parts": parts,
            "typed_over_node_median": round(statistics.median(ratios), 3),
            "typed_over_node_by_round": [round(x, 3) for x in ratios],
        }
        if eval_ratios:
            summary["eval_typed_over_node_median"] = round(statistics.median(eval_ratios), 3)
            summary["eval_typed_over_node_by_round"] = [round(x, 3) for x in eval_ratios]
        print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
