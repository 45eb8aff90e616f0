"""PyG's single-process SAGE link-prediction example, on a gnnsys split, with the OGB protocol.

The closest faithful equivalent of PyG's ``examples/link_pred.py`` with GraphSAGE in place of
GCN: a full-batch ``torch_geometric.nn.SAGEConv`` encoder (ReLU between layers), a dot-product
decoder, one fresh ``torch_geometric.utils.negative_sampling`` negative per train link each
epoch (PyG's example draws as many negatives as positives), ``BCEWithLogitsLoss`` over
positives and negatives, Adam. PyG's example splits with ``RandomLinkSplit`` and reports
ROC-AUC; here it trains on the split gnnsys uses (``gnnsys.datasets.link_split.edge_split``:
message passing over the training links only) and is scored by the same fixed negatives and
the same OGB ranks (``gnnsys.train.metrics``), so its MRR / Hits@K compare with gnnsys's
directly. Needs neither torch-sparse nor pyg-lib.

Run as ``python benchmarks/pyg_link_baseline.py planetoid:cora --root ../shared/datasets``.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from gnnsys.datasets import LinkSplit, LinkSplitConfig, load_link_split
from gnnsys.datasets.link_split import undirected_pairs
from gnnsys.train.metrics import link_metrics, link_ranks, link_sums


class SAGEEncoder(nn.Module):
    """``num_layers`` PyG ``SAGEConv`` (mean), ReLU and dropout between them."""

    def __init__(self, in_dim: int, hidden: int, num_layers: int, dropout: float) -> None:
        super().__init__()
        from torch_geometric.nn import SAGEConv

        dims = [in_dim] + [hidden] * num_layers
        self.convs = nn.ModuleList(SAGEConv(a, b) for a, b in zip(dims[:-1], dims[1:], strict=True))
        self.dropout = dropout

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = nn.functional.dropout(x.relu(), self.dropout, self.training)
        return x


def _metrics(h: Tensor, links_2K: np.ndarray, neg_KQ: np.ndarray) -> dict[str, float | None]:
    src, dst = torch.from_numpy(links_2K[0]), torch.from_numpy(links_2K[1])
    pos = (h[src] * h[dst]).sum(-1)
    ranks = []
    for lo in range(0, int(src.shape[0]), 256):
        neg = (h[src[lo : lo + 256]].unsqueeze(1) * h[torch.from_numpy(neg_KQ[lo : lo + 256])]).sum(
            -1
        )
        ranks.append(link_ranks(pos[lo : lo + 256].double().numpy(), neg.double().numpy()))
    return link_metrics(link_sums(np.concatenate(ranks)))


def run(
    split: LinkSplit,
    *,
    hidden: int,
    num_layers: int,
    epochs: int,
    lr: float,
    dropout: float,
    seed: int,
    eval_every: int = 1,
    negatives: str = "pairs",
) -> dict[str, Any]:
    """Train full-batch; the test metrics at the best validation MRR (checked every
    ``eval_every`` epochs and at the last, as gnnsys's ``EvalConfig.every``).

    ``negatives``: ``pairs`` (PyG's ``negative_sampling``: random pairs, true edges dropped; the
    example's) or ``source`` (gnnsys's: each train link's source with a uniform destination,
    unfiltered; a diagnostic).
    """
    if negatives not in ("pairs", "source"):
        raise ValueError(f"negatives={negatives!r}; choose 'pairs' or 'source'")
    from torch_geometric.utils import negative_sampling

    torch.manual_seed(seed)
    g = split.graph
    assert g.x is not None
    x = torch.from_numpy(np.asarray(g.x, dtype=np.float32))
    edge_index = torch.from_numpy(undirected_pairs(g))
    edge_index = torch.cat([edge_index, edge_index.flip(0)], dim=1)  # message passing, both ways
    train = torch.from_numpy(split.train_2E)
    model = SAGEEncoder(int(x.shape[1]), hidden, num_layers, dropout)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    best: dict[str, Any] = {"val_mrr": -1.0}
    curve: list[float] = []
    start = time.perf_counter()
    for epoch in range(epochs):
        model.train()
        opt.zero_grad()
        h = model(x, edge_index)
        if negatives == "pairs":
            neg = negative_sampling(
                edge_index, num_nodes=g.num_nodes, num_neg_samples=train.shape[1]
            )
        else:
            neg = torch.stack([train[0], torch.randint(0, g.num_nodes, (train.shape[1],))])
        pairs = torch.cat([train, neg], dim=1)
        logits = (h[pairs[0]] * h[pairs[1]]).sum(-1)
        labels = torch.cat([torch.ones(train.shape[1]), torch.zeros(neg.shape[1])])
        loss = nn.functional.binary_cross_entropy_with_logits(logits, labels)
        loss.backward()
        opt.step()
        if (epoch + 1) % eval_every and epoch != epochs - 1:
            continue
        model.eval()
        with torch.no_grad():
            h = model(x, edge_index)
            val = _metrics(h, split.val_2K, split.val_neg_KQ)
            curve.append(round(val["mrr"] or 0.0, 5))
            if (val["mrr"] or 0.0) > best["val_mrr"]:
                test = _metrics(h, split.test_2K, split.test_neg_KQ)
                best = {
                    "epoch": epoch,
                    "loss": float(loss),
                    **_prefixed(val, "val"),
                    **_prefixed(test, "test"),
                }
    seconds = time.perf_counter() - start
    return best | {"epochs": epochs, "val_mrr_curve": curve, "seconds": seconds}


def _prefixed(metrics: dict[str, float | None], split: str) -> dict[str, float | None]:
    return {f"{split}_{k}": v for k, v in metrics.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("dataset")
    p.add_argument("--root")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--seeds", default="0")
    p.add_argument("--eval-every", type=int, default=1)
    p.add_argument("--negatives", default="pairs", choices=("pairs", "source"))
    args = p.parse_args()
    split = load_link_split(args.dataset, args.root, config=LinkSplitConfig())
    for seed in [int(s) for s in args.seeds.split(",")]:
        best = run(
            split,
            hidden=args.hidden,
            num_layers=args.layers,
            epochs=args.epochs,
            lr=args.lr,
            dropout=args.dropout,
            seed=seed,
            eval_every=args.eval_every,
            negatives=args.negatives,
        )
        line = {"bench": "pyg_link", "dataset": args.dataset, "seed": seed} | best
        print(json.dumps(line | {"settings": vars(args)}))


if __name__ == "__main__":
    main()
