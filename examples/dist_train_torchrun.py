"""Your PyG model and your training loop on a gnnsys partition store, one rank per part.

Partition once, then launch one process per part with ``torchrun``::

    gnnsys partition planetoid:cora --root ../shared/datasets --parts 2 --out /tmp/cora2
    torchrun --nproc-per-node 2 examples/dist_train_torchrun.py --store /tmp/cora2

The model is PyG's own ``GraphSAGE``, wrapped in ``DistributedDataParallel``; the batches come
from ``gnnsys.distributed.DistNeighborLoader`` (each rank's seeds, halo rows from their owners
through the halo cache and codec). The loop is plain PyTorch. After training, each rank
evaluates its own validation and test nodes (with every neighbour unless ``--eval-fanouts``
says otherwise) and
``classification_metrics`` combines them into the exact accuracy and macro-F1 over all nodes.

Rank 0 prints one JSON line per epoch and a final line with the metrics.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F  # noqa: N812  (PyG's spelling)
from torch import distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn.models import GraphSAGE

from gnnsys.distributed import DistNeighborLoader, classification_metrics


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--store", required=True, help="directory written by `gnnsys partition`")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=128, help="seeds per batch per rank")
    p.add_argument("--fanouts", default="10,5", help="neighbors per hop, seed hop first")
    p.add_argument(
        "--eval-fanouts",
        default=None,
        help="neighbors per hop when evaluating (default: all, -1 per hop: exact, as gnnsys "
        "train's layer-wise evaluation; give e.g. 25,10 on graphs too large for that)",
    )
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--codec", default="fp32", help="halo rows: fp32, fp16, bf16, int8, int4")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


@torch.no_grad()
def evaluate(model: torch.nn.Module, loader: DistNeighborLoader, classes: int) -> dict:
    model.eval()
    ys, preds = [], []
    for batch in loader:
        logits = model(batch.x, batch.edge_index)[: batch.batch_size]
        ys.append(batch.y)
        preds.append(logits.argmax(-1))
    return classification_metrics(torch.cat(ys), torch.cat(preds), classes)


def main() -> None:
    args = parse()
    dist.init_process_group("gloo")  # torchrun sets RANK, WORLD_SIZE and the master address
    rank = dist.get_rank()
    fanouts = [int(f) for f in args.fanouts.split(",")]
    eval_fanouts = [-1] * len(fanouts)
    if args.eval_fanouts:
        eval_fanouts = [int(f) for f in args.eval_fanouts.split(",")]
    common = {"batch_size": args.batch_size, "codec": args.codec, "seed": args.seed}
    train = DistNeighborLoader(args.store, fanouts, shuffle=True, **common)
    val = DistNeighborLoader(args.store, eval_fanouts, input_nodes="val", **common)
    test = DistNeighborLoader(args.store, eval_fanouts, input_nodes="test", **common)
    classes = train.num_classes
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    model = DistributedDataParallel(
        GraphSAGE(train.num_features, args.hidden, num_layers=len(fanouts), out_channels=classes)
    )
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    for epoch in range(args.epochs):
        model.train()
        start, total, seen = time.perf_counter(), 0.0, 0
        for batch in train:  # len(train) batches on every rank: no rank waits at the last step
            opt.zero_grad()
            logits = model(batch.x, batch.edge_index)[: batch.batch_size]
            loss = F.cross_entropy(logits, batch.y, reduction="sum") / max(1, batch.batch_size)
            loss.backward()
            opt.step()
            total += loss.item() * batch.batch_size
            seen += batch.batch_size
        metrics = evaluate(model, val, classes)
        if rank == 0:
            line = {"epoch": epoch, "loss": total / max(1, seen), "val_acc": metrics["acc"]}
            print(json.dumps({**line, "seconds": time.perf_counter() - start}), flush=True)
    final = {"val": evaluate(model, val, classes), "test": evaluate(model, test, classes)}
    if rank == 0:
        print(json.dumps({"final": final}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
