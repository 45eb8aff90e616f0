"""End-to-end epoch time of ``gnnsys train`` against DGL 2.1's single-process training.

The graph is synthetic:rmat with 2**20 nodes (F = 100, as ``gnnsys train synthetic:rmat
--num-nodes 1048576`` builds it), written once as ``GRAPH.npz`` for DGL's script
(``../shared/baselines/dgl_train_sage.py``: two SAGEConv mean layers, hidden 128, fanouts 15,10,
batch 1024, Adam) and once as a gnnsys store per part count. Every round runs each gnnsys
configuration and DGL once, in turn, so the ratios come from runs seconds apart on the same
machine; each run trains ``--epochs`` epochs and its figure is the median epoch after the
first (start-up and first-touch faults excluded).

gnnsys configurations (``--configs``, comma list of ``P:K``, ``P:K:DELAY_MS`` or
``P:K:DELAY_MS:READS``):

* ``1:K``: one part (replicated), batch 1024, prefetch ``K``;
* ``2:K``: two parts (partitioned), 512 seeds per worker: the same global batch and 103 steps;
* ``P:K:D``: as ``P:K`` with ``D`` milliseconds added to every owner call (the latency-hiding
  check: choose ``D`` so that ``P:0:D`` takes about twice ``P:0``);
* ``P:K:D:READS``: with ``--owner-reads READS``: ``remote`` (trainers call the owner actors),
  ``local`` (they run the owners' code over the mapped shards themselves) or ``auto`` (the
  default when omitted: ``local`` here, as gnnsys starts its own Ray instance). The delay
  applies to either kind of owner call.

Every gnnsys line carries the epoch's stage times, the compute loop's stall and the overlap
ratio (stage time / epoch time) from ``metrics.jsonl``. DGL runs in its own virtualenv
(``../shared/baselines/setup-dgl-venv.sh DIR``); without it, DGL's lines say ``unavailable``.
Measure on a quiet machine.

Usage::

    python benchmarks/e2e_dgl.py --dgl-python /work/dglvenv/bin/python \
        [--configs 1:0,1:2,2:0,2:2] [--rounds 3] [--epochs 3] [--work /tmp/e2e] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

BASELINES = Path(__file__).resolve().parents[2] / "shared" / "baselines"
NUM_NODES = 1 << 20
GNNSYS = [sys.executable, "-m", "gnnsys"]


def write_graph(path: Path) -> None:
    """The graph as DGL's script reads it (in-edge CSR, x, y, train ids)."""
    if path.exists():
        return
    from gnnsys.datasets import load

    graph = load("synthetic:rmat", num_nodes=NUM_NODES)
    assert graph.x is not None and graph.y is not None and graph.train_mask is not None
    tmp = path.with_suffix(".tmp.npz")
    np.savez(
        tmp,
        indptr=graph.indptr.astype(np.int64),
        indices=graph.indices.astype(np.int64),
        x=np.asarray(graph.x, dtype=np.float32),
        y=graph.y.astype(np.int64),
        train=np.flatnonzero(graph.train_mask).astype(np.int64),
    )
    os.replace(tmp, path)


def write_store(work: Path, parts: int) -> Path:
    """A ``parts``-part store of the graph (written once, reused by every round)."""
    store = work / f"store-p{parts}"
    if not (store / "manifest.json").exists():
        cmd = [*GNNSYS, "partition", "synthetic:rmat", "-D", f"num_nodes={NUM_NODES}"]
        cmd += ["--parts", str(parts), "--out", str(store)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return store


def _median_after_first(values: list[float]) -> float:
    return statistics.median(values[1:] if len(values) > 1 else values)


def run_gnnsys(work: Path, config: str, epochs: int, tag: str) -> dict[str, Any]:
    """One ``gnnsys train`` run of ``config`` (``P:K[:DELAY_MS]``); its median epoch."""
    raw = config.split(":")
    reads = raw[3] if len(raw) > 3 else "auto"
    fields = [int(v) for v in raw[:3]]
    parts, prefetch, delay = fields[0], fields[1], fields[2] if len(fields) > 2 else 0
    out = work / f"run-{config.replace(':', '-')}-{tag}"
    cmd = [*GNNSYS, "train", "--store", str(write_store(work, parts)), "--out", str(out)]
    cmd += ["--parts", str(parts)]
    cmd += ["--epochs", str(epochs), "--eval-every", "0", "--no-progress", "--lr", "0.01"]
    cmd += ["--dropout", "0", "--hidden", "128", "--fanouts", "15,10"]
    cmd += ["--batch-size", str(1024 // parts), "--prefetch", str(prefetch)]
    cmd += ["--topology", "replicated" if parts == 1 else "partitioned"]
    if delay:
        cmd += ["--inject-delay-ms", str(delay)]
    cmd += ["--owner-reads", reads]  # auto: local, as gnnsys starts Ray itself here
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    pick = lines[1:] if len(lines) > 1 else lines
    mid = sorted(pick, key=lambda m: m["seconds"]["total"])[len(pick) // 2]
    secs = mid["seconds"]
    return {
        "system": "gnnsys",
        "config": config,
        "parts": parts,
        "prefetch": prefetch,
        "delay_ms": delay,
        "owner_reads": reads,
        "epoch_seconds": round(secs["total"], 3),
        "stages": {k: round(v, 3) for k, v in secs.items() if k not in ("total", "eval")},
        "threads_per_rank": mid.get("threads"),
        "loss": round(mid["loss"], 4),
        "num_batches": mid["num_batches"],
        "wall_seconds": round(wall, 1),
    }


def run_dgl(dgl_python: str, graph: Path, epochs: int, threads: int) -> dict[str, Any]:
    """DGL's median epoch at ``threads`` threads, or ``unavailable``."""
    if not Path(dgl_python).exists():
        return {"system": "dgl", "dgl": "unavailable", "hint": "setup-dgl-venv.sh DIR"}
    cmd = [dgl_python, str(BASELINES / "dgl_train_sage.py"), str(graph)]
    cmd += ["--epochs", str(epochs), "--threads", str(threads)]
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    secs = [json.loads(line)["seconds"] for line in done.stdout.splitlines() if line.strip()]
    return {
        "system": "dgl",
        "threads": threads,
        "epoch_seconds": round(_median_after_first(secs), 3),
    }


def _delay_ratios(lines: list[dict[str, Any]], configs: list[str]) -> dict[str, float]:
    """Per delayed config ``P:K:D``: its epoch over ``P:0``'s (no delay) in the same round."""
    out: dict[str, float] = {}
    for config in (c for c in configs if c.count(":") == 2 and int(c.split(":")[2])):
        base = config.split(":")[0] + ":0"
        pairs = []
        for rnd in {line["round"] for line in lines if "round" in line}:
            got = {x.get("config"): x for x in lines if x.get("round") == rnd}
            if config in got and base in got:
                pairs.append(got[config]["epoch_seconds"] / got[base]["epoch_seconds"])
        if pairs:
            out[config] = round(statistics.median(pairs), 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--configs", default="1:0,1:2,2:0,2:2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--dgl-python", default="/work/dglvenv/bin/python")
    ap.add_argument("--dgl-threads", type=int, default=2)
    ap.add_argument("--work", type=Path, default=Path("/tmp/gnnsys-e2e"))
    ap.add_argument("--out", type=Path, help="also append the JSON lines here")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    graph = args.work / "rmat-2p20.npz"
    write_graph(graph)
    configs = args.configs.split(",")
    for config in configs:
        write_store(args.work, int(config.split(":")[0]))
    names = {c: c.replace(":", "-") for c in configs}
    assert len(set(names.values())) == len(configs), "configs repeat"
    ratios: dict[str, list[float]] = {c: [] for c in configs}
    lines: list[dict[str, Any]] = []
    for rnd in range(args.rounds):
        dgl = run_dgl(args.dgl_python, graph, args.epochs, args.dgl_threads)
        lines.append({"bench": "e2e_dgl", "round": rnd, **dgl})
        for config in configs:
            ours = run_gnnsys(args.work, config, args.epochs, str(rnd))
            if "epoch_seconds" in dgl:
                ratios[config].append(ours["epoch_seconds"] / dgl["epoch_seconds"])
            lines.append({"bench": "e2e_dgl", "round": rnd, **ours})
            print(json.dumps(lines[-1]), flush=True)
        print(json.dumps(lines[-len(configs) - 1]), flush=True)
    summary = {
        "bench": "e2e_dgl_summary",
        "rounds": args.rounds,
        "ratio_vs_dgl_median": {c: round(statistics.median(r), 3) for c, r in ratios.items() if r},
        "delayed_vs_no_delay_k0_median": _delay_ratios(lines, configs),
    }
    lines.append(summary)
    print(json.dumps(summary), flush=True)
    if args.out is not None:
        with args.out.open("a") as f:
            f.writelines(json.dumps(line) + "\n" for line in lines)


if __name__ == "__main__":
    main()
