"""Training on a device: epoch time, stages, stall, GPU busy fraction, peak device memory, accuracy.

The graph is synthetic:rmat with 2**20 nodes (F = 100), the same as ``benchmarks/e2e_dgl.py``:
SAGE 2 x 128, fanouts 15,10, a global batch of 1024 seeds, Adam lr 0.01, dropout 0 (so a CPU
and a GPU run of the same seeds differ only in floating-point summation order). Each part
count gets one store (``gnnsys partition --method ldg``: no METIS needed); every configuration
(``--configs``, comma list of ``P:K[:CODEC[:ROWS]]``: parts, prefetch depth, the codec of
remote rows (default fp32; ``int8`` or ``int4`` makes layer 0 sum the halo rows from their codes
on the device, the fused kernel in the training step) and where a trainer keeps the rows it
holds, ``host`` (default) or ``device`` (``--features-on``: its own rows and a degree cache of
half its own feature bytes, on the GPU)) is one ``gnnsys train
--executor local --device DEVICE`` run (ranks are threads of one process and share its GPU, so
Ray is not needed on the GPU machine), evaluated exactly after its last epoch.

Each line gives the median epoch after the first, its stages (``sample``, ``fetch``,
``transfer``, ``compute``, ``sync``), the compute loop's ``stall``, ``gpu_busy`` (compute time
/ epoch time: the fraction of the epoch the step computed), the ranks' peak device memory and
the test accuracy. ``--reference FILE`` holds lines of this script run with ``--device cpu``
(on the 2-core development machine: ``docs/results/gpu-cpu-reference.jsonl``); each line of
the same configuration then also gives ``speedup_vs_cpu`` (CPU epoch / this epoch) and
``acc_diff_pt`` (this accuracy less the CPU run's, in points).

Usage::

    python benchmarks/gpu_train.py --device cuda --configs 1:0,1:2,4:2 --work $OUT/work \
        --reference docs/results/gpu-cpu-reference.jsonl
    python benchmarks/gpu_train.py --device cpu --configs 1:2 --threads 2   # the reference
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

GNNSYS = [sys.executable, "-m", "gnnsys"]


def write_store(work: Path, parts: int, num_nodes: int) -> tuple[Path, float]:
    """A ``parts``-part store of the graph (written once per work directory) and its seconds."""
    store = work / f"store-n{num_nodes}-p{parts}"
    start = time.perf_counter()
    if not (store / "manifest.json").exists():
        cmd = [*GNNSYS, "partition", "synthetic:rmat", "-D", f"num_nodes={num_nodes}"]
        cmd += ["--parts", str(parts), "--method", "ldg", "--out", str(store)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return store, time.perf_counter() - start


def run(args: argparse.Namespace, config: str) -> dict[str, Any]:
    """One ``gnnsys train`` run of ``P:K[:CODEC]``; its median epoch after the first."""
    fields = config.split(":")
    parts, prefetch = int(fields[0]), int(fields[1])
    codec = fields[2] if len(fields) > 2 else "fp32"
    rows_on = fields[3] if len(fields) > 3 else "host"
    store, store_seconds = write_store(args.work, parts, args.num_nodes)
    out = args.work / f"run-{args.device}-p{parts}-k{prefetch}-{codec}-{rows_on}"
    cmd = [*GNNSYS, "train", "--store", str(store), "--out", str(out), "--executor", "local"]
    cmd += ["--parts", str(parts), "--device", args.device, "--prefetch", str(prefetch)]
    cmd += ["--epochs", str(args.epochs), "--eval-every", str(args.epochs), "--no-progress"]
    cmd += ["--lr", "0.01", "--dropout", "0", "--hidden", "128", "--fanouts", "15,10"]
    cmd += ["--batch-size", str(1024 // parts), "--threads", str(args.threads)]
    cmd += ["--codec", codec, "--features-on", rows_on]
    if rows_on == "device":  # a halo cache beside the own rows (parts > 1 have halo rows)
        cmd += ["--cache-policy", "degree", "--cache-ratio", "0.5"]
    start = time.perf_counter()
    shutil.rmtree(out, ignore_errors=True)  # this script's own run directory: a fresh run
    out.mkdir(parents=True)
    with (out / "train.log").open("w") as log:  # the run's log, beside its metrics
        subprocess.run(cmd, check=True, stdout=log, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - start
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    timed = lines[1:] if len(lines) > 1 else lines
    mid = sorted(timed, key=lambda m: m["seconds"]["total"])[len(timed) // 2]
    secs = mid["seconds"]
    summary = json.loads((out / "summary.json").read_text())
    return {
        "bench": "gpu_train",
        "device": args.device_name,
        "config": config,
        "parts": parts,
        "prefetch": prefetch,
        "codec": codec,
        "features_on": rows_on,
        "num_nodes": args.num_nodes,
        "epoch_seconds": round(secs["total"], 3),
        "epochs": [round(m["seconds"]["total"], 3) for m in lines],
        "stages": {k: round(v, 3) for k, v in secs.items() if k not in ("total", "eval")},
        "gpu_busy": round(secs["compute"] / secs["total"], 3),
        "peak_device_mib": round(max(mid.get("peak_device_bytes", [0]) or [0]) / 2**20, 1),
        "rank_devices": mid.get("devices"),
        "test_acc": lines[-1].get("test_acc"),
        "loss": round(mid["loss"], 4),
        "eval_seconds": round(lines[-1]["seconds"].get("eval", 0.0), 1),
        "plan": summary.get("device"),
        "threads": args.threads,
        "store_seconds": round(store_seconds, 1),
        "wall_seconds": round(wall, 1),
    }


def compare(line: dict[str, Any], reference: list[dict[str, Any]]) -> dict[str, Any]:
    """``line`` with its speedup and accuracy difference against the CPU run of its config."""
    key = ":".join(line["config"].split(":")[:3])  # else the same run with rows on the host
    same: list[dict[str, Any]] = []
    for name in (line["config"], key, key.removesuffix(":fp32")):
        same = same or [r for r in reference if r["config"] == name]
    if not same or line["test_acc"] is None:
        return line
    cpu = same[-1]
    return line | {
        "cpu_epoch_seconds": cpu["epoch_seconds"],
        "cpu_device": cpu["device"],
        "speedup_vs_cpu": round(cpu["epoch_seconds"] / line["epoch_seconds"], 2),
        "cpu_test_acc": cpu["test_acc"],
        "acc_diff_pt": round(100 * (line["test_acc"] - cpu["test_acc"]), 3),
    }


def main() -> None:
    """Run every configuration and print (and append to ``--out``) one JSON line each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=("cpu", "cuda"))
    parser.add_argument(
        "--configs",
        default="1:0,1:2,1:2:fp32:device,4:2,4:2:int8:device",
        help="comma list of PARTS:PREFETCH[:CODEC[:ROWS]]",
    )
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--num-nodes", type=int, default=1 << 20)
    parser.add_argument("--threads", type=int, default=min(8, os.cpu_count() or 1))
    parser.add_argument("--work", type=Path, default=Path("/tmp/gnnsys-gpu-train"))
    parser.add_argument("--reference", type=Path, help="JSON lines of a --device cpu run")
    parser.add_argument("--out", type=Path, help="also append the lines to this file")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    args.device_name = (
        torch.cuda.get_device_name() if args.device == "cuda" else f"cpu x{os.cpu_count()}"
    )
    reference = []
    if args.reference is not None and args.reference.exists():
        reference = [json.loads(x) for x in args.reference.read_text().splitlines() if x.strip()]
    lines = []
    for config in args.configs.split(","):
        line = compare(run(args, config), reference)
        lines.append(line)
        print(json.dumps(line), flush=True)
        if args.out is not None:
            with args.out.open("a") as f:
                f.write(json.dumps(line) + "\n")
    busy = {line["config"]: line["gpu_busy"] for line in lines}
    summary = {"bench": "gpu_train_summary", "device": args.device_name, "gpu_busy": busy}
    summary["epoch_seconds"] = {line["config"]: line["epoch_seconds"] for line in lines}
    summary["median_epoch_seconds"] = statistics.median(x["epoch_seconds"] for x in lines)
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
