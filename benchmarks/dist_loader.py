"""A user's PyG loop on ``DistNeighborLoader`` against ``gnnsys train``, same settings, in turn.

The graph is ``benchmarks/e2e_dgl.py``'s: synthetic:rmat with 2**20 nodes (F = 100), one store
per part count (written once under ``--work``). Each round runs, for every part count P:

* ``gnnsys train`` (SAGE 2 x 128, fanouts 15,10, global batch 1024, prefetch 2, no dropout, no
  evaluation): its median epoch after the first, from ``metrics.jsonl``, and its ranks' peak RSS;
* the user loop: ``torchrun --nproc-per-node P`` of this file's ``--rank`` mode, PyG's own
  ``GraphSAGE(hidden 128, 2 layers)`` under DDP on ``DistNeighborLoader`` (batch ``1024 / P``
  per rank, prefetch 2), Adam 0.01: its median epoch after the first and each rank's peak RSS.

Rows alternate within a round, so each ratio (``user / gnnsys``, goal <= 1.1 for time and memory)
pairs runs seconds apart on the same machine. Measure on a quiet machine. JSON lines out.

Usage::

    python benchmarks/dist_loader.py [--parts 1,2] [--rounds 2] [--epochs 3] [--work /tmp/e2e]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import e2e_dgl  # noqa: E402  (the graph, stores and gnnsys train runs are that benchmark's)


def layerwise_sage() -> type:
    """PyG's layer-wise ``SAGEConv`` idiom: layer ``l`` maps all its sources to its targets only.

    ``conv((x, x[:num_dst]), edge_index[:, :num_edges])`` (PyG's bipartite form, as its
    ``NeighborSampler`` examples wrote it), with the sizes from the batch's per-hop counts: layer
    ``l`` of ``L`` targets the seeds and the first ``L - l - 1`` hops, over those hops' edges.
    """
    import torch
    from torch_geometric.nn import SAGEConv

    class LayerwiseSAGE(torch.nn.Module):
        def __init__(self, in_dim: int, hidden: int, out_dim: int) -> None:
            super().__init__()
            self.convs = torch.nn.ModuleList([SAGEConv(in_dim, hidden), SAGEConv(hidden, out_dim)])

        def forward(self, x: Any, edge_index: Any, nodes: list[int], edges: list[int]) -> Any:
            layers = len(self.convs)
            for layer, conv in enumerate(self.convs):
                num_dst, num_edges = sum(nodes[: layers - layer]), sum(edges[: layers - layer])
                x = conv((x, x[:num_dst]), edge_index[:, :num_edges])
                x = x.relu() if layer < layers - 1 else x
            return x

    return LayerwiseSAGE


def rank_loop(args: argparse.Namespace) -> None:
    """One rank of the user loop: epoch seconds, loss, peak RSS (rank 0 prints all ranks')."""
    import torch
    import torch.nn.functional as F  # noqa: N812
    from torch import distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch_geometric.nn.models import GraphSAGE

    from gnnsys.distributed import DistNeighborLoader

    LayerwiseSAGE = layerwise_sage()  # noqa: N806  (a class)
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    layer0 = "owner" if args.model == "hop-trimmed-owner" else "rows"  # owners' partial sums
    loader = DistNeighborLoader(
        args.store, [15, 10], batch_size=1024 // world, shuffle=True, prefetch=2, layer0=layer0
    )
    torch.manual_seed(0)
    if args.model == "bipartite":
        net: torch.nn.Module = LayerwiseSAGE(loader.num_features, 128, loader.num_classes)
    else:
        net = GraphSAGE(loader.num_features, 128, num_layers=2, out_channels=loader.num_classes)
    if args.model.startswith("hop-trimmed"):  # PyG's GraphSAGE, each layer on the rows it needs
        from gnnsys.models.pyg_user import HopTrimmed

        net = HopTrimmed(net)
    model = DistributedDataParallel(net)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    seconds, losses = [], []
    for _ in range(args.epochs):
        start, total = time.perf_counter(), 0.0
        for batch in loader:
            opt.zero_grad()
            if args.model in ("bipartite", "hop-trimmed", "hop-trimmed-owner"):
                agg0 = {"agg0": batch.agg0} if layer0 != "rows" else {}
                out = model(batch.x, batch.edge_index, batch.num_sampled_nodes,
                            batch.num_sampled_edges, **agg0)[: batch.batch_size]  # fmt: skip
            elif args.model == "graphsage-trim":
                out = model(
                    batch.x, batch.edge_index,
                    num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                    num_sampled_edges_per_hop=batch.num_sampled_edges,
                )[: batch.batch_size]  # fmt: skip
            else:
                out = model(batch.x, batch.edge_index)[: batch.batch_size]
            loss = F.cross_entropy(out, batch.y)
            loss.backward()
            opt.step()
            total += loss.item()
        seconds.append(time.perf_counter() - start)
        losses.append(total / len(loader))
    got = loader.ledger.snapshot().bytes  # rows and partial sums received, per epoch
    received = (got["feature_response"] + got["partial_response"]) // max(1, args.epochs)
    rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, received])
    every = [torch.zeros_like(rss) for _ in range(world)]
    dist.all_gather(every, rss)
    if dist.get_rank() == 0:
        line = {"seconds": seconds, "loss": losses, "num_batches": len(loader)}
        line["received_bytes_per_epoch"] = [int(r[1]) for r in every]
        print(json.dumps({**line, "peak_rss_bytes": [int(r[0]) for r in every]}), flush=True)
    dist.destroy_process_group()


USER_THREADS = "reserve"
"""``--user-threads``: ``reserve`` (one core per rank left to the stages) or ``all``."""


def run_user(work: Path, parts: int, epochs: int, model: str) -> dict[str, Any]:
    store = e2e_dgl.write_store(work, parts)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(parts)]
    cmd += ["--master-port", str(_free_port()), __file__, "--rank", "--store", str(store)]
    cmd += ["--epochs", str(epochs), "--model", model]
    # gnnsys train's rule (gnnsys.train.threads): the cores per rank, one left to the loader's
    # stage threads (prefetch > 0); --user-threads all gives torch every core per rank
    cores = max(1, (os.cpu_count() or 2) // parts)
    threads = cores if USER_THREADS == "all" else max(1, cores - 1)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    start = time.perf_counter()
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    got = json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1])
    secs = got["seconds"]
    return {
        "system": "user-loop",
        "model": model,
        "parts": parts,
        "torch_threads": threads,
        "epoch_seconds": round(statistics.median(secs[1:] if len(secs) > 1 else secs), 3),
        "loss": round(got["loss"][-1], 4),
        "num_batches": got["num_batches"],
        "peak_rss_bytes": got["peak_rss_bytes"],
        "received_bytes_per_epoch": got.get("received_bytes_per_epoch"),
        "wall_seconds": round(wall, 1),
    }


def run_train(work: Path, parts: int, epochs: int, tag: str) -> dict[str, Any]:
    row = e2e_dgl.run_gnnsys(work, f"{parts}:2", epochs, tag)
    out = work / f"run-{parts}-2-{tag}"
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    row["peak_rss_bytes"] = lines[-1].get("peak_rss_bytes")
    row["system"] = "gnnsys-train"
    return row


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def accuracy(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Cora, 2 METIS parts, the same recipe: the user loop's and gnnsys train's test accuracy.

    Recipe: SAGE 2 x 64, fanouts 10,5, batch ``--acc-batch`` per rank (default 16: Cora's 140
    train nodes make 5 steps an epoch), Adam 0.01, no dropout, ``--acc-epochs`` (default 50); the
    last epoch's test accuracy (gnnsys train evaluates layer-wise with every neighbour, the user
    loop on DistNeighborLoader batches with every neighbour: both exact), for ``--acc-seeds``
    seeds (default 3).
    """
    work = Path(args.work) / "cora"
    store = work / "store-p2"
    root = ["--root", args.root] if args.root else []
    if not (store / "manifest.json").exists():
        cmd = [*e2e_dgl.GNNSYS, "partition", "planetoid:cora", *root, "--parts", "2"]
        subprocess.run([*cmd, "--method", "metis", "--out", str(store)], check=True,
                       stdout=subprocess.DEVNULL)  # fmt: skip
    example = Path(__file__).resolve().parents[1] / "examples" / "dist_train_torchrun.py"
    rows = []
    epochs, batch = str(args.acc_epochs), str(args.acc_batch)
    for seed in range(args.acc_seeds):
        out = work / f"train-{seed}"
        cmd = [*e2e_dgl.GNNSYS, "train", "--store", str(store), "--parts", "2", "--out", str(out)]
        cmd += ["--epochs", epochs, "--hidden", "64", "--fanouts", "10,5", "--batch-size", batch]
        cmd += ["--lr", "0.01", "--dropout", "0", "--seed", str(seed), "--no-progress"]
        cmd += ["--eval-every", epochs]
        shutil.rmtree(out, ignore_errors=True)  # a fresh run directory per seed
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        last = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
        cmd += [
            "--master-port",
            str(_free_port()),
            str(example),
            "--store",
            str(store),
            "--epochs",
            epochs,
        ]
        cmd += ["--hidden", "64", "--fanouts", "10,5", "--batch-size", batch, "--seed", str(seed)]
        done = subprocess.run(cmd, check=True, capture_output=True, text=True)
        final = json.loads(done.stdout.strip().splitlines()[-1])["final"]
        row = {"seed": seed, "gnnsys_train_test_acc": last.get("test_acc"),
               "user_loop_test_acc": final["test"]["acc"]}  # fmt: skip
        rows.append(row)
        print(json.dumps(row), flush=True)
    gap = [r["user_loop_test_acc"] - r["gnnsys_train_test_acc"] for r in rows]
    summary = {
        "summary": "Cora 2 METIS parts: user loop minus gnnsys train, test accuracy",
        "mean_gap_points": round(100 * statistics.mean(gap), 2),
        "standard_error_points": (
            round(100 * statistics.stdev(gap) / len(gap) ** 0.5, 2) if len(gap) > 1 else None
        ),
        "seeds": len(gap),
        "goal": "within 0.5 points",
        "recipe": {"epochs": args.acc_epochs, "batch_per_rank": args.acc_batch},
    }
    print(json.dumps(summary), flush=True)
    return [*rows, summary]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rank", action="store_true", help="(internal) run one rank of the user loop")
    p.add_argument("--store", help="(with --rank) the store")
    p.add_argument("--model", default="graphsage-trim", help="(with --rank) the user's model")
    p.add_argument("--models", default="graphsage-trim,bipartite",
                   help="user models: graphsage, graphsage-trim, bipartite, hop-trimmed "
                   "(PyG's GraphSAGE in gnnsys.models.pyg_user.HopTrimmed), hop-trimmed-owner "
                   "(on layer0=owner batches: partial sums in agg0)")  # fmt: skip
    p.add_argument("--parts", default="1,2")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--work", default="/tmp/e2e")
    p.add_argument("--out", default=None, help="also append the lines to this file")
    p.add_argument("--accuracy", action="store_true", help="only the Cora accuracy rows")
    p.add_argument("--root", default=None, help="(--accuracy) where planetoid:cora lives")
    p.add_argument("--acc-epochs", type=int, default=50, help="(--accuracy) epochs per run")
    p.add_argument("--acc-batch", type=int, default=16, help="(--accuracy) seeds per rank")
    p.add_argument("--acc-seeds", type=int, default=3, help="(--accuracy) seeds 0..N-1")
    p.add_argument("--dgl-python", default="/work/dglvenv/bin/python",
                   help="DGL 2.1's virtualenv (../shared/baselines/setup-dgl-venv.sh DIR); "
                   "without it DGL's rows say unavailable")  # fmt: skip
    p.add_argument("--user-threads", choices=("reserve", "all"), default="reserve",
                   help="torch threads of a user rank: its cores less one for the loader's "
                   "stage threads (gnnsys train's rule), or all its cores")  # fmt: skip
    args = p.parse_args()
    global USER_THREADS
    USER_THREADS = args.user_threads
    if args.rank:
        rank_loop(args)
        return
    if args.accuracy:
        rows = accuracy(args)
        if args.out:
            with open(args.out, "a") as f:
                f.writelines(json.dumps(row) + "\n" for row in rows)
        return
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    parts = [int(v) for v in args.parts.split(",")]
    models = args.models.split(",")
    ratios = {(q, m): {"time": [], "rss": []} for q in parts for m in models}
    rows = []
    dgl_ratio: dict[tuple[int, str], list[float]] = {(q, m): [] for q in parts for m in models}
    graph = work / "rmat-2p20.npz"
    if Path(args.dgl_python).exists():
        e2e_dgl.write_graph(graph)
    for r in range(args.rounds):
        dgl = e2e_dgl.run_dgl(args.dgl_python, graph, args.epochs, threads=2)
        rows.append({**dgl, "round": r})
        print(json.dumps(rows[-1]), flush=True)
        for q in parts:
            ours = run_train(work, q, args.epochs, f"r{r}")
            rows.append({**ours, "round": r})
            print(json.dumps(rows[-1]), flush=True)
            for m in models:
                user = run_user(work, q, args.epochs, m)
                rows.append({**user, "round": r})
                print(json.dumps(rows[-1]), flush=True)
                ratios[q, m]["time"].append(user["epoch_seconds"] / ours["epoch_seconds"])
                if "epoch_seconds" in dgl:  # DGL's single process over the user loop
                    dgl_ratio[q, m].append(dgl["epoch_seconds"] / user["epoch_seconds"])
                if ours.get("peak_rss_bytes"):
                    rss = max(user["peak_rss_bytes"]) / max(ours["peak_rss_bytes"])
                    ratios[q, m]["rss"].append(rss)
    for (q, m), got in ratios.items():
        summary = {
            "summary": f"user loop ({m}) / gnnsys train, P = {q}",
            "epoch_ratio": [round(v, 3) for v in got["time"]],
            "peak_rss_ratio": [round(v, 3) for v in got["rss"]],
            "goal": "<= 1.1 each",
        }
        rows.append(summary)
        print(json.dumps(summary), flush=True)
        if dgl_ratio[q, m]:
            line = {
                "summary": f"DGL 2.1 single process (2 threads) / user loop ({m}), P = {q}",
                "epoch_ratio": [round(v, 3) for v in dgl_ratio[q, m]],
                "note": "above 1: the user loop's epoch is shorter",
            }
            rows.append(line)
            print(json.dumps(line), flush=True)
    if args.out:
        with open(args.out, "a") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)


if __name__ == "__main__":
    main()
