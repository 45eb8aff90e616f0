"""Distributed training cost: epoch time, bytes per epoch and peak RSS per worker, P = 1, 2, 4.

Runs ``gnnsys.train.control.run.train`` on synthetic:sbm (100k nodes) for each P in one Ray
instance and prints one JSON line per P (the last epoch's figures, so actor start-up and first-touch
page faults are excluded) plus a ratio line against P=1 measured in the same run. ``--rmat`` instead
trains the products-size synthetic:rmat graph (2.4M nodes) with 4 workers for one epoch.

``--store DIR`` trains on a store written beforehand (``gnnsys partition``), so no process
ever loads the whole graph, and adds the memory account of runtime v2: the driver's peak RSS,
and beside every worker's measured peak its budget ``shard files + 1-hop halo rows + model``
(parameters, gradients and Adam's two moments). ``--check-eval`` then rebuilds the whole graph
in a child process and evaluates the final weights there the old way (one full-graph block on
one process), printing both accuracies. ``--cost-table`` writes stores of 0.1 M and 1 M R-MAT
nodes (in child processes) and prints the same line for each, next to the ``--store`` run.
With ``--store``, ``/proc`` is sampled during the run (``memprobe.py``: per-worker anonymous,
file-backed and object-store peaks, and the peak less an idle worker process), and
``--cap-mib N`` runs it with every process under its own memory cgroup of N MiB
(``memcap.py``; root, cgroup v1), printing each group's peak, limit hits and OOM kills.

Usage (heavy: wrap in the shared lock)::

    flock /tmp/gnnsys-heavy.lock python benchmarks/train.py [--parts 1,2,4] [--epochs 2]
    flock /tmp/gnnsys-heavy.lock python benchmarks/train.py --rmat
    python benchmarks/train.py --store /work/stores/products-p4 --parts 4 --check-eval
    python benchmarks/train.py --store /work/stores/products-p4 --parts 4 --hidden 128 \
        --cap-mib 1400 --drop-caches
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from memprobe import MemProbe

from gnnsys.config import RunConfig
from gnnsys.sampler import NeighborSampler
from gnnsys.store.layout import shard_file
from gnnsys.store.source import DataConfig
from gnnsys.train.control.run import train


def _line(cfg: RunConfig, result: Any, wall: float) -> dict[str, Any]:
    last = result.history[-1]
    return {
        "bench": "train",
        "dataset": result.summary["partition"]["dataset"],
        "parts": cfg.cluster.parts,
        "topology": result.summary["config"]["cluster"]["topology"],
        "partitioner": result.summary["partition"]["strategy"],
        "epochs": len(result.history),
        "epoch_seconds": round(last["seconds"]["total"], 3),
        "seconds_split": {k: round(v, 3) for k, v in last["seconds"].items()},
        "bytes_per_epoch": last["bytes"],
        "total_bytes_per_epoch": sum(last["bytes"].values()),
        "messages_per_epoch": last["messages"],
        "peak_rss_mib_per_worker": [round(b / 2**20, 1) for b in last["peak_rss_bytes"]],
        "driver_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "test_acc": round(last["test_acc"], 4),
        "eval_seconds": round(last["seconds"]["eval"], 3),
        "eval_bytes": sum(last["eval"]["bytes"].values()),
        "eval_halo_rows": last["eval"]["halo_rows"],
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


def _halo_rows(store: Path, part: int) -> int:
    """1-hop halo nodes of one part (the rows evaluation holds), from its index file."""
    import numpy as np

    col = np.load(store / f"part-{part}" / "indices_local.npy", mmap_mode="r")
    owned = int(np.load(store / shard_file(part, "owned_gid"), mmap_mode="r").shape[0])
    halo = np.asarray(col[col >= owned])
    return int(np.unique(halo).shape[0])


def _model_bytes(cfg: RunConfig, num_features: int, num_classes: int) -> int:
    """Parameters + gradients + Adam's two moments, float32."""
    from gnnsys.models import build_model

    net = build_model(cfg.model, num_features, num_classes, len(cfg.sampler.fanouts))
    return 4 * 4 * sum(p.numel() for p in net.parameters())


def memory_account(cfg: RunConfig, store: Path, line: dict[str, Any]) -> dict[str, Any]:
    """Each worker's budget (shard + halo + model bytes) beside its measured peak RSS."""
    import numpy as np

    from gnnsys.store.info import store_info

    info = store_info(store)
    model = _model_bytes(cfg, info.num_features, info.num_classes)
    rows = []
    for part, peak_mib in enumerate(line["peak_rss_mib_per_worker"]):
        shard = sum(f.stat().st_size for f in (store / f"part-{part}").iterdir())
        halo_rows = _halo_rows(store, part)
        halo = halo_rows * info.num_features * 4
        budget = shard + halo + model
        owned = int(np.load(store / shard_file(part, "owned_gid"), mmap_mode="r").shape[0])
        activations = (owned + halo_rows) * cfg.model.hidden * 4  # layer 1's two tables
        rows.append(
            {
                "part": part,
                "shard_mib": round(shard / 2**20, 1),
                "halo_mib": round(halo / 2**20, 1),
                "model_mib": round(model / 2**20, 1),
                "budget_mib": round(budget / 2**20, 1),
                "peak_rss_mib": peak_mib,
                "peak_over_budget": round(peak_mib * 2**20 / budget, 3),
                "activations_mib": round(activations / 2**20, 1),
                "peak_over_budget_plus_activations": round(
                    peak_mib * 2**20 / (budget + activations), 3
                ),
            }
        )
    whole = info.num_nodes * 8 + info.num_edges * 8 + info.num_nodes * info.num_features * 4
    return {
        "bench": "train_memory",
        "store": str(store),
        "num_nodes": info.num_nodes,
        "num_edges": info.num_edges,
        "whole_graph_csr_plus_features_mib": round(whole / 2**20, 1),
        "driver_peak_rss_mib": line["driver_peak_rss_mib"],
        "workers": rows,
    }


def _driver_side_accuracy(store: str, run_dir: str, model: Any, fanouts: int) -> dict[str, float]:
    """The old driver-side evaluation of a checkpoint (child process: it holds the graph)."""
    import numpy as np
    import torch

    from gnnsys.models import build_model
    from gnnsys.store.info import store_info
    from gnnsys.testing.reference import full_block, full_graph_logits
    from gnnsys.train.control.checkpoint import load_checkpoint
    from gnnsys.train.topology import assemble_graph

    torch.set_num_threads(2)
    graph = assemble_graph(store, with_data=True)
    info = store_info(store)
    net = build_model(model, info.num_features, info.num_classes, fanouts)
    ckpt = load_checkpoint(run_dir)
    assert ckpt is not None
    net.load_state_dict(ckpt.model_state)
    x = torch.from_numpy(np.asarray(graph.x, dtype=np.float32))
    block = full_block(graph.indptr, graph.indices, graph.num_nodes)
    pred = full_graph_logits(net, block, x).argmax(-1).numpy()
    out = {}
    for split in ("train", "val", "test"):
        mask = getattr(graph, f"{split}_mask")
        out[f"{split}_acc"] = float((pred[mask] == graph.y[mask]).mean())
    return out


def _idle_worker_mib() -> float:
    """RSS of an idle Ray actor that imported the trainer (Python + torch + Ray + gnnsys)."""
    import ray

    @ray.remote(num_cpus=0)
    class Idle:
        def rss(self) -> int:
            import gnnsys.train.worker  # noqa: F401  (what a TrainWorker imports)

            with open(f"/proc/{os.getpid()}/status") as f:
                line = next(x for x in f if x.startswith("VmRSS:"))
            return int(line.split()[1]) * 1024

    started = not ray.is_initialized()  # the run's instance is gone: start one, never attach
    if started:
        ray.init(num_cpus=1, include_dashboard=False, address="local")
    actor = Idle.remote()  # type: ignore[attr-defined]
    try:
        return round(ray.get(actor.rss.remote(), timeout=120) / 2**20, 1)
    finally:
        ray.kill(actor)
        if started:
            ray.shutdown()


def store_run(cfg: RunConfig, store: Path, out: Path, check_eval: bool) -> dict[str, Any]:
    """Train on a store written beforehand; print the run line and its memory account.

    ``/proc`` is sampled during the run (``memprobe.MemProbe``): each worker's peak anonymous,
    file-backed and object-store memory, and ``peak - idle``, where ``idle`` is an idle actor
    process that imported the trainer (the fixed cost of Python, torch and Ray).
    """
    cfg = replace(cfg, data=replace(cfg.data, store=str(store)))
    with MemProbe("ray::TrainWorker", str(store.resolve())) as probe:
        line = _run(cfg, out)
    _account(cfg, store, out, line, probe)
    if check_eval:
        _check_eval(cfg, store, out)
    return line


def capped_run(cfg: RunConfig, store: Path, out: Path, cap_mib: float, drop_caches: bool) -> None:
    """``store_run`` with every process under its own memory cap (``memcap.MemCap``)."""
    from memcap import MemCap

    cfg = replace(cfg, data=replace(cfg.data, store=str(store)))
    if drop_caches:  # every process's shard pages then count against its own cap
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3")
    with MemCap(int(cap_mib * 2**20)) as cap:
        cap.init_ray(num_cpus=max(os.cpu_count() or 1, int(cfg.cluster.parts * 1.5 + 1)))
        with MemProbe("ray::TrainWorker", str(store.resolve())) as probe:
            line = _run(cfg, out)
        _account(cfg, store, out, line, probe)
    groups = cap.report()
    print(json.dumps({"bench": "train_capped", "cap_mib": cap_mib, "groups": groups}), flush=True)


def _account(cfg: RunConfig, store: Path, out: Path, line: dict[str, Any], probe: MemProbe) -> None:
    """Print the memory account of a run; write the probe's samples beside the run."""
    account = memory_account(cfg, store, line)
    with open(out / "memory-series.jsonl", "w") as f:
        for t, pid, status in probe.series:
            f.write(json.dumps({"t": round(t, 2), "pid": pid, **status}) + "\n")
    idle = _idle_worker_mib()
    by_part: dict[int, dict[str, Any]] = {}
    for r in probe.peaks():  # a restarted rank has two processes: keep the larger
        if r["part"] not in by_part or r["rss_mib"] > by_part[r["part"]]["rss_mib"]:
            by_part[r["part"]] = r
    for row in account["workers"]:
        row["probe"] = by_part.get(row["part"])
        row["idle_worker_mib"] = idle
        row["peak_minus_idle_over_budget"] = round(
            (row["peak_rss_mib"] - idle) / row["budget_mib"], 3
        )
        row["peak_minus_idle_over_budget_plus_activations"] = round(
            (row["peak_rss_mib"] - idle) / (row["budget_mib"] + row["activations_mib"]), 3
        )
    print(json.dumps(account), flush=True)


def _check_eval(cfg: RunConfig, store: Path, out: Path) -> None:
    """Evaluate the final weights driver-side too (child process) and print both."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        ref = pool.submit(
            _driver_side_accuracy, str(store), str(out), cfg.model, len(cfg.sampler.fanouts)
        ).result()
    last = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    sharded = {k: last[k] for k in ref}
    print(json.dumps({"bench": "train_eval_check", "sharded": sharded, "driver_side": ref}))


def _store_cfg(parts: int, epochs: int, hidden: int) -> RunConfig:
    base = RunConfig()
    return replace(
        base,
        cluster=replace(base.cluster, parts=parts, topology="partitioned"),
        sampler=NeighborSampler.Config(fanouts=(15, 10)),
        model=replace(base.model, hidden=hidden),
        loop=replace(base.loop, epochs=epochs, progress=False, deadline_s=1200.0),
    )


def cost_table(cfg: RunConfig, out: Path) -> None:
    """Stores of 0.1 M and 1 M R-MAT nodes (written in child processes), one run each."""
    import subprocess
    import sys

    for n in (100_000, 1_000_000):
        store = out / f"rmat-{n}"
        if not (store / "manifest.json").exists():
            cmd = [sys.executable, "-m", "gnnsys", "partition", "synthetic:rmat"]
            cmd += ["-D", f"num_nodes={n}", "-D", f"num_edges={26 * n}", "-D", "num_features=100"]
            cmd += ["--parts", str(cfg.cluster.parts), "--method", "fennel", "--hops", "2"]
            subprocess.run([*cmd, "--out", str(store), "--json"], check=True)
        store_run(cfg, store, out / f"run-{n}", check_eval=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="1,2,4")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--topology", default="partitioned")
    parser.add_argument("--rmat", action="store_true", help="products-size R-MAT, 4 workers")
    parser.add_argument("--out", help="run directories (default: a temp dir)")
    parser.add_argument("--store", help="train on this store (written beforehand)")
    parser.add_argument("--hidden", type=int, default=256, help="hidden width with --store")
    parser.add_argument("--check-eval", action="store_true", help="also evaluate driver-side")
    parser.add_argument("--eval-halo-mb", type=float, default=0.0, help="with --store")
    parser.add_argument("--cost-table", action="store_true", help="0.1 M and 1 M stores too")
    parser.add_argument(
        "--cap-mib", type=float, default=0.0, help="with --store: cap every process (cgroups)"
    )
    parser.add_argument("--drop-caches", action="store_true", help="with --cap-mib (root)")
    parser.add_argument("--eval-message-mb", type=float, default=16.0, help="with --store")
    parser.add_argument("--eval-spill-mb", type=float, default=0.0, help="with --store")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gnnsys-bench-train-") as tmp:
        out = Path(args.out or tmp)
        if args.store or args.cost_table:
            cfg = _store_cfg(int(args.parts.split(",")[-1]), args.epochs, args.hidden)
            cfg = replace(
                cfg,
                eval=replace(
                    cfg.eval,
                    halo_mb=args.eval_halo_mb,
                    message_mb=args.eval_message_mb,
                    spill_mb=args.eval_spill_mb,
                ),
            )
            if args.cost_table:
                cost_table(cfg, out)
            if args.store and args.cap_mib:
                capped_run(
                    cfg, Path(args.store), out / "run-capped", args.cap_mib, args.drop_caches
                )
            elif args.store:
                store_run(cfg, Path(args.store), out / "run-store", args.check_eval)
        elif args.rmat:
            rmat_epoch(out)
        else:
            sbm_sweep([int(p) for p in args.parts.split(",")], args.epochs, args.topology, out)


if __name__ == "__main__":
    main()
