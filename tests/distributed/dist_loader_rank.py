"""One rank of the DistNeighborLoader tests (run by ``test_dist_loader.py`` under gloo).

``python dist_loader_rank.py STORE OUT SCENARIO``: builds the scenario's loaders in this rank's
process group and saves what they yielded as ``OUT % rank`` (npz, no pickle).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
from torch import distributed as dist


def _record(loader, epochs: int, tag: str, out: dict) -> None:
    from torch_geometric.data import HeteroData

    out[f"{tag}/len"] = np.array([len(loader)])
    for e in range(epochs):
        for b, batch in enumerate(loader):
            key = f"{tag}/{e}/{b}"
            if not isinstance(batch, HeteroData):
                out[f"{key}/n_id"] = batch.n_id.numpy()
                out[f"{key}/edge_index"] = batch.edge_index.numpy()
                out[f"{key}/x"] = batch.x.numpy()
                out[f"{key}/y"] = batch.y.numpy()
                out[f"{key}/input_id"] = batch.input_id.numpy()
                out[f"{key}/batch_size"] = np.array([batch.batch_size])
                continue
            for t in batch.node_types:
                out[f"{key}/{t}/n_id"] = batch[t].n_id.numpy()
                if "x" in batch[t]:
                    out[f"{key}/{t}/x"] = batch[t].x.numpy()
            for et in batch.edge_types:
                out[f"{key}/{'__'.join(et)}/edge_index"] = batch[et].edge_index.numpy()
            seed_type = loader.input_type
            out[f"{key}/y"] = batch[seed_type].y.numpy()
            out[f"{key}/batch_size"] = np.array([batch[seed_type].batch_size])


def _train(store: str, out: dict) -> None:
    """PyG's GraphSAGE under DDP on the loader's batches: losses per epoch, final weights."""
    from torch_geometric.nn.models import GraphSAGE

    from gnnsys.distributed import DistNeighborLoader

    loader = DistNeighborLoader(store, [4, 3], batch_size=32, shuffle=True, seed=3)

    def loss(model, batch):
        logits = model(batch.x, batch.edge_index)[: batch.batch_size]
        return torch.nn.functional.cross_entropy(logits, batch.y)

    torch.manual_seed(0)
    _ddp_epochs(GraphSAGE(16, 32, num_layers=2, out_channels=4), loader, loss, 12, out)


def _ddp_epochs(net, loader, loss_of, epochs: int, out: dict) -> None:
    """``net`` under DDP on ``loader`` with Adam: mean loss per epoch, final weights."""
    from torch.nn.parallel import DistributedDataParallel

    model = DistributedDataParallel(net)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for _ in range(epochs):
        total = 0.0
        for batch in loader:
            opt.zero_grad()
            loss = loss_of(model, batch)
            loss.backward()
            opt.step()
            total += float(loss)
        losses.append(total / len(loader))
    out["train/losses"] = np.array(losses)
    out["train/weights"] = torch.cat([p.detach().flatten() for p in model.parameters()]).numpy()


LINK_FIELDS = ("n_id", "edge_index", "x", "input_id", "edge_label_index", "edge_label",
               "src_index", "dst_pos_index", "dst_neg_index")  # fmt: skip


def _record_links(loader, epochs: int, tag: str, out: dict) -> None:
    """Every link batch's fields (``Data``; on ``HeteroData`` the relation's and types')."""
    from torch_geometric.data import HeteroData

    out[f"{tag}/len"] = np.array([len(loader)])
    for e in range(epochs):
        for b, batch in enumerate(loader):
            key = f"{tag}/{e}/{b}"
            out[f"{key}/batch"] = np.array([b])
            stores = [batch]
            if isinstance(batch, HeteroData):
                src, _, dst = loader.edge_type
                stores = [batch[loader.edge_type], batch[src], batch[dst]]
                for t in batch.node_types:
                    out[f"{key}/{t}/n_id"] = batch[t].n_id.numpy()
                for et in batch.edge_types:
                    out[f"{key}/{'__'.join(et)}/edge_index"] = batch[et].edge_index.numpy()
            for store in stores:
                for name in LINK_FIELDS:
                    if name in store and f"{key}/{name}" not in out:
                        out[f"{key}/{name}"] = store[name].numpy()


def _train_links(store: str, out: dict) -> None:
    """PyG GraphSAGE + a dot-product decoder under DDP on binary link batches."""
    from torch_geometric.nn.models import GraphSAGE

    from gnnsys.distributed import DistLinkNeighborLoader

    loader = DistLinkNeighborLoader(
        store, [4, 3], neg_sampling="binary", batch_size=256, shuffle=True, seed=3
    )

    def loss(model, batch):
        h = model(batch.x, batch.edge_index)
        src, dst = batch.edge_label_index
        logits = (h[src] * h[dst]).sum(-1)
        return torch.nn.functional.binary_cross_entropy_with_logits(logits, batch.edge_label)

    torch.manual_seed(0)
    _ddp_epochs(GraphSAGE(16, 32, num_layers=2), loader, loss, 6, out)


def infer_model(jk: str | None = None):
    """The model both the rank script and the test build: PyG GraphSAGE, seeded weights."""
    from torch_geometric.nn.models import GraphSAGE

    torch.manual_seed(5)
    return GraphSAGE(16, 24, num_layers=3, out_channels=4, jk=jk).eval()


def _infer(store: str, out_root: str) -> None:
    from gnnsys.distributed import inference

    model = infer_model()
    inference(model, store, f"{out_root}/layerwise", kind="embed", batch_size=128)
    inference(model, store, f"{out_root}/sampled", method="sampled", num_neighbors=[-1, -1, -1],
              batch_size=200)  # fmt: skip
    inference(infer_model("lstm"), store, f"{out_root}/jk", kind="embed")  # PyG's refuses jk


def hetero_infer_model(store: str):
    """``to_hetero(GraphSAGE)`` (mean over relations, batch norm) and featureless types' rows."""
    from torch_geometric.nn import to_hetero
    from torch_geometric.nn.models import GraphSAGE

    from gnnsys.store.info import store_info
    from gnnsys.store.reader import read_store_manifest

    info = store_info(Path(store))
    types = list(info.named_types)
    relations = [tuple(et) for et in info.named_relations]
    manifest = read_store_manifest(Path(store))
    torch.manual_seed(11)
    embeddings = {
        t: torch.randn(int(manifest.node_type(t).num_nodes), 8)
        for t in types if t not in info.named_dims
    }  # fmt: skip
    base = GraphSAGE((-1, -1), 16, num_layers=3, out_channels=3, norm="batch_norm")
    model = to_hetero(base, (types, relations), aggr="mean").eval()
    x = {t: torch.zeros(1, int(info.named_dims.get(t, 8))) for t in types}
    model(x, {et: torch.zeros(2, 0, dtype=torch.int64) for et in relations})  # lazy widths
    return model.eval(), embeddings


LAYER0_RUNS = (("rows", "fp32"), ("owner", "fp32"), ("rows", "int8"), ("fused", "int8"))


def _layer0(store: str, out: dict) -> None:
    """Each ``layer0`` mode's batches and ``HopTrimmed(GraphSAGE)``'s outputs on them."""
    from torch_geometric.nn.models import GraphSAGE

    from gnnsys.distributed import DistNeighborLoader
    from gnnsys.models.pyg_user import HopTrimmed

    torch.manual_seed(2)
    model = HopTrimmed(GraphSAGE(16, 12, num_layers=2, out_channels=4)).eval()
    kw = {"num_neighbors": [4, 3], "batch_size": 40, "seed": 7, "shuffle": True}
    for mode, codec in LAYER0_RUNS:
        loader = DistNeighborLoader(store, codec=codec, layer0=mode, **kw)
        for b, batch in enumerate(loader):
            key = f"{mode}-{codec}/0/{b}"
            agg0 = getattr(batch, "agg0", None)
            with torch.no_grad():
                y = model(batch.x, batch.edge_index, batch.num_sampled_nodes,
                          batch.num_sampled_edges, agg0=agg0)  # fmt: skip
            out[f"{key}/x"], out[f"{key}/y"] = batch.x.numpy(), y.numpy()
            out[f"{key}/n_id"], out[f"{key}/edge_index"] = batch.n_id.numpy(), batch.edge_index
            out[f"{key}/nodes"] = np.array(batch.num_sampled_nodes)
            out[f"{key}/batch_size"] = np.array([batch.batch_size])
            if agg0 is not None:
                out[f"{key}/agg0"] = agg0.numpy()
        snap = loader.ledger.snapshot()
        if mode == "owner":  # a rank short of seeds: its empty batches carry agg0 too
            short = DistNeighborLoader(store, input_nodes=uneven_mask(store), layer0=mode, **kw)
            out["short/agg0_rows"] = np.array([b.agg0.shape[0] for b in short])
        out[f"{mode}-{codec}/categories"] = np.array(sorted(snap.bytes))
        out[f"{mode}-{codec}/bytes"] = np.array([snap.bytes[c] for c in sorted(snap.bytes)])


def uneven_mask(store: str) -> torch.Tensor:
    """100 seeds of part 0 and one of part 1 (both scripts build it from the store's books)."""
    from gnnsys.store import load_books

    part = torch.from_numpy(load_books(store)[None].part_N)
    mask = torch.zeros(part.numel(), dtype=torch.bool)
    mask[torch.nonzero(part == 0).squeeze(1)[:100]] = True
    mask[torch.nonzero(part == 1).squeeze(1)[:1]] = True
    return mask


def given_links() -> torch.Tensor:
    """The seed links both the rank script and the test build: 300 random pairs."""
    gen = torch.Generator().manual_seed(11)
    return torch.randint(0, 1000, (2, 300), generator=gen)


def main() -> None:
    store, path, scenario = sys.argv[1:4]
    dist.init_process_group("gloo")
    from gnnsys.distributed import DistNeighborLoader

    out: dict[str, np.ndarray] = {}
    if scenario == "node":
        kw = {"num_neighbors": [4, 3], "batch_size": 40, "seed": 7}
        _record(DistNeighborLoader(store, shuffle=True, **kw), 2, "shuffled", out)
        _record(DistNeighborLoader(store, shuffle=True, **kw), 2, "again", out)
        _record(DistNeighborLoader(store, **kw, prefetch=0), 1, "ordered", out)
        _record(DistNeighborLoader(store, shuffle=True, drop_last=True, **kw), 1, "drop", out)
        mask = torch.zeros(1000, dtype=torch.bool)
        mask[::3] = True
        _record(DistNeighborLoader(store, input_nodes=mask, **kw), 1, "mask", out)
        _record(DistNeighborLoader(store, codec="int8", **kw), 1, "int8", out)
        uneven = uneven_mask(store)  # rank 1 holds one seed: its later batches are empty
        _record(DistNeighborLoader(store, input_nodes=uneven, **kw), 1, "uneven", out)
        _train(store, out)
    elif scenario == "layer0":
        _layer0(store, out)
    elif scenario == "one":  # one part, the 2-rank run's global batch
        loader = DistNeighborLoader(store, [4, 3], batch_size=80, seed=7, shuffle=True)
        _record(loader, 2, "shuffled", out)
    elif scenario == "typed":
        kw = {"num_neighbors": [3, 2], "batch_size": 50, "seed": 7, "shuffle": True}
        _record(DistNeighborLoader(store, input_nodes="paper", **kw), 1, "typed", out)
    elif scenario == "link":
        from gnnsys.distributed import DistLinkNeighborLoader

        kw = {"num_neighbors": [3, 2], "seed": 7, "shuffle": True}
        binary = {"mode": "binary", "amount": 2}
        _record_links(DistLinkNeighborLoader(store, neg_sampling=binary, batch_size=200, **kw),
                      2, "binary", out)  # fmt: skip
        labels = torch.arange(300) % 2
        loader = DistLinkNeighborLoader(
            store, edge_label_index=given_links(), edge_label=labels, batch_size=40, **kw
        )
        _record_links(loader, 1, "given", out)
        loader = DistLinkNeighborLoader(
            store, edge_label_index=given_links(), neg_sampling={"mode": "triplet", "amount": 3},
            batch_size=40, **kw,
        )  # fmt: skip
        _record_links(loader, 1, "triplet", out)
        _train_links(store, out)
    elif scenario == "infer":
        _infer(store, str(Path(path).parent))
    elif scenario == "typed-infer":
        from gnnsys.distributed import inference

        model, emb = hetero_infer_model(store)
        root = Path(path).parent
        inference(model, store, root / "typed-layerwise", kind="embed", input_type="paper",
                  embeddings=emb, batch_size=300)  # fmt: skip
        inference(model, store, root / "typed-sampled", kind="embed", input_type="paper",
                  embeddings=emb, method="sampled", num_neighbors=[-1, -1, -1])  # fmt: skip
    elif scenario == "typed-link":
        from gnnsys.distributed import DistLinkNeighborLoader

        et = ("paper", "has_topic", "field_of_study")  # two node types
        loader = DistLinkNeighborLoader(
            store, [3, 2], edge_label_index=et, neg_sampling="binary", batch_size=500, seed=7,
        )  # fmt: skip
        _record_links(loader, 1, "typed", out)
    np.savez(path % dist.get_rank(), **out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
