"""Sampler throughput on synthetic:rmat (1M nodes, ~20M edges) against DGL 2.1's C++ sampler.

Prints JSON lines: one per (system, threads, round) measurement, then one summary per thread
count with the best-of-rounds figures and the gnnsys/DGL ratios. Rounds alternate gnnsys and DGL
so that load from other processes hits both sides alike; each line records the 1-minute load
average. At ``threads=T`` both sides get ``torch.set_num_threads(T)``, and gnnsys's sampler
``NeighborSampler.Config(num_threads=T)``.

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
    indptr: np.ndarray, indices: np.ndarray, args: argparse.Namespace, threads: int
) -> dict[str, object]:
    """Time ``args.batches`` batches after 3 warm-up batches, the seeds DGL's script uses."""
    torch.set_num_threads(threads)
    ids = indices.astype(np.int32) if indptr.shape[0] - 1 < 2**31 else indices
    source = CSRNeighborSource(indptr, ids)
    fanouts = tuple(int(f) for f in args.fanouts.split(","))
    config = NeighborSampler.Config(fanouts=fanouts, num_threads=threads)
    sampler = NeighborSampler(config, source=source)
    num_nodes = indptr.shape[0] - 1
    gen = torch.Generator().manual_seed(args.seed)
    batches = [
        torch.randperm(num_nodes, generator=gen)[: args.batch_size] for _ in range(args.batches + 3)
    ]
    for i, seeds in enumerate(batches[:3]):
        sampler.sample(seeds, seed=batch_seed(args.seed, 1, i))
    edges = 0
    start = time.perf_counter()
    for i, seeds in enumerate(batches[3:]):
        edges += sum(sampler.sample(seeds, seed=batch_seed(args.seed, 0, i)).num_sampled_edges)
    seconds = time.perf_counter() - start
    return {
        "system": "gnnsys",
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


def summarize(rows: list[dict[str, object]], threads: int) -> dict[str, object]:
    """Best-of-rounds figures per system and the gnnsys / DGL ratios."""

    def best(system: str, key: str) -> float | None:
        vals = [float(r[key]) for r in rows if str(r["system"]).startswith(system)]  # type: ignore[arg-type]
        return max(vals) if vals else None

    out: dict[str, object] = {"summary": "sampler", "threads": threads}
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
        rows: list[dict[str, object]] = []
        for round_index in range(args.rounds):
            for row in (
                run_gnnsys(indptr, indices, args, threads),
                run_dgl(args.graph, args, threads),
            ):
                if row is None:
                    print(json.dumps({"system": "dgl", "threads": threads, "dgl": "unavailable"}))
                    continue
                row["round"] = round_index
                rows.append(row)
                print(json.dumps(row), flush=True)
        print(json.dumps(summarize(rows, threads)), flush=True)


if __name__ == "__main__":
    main()
