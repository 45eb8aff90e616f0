"""Your PyG model and loop under Ray Train's ``TorchTrainer``, checkpointed every epoch.

Partition once, then run (on one machine, or with ``--address`` on an existing Ray cluster
whose nodes all see the store)::

    gnnsys partition planetoid:cora --root ../shared/datasets --parts 2 --out /tmp/cora2
    python examples/dist_train_ray.py --store /tmp/cora2 --storage /tmp/ray-results

Each Ray Train worker is one rank of the ``torch.distributed`` group that ``TorchTrainer``
builds, training PyG's ``GraphSAGE`` under DDP on ``gnnsys.distributed.DistNeighborLoader``.
At the end of every epoch each rank reports its metrics and rank 0 a ``ray.train.Checkpoint``
(model and optimizer state, ``torch.save`` of tensors only, read with ``weights_only=True``).
A rank that dies is restarted by ``FailureConfig(max_failures=...)``: the group resumes from the
last checkpoint, and since epoch ``e``'s batches depend only on ``(seed, rank, e)`` the run
finishes with the metrics of a run without the failure. ``--kill-rank R --kill-epoch E`` makes
rank ``R`` exit in the middle of epoch ``E`` once, to show it.

Prints one JSON line with the final metrics.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812  (PyG's spelling)


def train_loop(config: dict[str, Any]) -> None:
    """One rank: resume from the last checkpoint, train, report and checkpoint every epoch."""
    import ray.train
    from torch import distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch_geometric.nn.models import GraphSAGE

    from gnnsys.distributed import DistNeighborLoader, classification_metrics

    rank = dist.get_rank()
    common = {"num_neighbors": config["fanouts"], "batch_size": config["batch_size"]}
    train = DistNeighborLoader(config["store"], shuffle=True, seed=config["seed"], **common)
    test = DistNeighborLoader(config["store"], input_nodes="test", **common)
    torch.manual_seed(config["seed"])
    net = GraphSAGE(train.num_features, config["hidden"], num_layers=len(config["fanouts"]),
                    out_channels=train.num_classes)  # fmt: skip
    opt = torch.optim.Adam(net.parameters(), lr=config["lr"])
    start = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:  # a restart: every rank resumes from rank 0's last epoch
        with checkpoint.as_directory() as folder:
            state = torch.load(Path(folder) / "state.pt", weights_only=True)
        net.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = int(state["epoch"]) + 1
    model = DistributedDataParallel(net)
    kill = config.get("kill")  # (rank, epoch, marker file): exit once, mid-epoch
    for epoch in range(start, config["epochs"]):
        train.set_epoch(epoch)
        model.train()
        total = 0.0
        for b, batch in enumerate(train):
            if kill and rank == kill[0] and epoch == kill[1] and b == len(train) // 2:
                if not os.path.exists(kill[2]):
                    Path(kill[2]).touch()
                    os._exit(1)  # a crashed rank: no clean shutdown
            opt.zero_grad()
            logits = model(batch.x, batch.edge_index)[: batch.batch_size]
            loss = F.cross_entropy(logits, batch.y)
            loss.backward()
            opt.step()
            total += loss.item()
        model.eval()
        ys, preds = [], []
        with torch.no_grad():
            for batch in test:
                ys.append(batch.y)
                preds.append(model(batch.x, batch.edge_index)[: batch.batch_size].argmax(-1))
        metrics = classification_metrics(torch.cat(ys), torch.cat(preds), train.num_classes)
        metrics.update(epoch=epoch, loss=total / len(train))
        with tempfile.TemporaryDirectory() as folder:
            saved = None
            if rank == 0:
                state = {"model": net.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch}
                torch.save(state, Path(folder) / "state.pt")
                saved = ray.train.Checkpoint.from_directory(folder)
            ray.train.report(metrics, checkpoint=saved)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Fit with ``TorchTrainer`` on ``args.workers`` ranks; the last reported metrics."""
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    config: dict[str, Any] = {
        "store": str(Path(args.store).resolve()),
        "fanouts": [int(f) for f in args.fanouts.split(",")],
        "batch_size": args.batch_size, "hidden": args.hidden, "lr": args.lr,
        "epochs": args.epochs, "seed": args.seed,
    }  # fmt: skip
    if args.kill_rank is not None:
        marker = Path(args.storage) / f"{args.name}.killed"
        config["kill"] = (args.kill_rank, args.kill_epoch, str(marker))
    trainer = TorchTrainer(
        train_loop,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=args.workers, resources_per_worker={"CPU": 1}),
        run_config=RunConfig(
            name=args.name,
            storage_path=str(Path(args.storage).resolve()),
            failure_config=FailureConfig(max_failures=args.max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=2),
        ),
    )
    result = trainer.fit()
    return dict(result.metrics or {})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--store", required=True, help="directory written by `gnnsys partition`")
    p.add_argument("--storage", required=True, help="where Ray Train keeps checkpoints")
    p.add_argument("--name", default="gnnsys-ray-train")
    p.add_argument("--workers", type=int, default=2, help="ranks (the store's part count)")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--fanouts", default="10,5")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-failures", type=int, default=2)
    p.add_argument("--kill-rank", type=int, default=None, help="exit this rank once (a demo)")
    p.add_argument("--kill-epoch", type=int, default=1)
    p.add_argument("--address", default=None, help="an existing Ray cluster (default: local)")
    args = p.parse_args()
    import ray

    ray.init(address=args.address or "local", include_dashboard=False, log_to_driver=False)
    try:
        print(json.dumps(run(args)), flush=True)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
