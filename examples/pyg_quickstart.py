"""PyG's GraphSAGE mini-batch example on Cora, with gnnsys's loader: the only change is the import.

The model, the training loop and the layer-wise full-neighborhood inference are PyG's
(``examples/reddit.py`` style, ``torch_geometric.nn.SAGEConv``). PyG's own ``NeighborLoader``
needs pyg-lib or torch-sparse, which do not install on current torch from PyPI;
``gnnsys.loader.NeighborLoader`` needs neither.

Usage::

    python examples/pyg_quickstart.py [--root ../shared/datasets] [--seeds 5] [--epochs 60]

Prints one JSON line per seed and a summary line with the mean and std of the test accuracy
(test accuracy at the epoch of best validation accuracy, Planetoid public split).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812  (PyG's spelling)
import torch_geometric.transforms as T  # noqa: N812
from torch_geometric.nn import SAGEConv

import gnnsys

# from torch_geometric.loader import NeighborLoader    # PyG: needs pyg-lib or torch-sparse
from gnnsys.loader import NeighborLoader  # the one changed line


class SAGE(torch.nn.Module):
    """Two SAGEConv layers, ReLU and dropout in between (PyG's example model)."""

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int) -> None:
        super().__init__()
        self.convs = torch.nn.ModuleList()
        self.convs.append(SAGEConv(in_channels, hidden_channels))
        self.convs.append(SAGEConv(hidden_channels, out_channels))

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        """Logits of every node in the batch (only the first ``batch_size`` are supervised)."""
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = x.relu_()
                x = F.dropout(x, p=0.5, training=self.training)
        return x

    @torch.no_grad()
    def inference(self, x_all: torch.Tensor, subgraph_loader: NeighborLoader) -> torch.Tensor:
        """Exact layer-wise inference over all neighbors (PyG's example)."""
        for i, conv in enumerate(self.convs):
            xs = []
            for batch in subgraph_loader:
                x = x_all[batch.n_id]
                x = conv(x, batch.edge_index)
                if i < len(self.convs) - 1:
                    x = x.relu_()
                xs.append(x[: batch.batch_size])
            x_all = torch.cat(xs, dim=0)
        return x_all


def run(data: Any, seed: int, epochs: int, eval_every: int) -> dict[str, float]:
    """Train one model; return its best validation accuracy and the test accuracy there."""
    torch.manual_seed(seed)
    kwargs = {"batch_size": 64, "num_workers": 0}
    train_loader = NeighborLoader(
        data, input_nodes=data.train_mask, num_neighbors=[25, 10], shuffle=True, **kwargs
    )
    subgraph_loader = NeighborLoader(
        copy.copy(data), input_nodes=None, num_neighbors=[-1], shuffle=False, batch_size=1024
    )
    # No need to maintain these features during evaluation:
    del subgraph_loader.data.x, subgraph_loader.data.y
    model = SAGE(data.num_features, 64, int(data.y.max()) + 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    best_val, test_at_best = 0.0, 0.0
    for _epoch in range(epochs):
        model.train()
        for batch in train_loader:
            optimizer.zero_grad()
            y = batch.y[: batch.batch_size]
            y_hat = model(batch.x, batch.edge_index)[: batch.batch_size]
            loss = F.cross_entropy(y_hat, y)
            loss.backward()
            optimizer.step()
        if (_epoch + 1) % eval_every:
            continue
        model.eval()
        pred = model.inference(data.x, subgraph_loader).argmax(dim=-1)
        accs = [
            float((pred[m] == data.y[m]).float().mean()) for m in (data.val_mask, data.test_mask)
        ]
        if accs[0] > best_val:
            best_val, test_at_best = accs[0], accs[1]
    return {"seed": seed, "val_acc": best_val, "test_acc": test_at_best}


def main() -> None:
    """Load Cora through gnnsys, convert to PyG ``Data``, train over several seeds."""
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--root", default="../shared/datasets")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--epochs", type=int, default=60)
    p.add_argument("--eval-every", type=int, default=5, help="epochs between validations")
    args = p.parse_args()
    data = T.NormalizeFeatures()(gnnsys.load_dataset("planetoid:cora", root=args.root).to_pyg())
    accs = []
    for seed in range(args.seeds):
        result = run(data, seed, args.epochs, args.eval_every)
        accs.append(result["test_acc"])
        print(json.dumps(result), flush=True)
    std = statistics.stdev(accs) if len(accs) > 1 else 0.0
    summary = {"dataset": "planetoid:cora", "seeds": args.seeds, "epochs": args.epochs}
    summary["eval_every"] = args.eval_every
    summary |= {"test_acc_mean": statistics.fmean(accs), "test_acc_std": std}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
