"""Sampler throughput on synthetic:rmat (1M nodes, ~20M edges) against DGL 2.1's C++ sampler.

Prints JSON lines: one per (system, threads, round) measurement, then one summary per thread
count with the best-of-rounds figures and the gnnsys/DGL ratios. Rounds alternate gnnsys and DGL
so that load from other processes hits both sides alike; each line records the 1-minute load
average. At ``threads=T`` both sides get ``torch.set_num_threads(T)``. gnnsys runs two ways:

* ``mode="split"``: one ``sample`` call at a time, split over ``Config(num_threads=T)``
  threads (DGL's way: OpenMP inside one batch);
* ``mode="batches"``: ``NeighborSampler.sample_batches(num_workers=T)``, ``T`` whole batches
  at once, one thread each (what ``NeighborLoader(num_workers=T)`` does; PyG's and DGL's
  loaders also parallelise over batches with ``num_workers``). At ``T=1`` it is the same
  single thread plus one hand-off per batch, so it only runs for ``T > 1``.

The summary gives the ratio against DGL for each mode.

DGL cannot import next to torch 2.13, so it runs in its own virtualenv
(``../shared/baselines/setup-dgl-venv.sh DIR``) through ``../shared/baselines/dgl_sampler.py``;
without it the script prints gnnsys's figures and a ``"dgl": "unavailable"`` line.

Semantics differ slightly, and the output says so: gnnsys (like PyG) samples each node once, at the
hop where it is first reached; DGL's blocks resample every destination of every layer (seeds
included), so DGL draws more edges per seed. Seeds/s and sampled edges/s are both reported.

Usage::

    python benchmarks/sampler.py [--graph rmat.npz] [--dgl-python /work/dglvenv/bin/python]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from gnnsys.sampler import CSRNeighborSource, NeighborSampler, batch_seed

BASELINES = Path(__file__).resolve().parents[2] / "shared" / "baselines"


def load_graph(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """CSR arrays from ``path``, writing it with the baseline generator first if missing."""
    if not path.exists():
        try:
            from gnnsys.datasets.synthetic import GENERATORS

            graph = GENERATORS["rmat"](num_nodes=1 << 20, avg_degree=20.0, num_features=0, seed=0)
            # int64 ids: DGL's script builds its CSC straight from these arrays.
            np.savez(path, indptr=graph.indptr, indices=graph.indices.astype(np.int64))
        except (ImportError, KeyError):  # before synthetic:rmat landed: the baseline generator
            cmd = [sys.executable, str(BASELINES / "make_rmat.py"), str(path)]
            subprocess.run(cmd, check=True)
    z = np.load(path)
    return z["indptr"].astype(np.int64), z["indices"]


def run_gnnsys(
    indptr: np.ndarray, indices: np.ndarray, args: argparse.Namespace, threads: int, mode: str
) -> dict[str, object]:
    """Time ``args.batches`` batches after warm-up batches, the seeds DGL's script uses."""
    torch.set_num_threads(threads)
    ids = indices.astype(np.int32) if indptr.shape[0] - 1 < 2**31 else indices
    source = CSRNeighborSource(indptr, ids)
    fanouts = tuple(int(f) for f in args.fanouts.split(","))
    split = threads if mode == "split" else 1
    sampler = NeighborSampler(
        NeighborSampler.Config(fanouts=fanouts, num_threads=split), source=source
    )
    num_nodes = indptr.shape[0] - 1
    gen = torch.Generator().manual_seed(args.seed)
    warm = 2 * threads + 1  # every worker's id table is made and touched before timing
    batches = [
        torch.randperm(num_nodes, generator=gen)[: args.batch_size]
        for _ in range(args.batches + warm)
    ]

    def requests(first: int, last: int, epoch: int) -> list[tuple[torch.Tensor, int]]:
        return [(batches[i], batch_seed(args.seed, epoch, i - first)) for i in range(first, last)]

    def run(reqs: list[tuple[torch.Tensor, int]]) -> int:
        if mode == "split":
            subs = (sampler.sample(seeds, seed=s) for seeds, s in reqs)
        else:
            subs = sampler.sample_batches(reqs, num_workers=threads)
        return sum(sum(sub.num_sampled_edges) for sub in subs)

    run(requests(0, warm, 1))
    start = time.perf_counter()
    edges = run(requests(warm, warm + args.batches, 0))
    seconds = time.perf_counter() - start
    return {
        "system": "gnnsys",
        "mode": mode,
        "torch": torch.__version__,
        "threads": threads,
        "nodes": num_nodes,
        "edges": int(indptr[-1]),
        "fanouts": list(fanouts),
        "batch_size": args.batch_size,
        "batches": args.batches,
        "seconds": seconds,
        "seeds_per_s": args.batches * args.batch_size / seconds,
        "sampled_edges_per_s": edges / seconds,
        "load_avg_1m": os.getloadavg()[0],  # other users of the shared cores, at the end
    }


def run_dgl(graph: Path, args: argparse.Namespace, threads: int) -> dict[str, object] | None:
    """DGL's figures from its own virtualenv, or ``None`` when it is not set up."""
    if not Path(args.dgl_python).exists():
        return None
    cmd = [args.dgl_python, str(BASELINES / "dgl_sampler.py"), str(graph)]
    cmd += ["--fanouts", args.fanouts, "--batch-size", str(args.batch_size)]
    cmd += ["--batches", str(args.batches), "--threads", str(threads), "--seed", str(args.seed)]
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    result["load_avg_1m"] = os.getloadavg()[0]
    return result


def summarize(rows: list[dict[str, object]], threads: int, mode: str) -> dict[str, object]:
    """Best-of-rounds figures of one gnnsys mode and DGL, and the gnnsys / DGL ratios."""

    def best(system: str, key: str) -> float | None:
        vals = [
            float(r[key])  # type: ignore[arg-type]
            for r in rows
            if str(r["system"]).startswith(system) and r.get("mode", mode) == mode
        ]
        return max(vals) if vals else None

    out: dict[str, object] = {"summary": "sampler", "threads": threads, "mode": mode}
    for key in ("seeds_per_s", "sampled_edges_per_s"):
        ours, dgl = best("gnnsys", key), best("dgl", key)
        out[f"gnnsys_{key}"] = ours
        out[f"dgl_{key}"] = dgl
        out[f"ratio_{key}"] = None if ours is None or dgl is None else ours / dgl
    seeds = best("gnnsys", "seeds_per_s")
    edges = best("gnnsys", "sampled_edges_per_s")
    out["note"] = "best of rounds; gnnsys samples each node once (PyG), DGL resamples per layer"
    out["gnnsys_edges_per_seed"] = None if not seeds or not edges else edges / seeds
    return out


def main() -> None:
    """Parse flags, run the alternating rounds, print JSON lines."""
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--graph",
        type=Path,
        default=Path("/tmp/gnnsys-synthetic-rmat.npz"),
        help="CSR .npz; written from synthetic:rmat (1M nodes, ~20M edges) if missing",
    )
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--batches", type=int, default=50)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dgl-python", default="/work/dglvenv/bin/python")
    args = p.parse_args()
    indptr, indices = load_graph(args.graph)
    for threads in (int(t) for t in args.threads.split(",")):
        modes = ["split", "batches"] if threads > 1 else ["split"]
        rows: list[dict[str, object]] = []
        for round_index in range(args.rounds):
            measured = [run_gnnsys(indptr, indices, args, threads, mode) for mode in modes]
            for row in [*measured, run_dgl(args.graph, args, threads)]:
                if row is None:
                    print(json.dumps({"system": "dgl", "threads": threads, "dgl": "unavailable"}))
                    continue
                row["round"] = round_index
                rows.append(row)
                print(json.dumps(row), flush=True)
        for mode in modes:
            print(json.dumps(summarize(rows, threads, mode)), flush=True)


if __name__ == "__main__":
    main()
