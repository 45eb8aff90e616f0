"""Link prediction in the runtime: exact metrics, sharded scoring, batches, ledger, flags."""

from __future__ import annotations

import argparse
import copy
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
import torch
from torch.nn import functional

from gnnsys.commands._link import add_link_args, apply_link_args
from gnnsys.config import RunConfig
from gnnsys.datasets import LinkSplit, LinkSplitConfig
from gnnsys.datasets.link_split import edge_split
from gnnsys.datasets.synthetic import sbm
from gnnsys.distributed.batches import epoch_positions
from gnnsys.models import LinkModel, ModelConfig, build_decoder, build_model
from gnnsys.partitioners import partition
from gnnsys.sampler import CSRNeighborSource, NeighborSampler
from gnnsys.store import load_links, write_partitions
from gnnsys.store.info import store_info
from gnnsys.store.source import DataConfig
from gnnsys.testing.in_memory import one_type_link_trainer, one_type_model
from gnnsys.testing.reference import full_block, full_graph_logits
from gnnsys.train.control.cluster_config import ClusterConfig
from gnnsys.train.control.local_group import LocalWorkerGroup
from gnnsys.train.control.run import worker_template
from gnnsys.train.eval.evaluate import EvalConfig, combine_evals
from gnnsys.train.link.config import LinkConfig
from gnnsys.train.link.scoring import split_ranks
from gnnsys.train.link.trainer import link_batch
from gnnsys.train.metrics import HITS_AT, link_metrics, link_ranks, link_sums
from gnnsys.train.node_types import NodeTypesConfig
from gnnsys.train.schedule import batch_seed_for
from gnnsys.train.trainer import Trainer
from gnnsys.types import ONE_RELATION, ONE_TYPE

pytestmark = pytest.mark.usefixtures("shared_stores")  # runs share their stores (conftest)


# ---- metrics ------------------------------------------------------------------------------------
def test_link_ranks_count_ties_half_as_ogb_does() -> None:
    pos = np.array([1.0, 0.5, 3.0])
    neg = np.array([[2.0, 1.0, 0.0], [0.5, 0.5, 0.1], [0.0, 0.0, 0.0]])
    # 1 above, 1 tie -> 1 + (1 + 2) / 2; 0 above, 2 ties -> 1 + (0 + 2) / 2; none -> 1
    assert link_ranks(pos, neg).tolist() == [2.5, 2.0, 1.0]


def test_link_metrics_equal_a_per_link_reference() -> None:
    rng = np.random.default_rng(0)
    pos = rng.integers(0, 40, size=300).astype(np.float64)  # integer scores: many ties
    neg = rng.integers(0, 40, size=(300, 150)).astype(np.float64)
    ref = [
        1 + sum(n > p for n in row) + 0.5 * sum(n == p for n in row)
        for p, row in zip(pos, neg, strict=True)
    ]
    ranks = link_ranks(pos, neg)
    assert ranks.tolist() == ref
    # sums of two halves add up to the metrics of the whole (the driver's exact reduction)
    sums = link_sums(ranks[:100]) + link_sums(ranks[100:])
    got = link_metrics(sums)
    assert got["mrr"] == pytest.approx(np.mean(1 / np.array(ref)), abs=1e-12)
    for k in HITS_AT:
        assert got[f"hits@{k}"] == pytest.approx(np.mean(np.array(ref) <= k), abs=1e-12)
    assert link_metrics(link_sums(np.zeros(0)))["mrr"] is None


# ---- sharded evaluation vs one process ---------------------------------------------------------
@pytest.fixture(scope="module")
def split() -> LinkSplit:
    graph = sbm(num_nodes=500, num_classes=4, avg_degree=8, num_features=10, seed=2)
    return edge_split(graph, LinkSplitConfig(val=0.1, test=0.1, num_neg=60, seed=1))


def _store(split: LinkSplit, parts: int, root: Path) -> Path:
    store = root / f"store-{parts}"
    method = "metis" if parts > 1 else "random"
    assignment = partition(split.graph, method, parts, seed=0)
    write_partitions(split.graph, assignment, store, num_hops=2, overwrite=True, links=split)
    return store


def _config(store: Path, parts: int, **link: Any) -> RunConfig:
    return RunConfig(
        data=DataConfig(store=str(store)),
        cluster=ClusterConfig(parts=parts),
        sampler=NeighborSampler.Config(fanouts=(5, 5)),
        model=ModelConfig(name=link.pop("model", "sage"), hidden=16, dropout=0.5),
        trainer=Trainer.Config(batch_size=64 // parts, lr=0.01),
        eval=EvalConfig(),
        link=LinkConfig(**link),
    )


def _group(cfg: RunConfig, store: Path, topology: str = "partitioned", **kw: Any) -> Any:
    return LocalWorkerGroup(worker_template(cfg, store, store_info(store), topology), 60.0, **kw)


def _reference(split: LinkSplit, cfg: RunConfig, state: dict[str, Any]) -> tuple[Any, Any]:
    """Embeddings of every node and each split's link sums, computed in one process."""
    assert split.graph.x is not None
    encoder = build_model(cfg.model, split.graph.x.shape[1], cfg.model.hidden, 2)
    assert cfg.link is not None
    model = LinkModel(encoder, build_decoder(cfg.link.decoder, cfg.model.hidden))
    model.load_state_dict(state)
    g = split.graph
    h = full_graph_logits(
        encoder, full_block(g.indptr, g.indices, g.num_nodes), torch.from_numpy(g.x)
    )
    sums = {}
    for name in ("val", "test"):
        links, neg = getattr(split, f"{name}_2K"), getattr(split, f"{name}_neg_KQ")
        src, dst = torch.from_numpy(links[0]), torch.from_numpy(links[1])
        ranks = split_ranks(model, h[src], h[dst], h[torch.from_numpy(neg)], chunk=17)
        sums[name] = link_sums(ranks)
    return h, sums


@pytest.mark.parametrize(
    ("parts", "decoder", "model"),
    [(1, "dot", "sage"), (2, "dot", "sage"), (4, "dot", "sage"), (2, "mlp", "gcn")],
)
def test_sharded_link_scores_equal_one_process(
    split: LinkSplit, parts: int, decoder: str, model: str, tmp_path: Path
) -> None:
    _sharded_scores_equal_one_process(split, parts, decoder, model, tmp_path)


@pytest.mark.parametrize(("decoder", "model"), [("dot", "sage"), ("mlp", "gcn")])
def test_typed_runtime_link_scores_equal_one_process(
    split: LinkSplit, decoder: str, model: str, tmp_path: Path
) -> None:
    """The same through the typed runtime (the store's one type): embeddings with logits too."""
    _sharded_scores_equal_one_process(split, 2, decoder, model, tmp_path, typed=True)


def _sharded_scores_equal_one_process(
    split: LinkSplit, parts: int, decoder: str, model: str, tmp_path: Path, typed: bool = False
) -> None:
    store = _store(split, parts, tmp_path)
    cfg = _config(store, parts, decoder=decoder, model=model)
    if typed:
        cfg = replace(cfg, node_types=NodeTypesConfig(model=model, input_type=ONE_TYPE))
    group = _group(cfg, store)
    try:
        group.run_epoch(0, group.start(), lambda _: None)  # trained, not initial, weights
        reports = group.evaluate(("train", "val", "test"), with_logits=True)
        state = group.collect()[0].model
    finally:
        group.stop()
    h, sums = _reference(split, cfg, state)
    got = torch.full_like(h, float("nan"))
    for r in reports:
        assert r.logits is not None
        got[torch.from_numpy(r.logits[0])] = torch.from_numpy(r.logits[1])
    diff = float((got - h).abs().max())
    assert diff <= 1e-5, f"embeddings differ by {diff:.3g}"
    result = combine_evals(reports, cfg.model.hidden)
    assert "train_mrr" not in result.metrics  # train links have no fixed negatives
    for name in ("val", "test"):
        for key, value in link_metrics(sums[name]).items():
            assert result.metrics[f"{name}_{key}"] == pytest.approx(value, abs=1e-5), key
    peer_rows = sum(r.traffic.bytes["feature_response"] for r in reports)
    assert (peer_rows > 0) == (parts > 1)  # non-owned endpoints came from their owners


# ---- batches, topologies, ledger ---------------------------------------------------------------
def test_link_batch_is_seeded_and_indexes_its_seeds() -> None:
    links = torch.tensor([[3, 5, 3], [7, 1, 9]])
    a = link_batch(links, ONE_RELATION, num_dst=50, neg_per_pos=4, seed=11)
    b = link_batch(links, ONE_RELATION, num_dst=50, neg_per_pos=4, seed=11)
    for name in ("src_B", "dst_B", "neg_Bq"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert list(a.seeds) == [ONE_TYPE] and torch.equal(a.seeds[ONE_TYPE], b.seeds[ONE_TYPE])
    seeds = a.seeds[ONE_TYPE]
    assert torch.equal(seeds, torch.unique(seeds))
    assert torch.equal(seeds[a.src_B], links[0]) and torch.equal(seeds[a.dst_B], links[1])
    assert a.neg_Bq.shape == (3, 4) and int(seeds[a.neg_Bq].max()) < 50


def test_partitioned_and_replicated_link_training_are_identical(
    split: LinkSplit, tmp_path: Path
) -> None:
    store = _store(split, 2, tmp_path)
    cfg = _config(store, 2)
    runs = {}
    for topology in ("partitioned", "replicated"):
        group = _group(cfg, store, topology)
        try:
            n = group.start()
            losses = [
                [r.stats.loss_sum for r in group.run_epoch(e, n, lambda _: None)] for e in range(2)
            ]
            runs[topology] = (losses, group.collect()[0].model)
        finally:
            group.stop()
    (lp, sp), (lr, sr) = runs["partitioned"], runs["replicated"]
    assert lp == lr
    assert all(torch.equal(sp[k], sr[k]) for k in sp)


def test_link_feature_ledger_equals_an_independent_replay(split: LinkSplit, tmp_path: Path) -> None:
    parts = 2
    store = _store(split, parts, tmp_path)
    cfg = _config(store, parts, neg_per_pos=2)
    group = _group(cfg, store, replay=True)
    try:
        num_batches = group.start()
        reports = group.run_epoch(0, num_batches, lambda _: None)
    finally:
        group.stop()
    part_N = np.load(store / "node_to_part.npy")
    sampler = NeighborSampler(cfg.sampler, source=CSRNeighborSource.from_graph(split.graph))
    num_features = split.graph.num_features
    for r in reports:
        train = torch.from_numpy(load_links(store, r.rank).train_2E)
        rows, messages = 0, 0
        batches = epoch_positions(train, num_batches, seed=0, epoch=0)
        for b, pos in enumerate(batches):
            if not pos.numel():
                continue
            seed = batch_seed_for(0, r.rank, 0, b)
            batch = link_batch(
                train[:, pos], ONE_RELATION, num_dst=split.graph.num_nodes, neg_per_pos=2,
                seed=seed,
            )  # fmt: skip
            n_id = sampler.sample(batch.seeds[ONE_TYPE], seed=seed).n_id.numpy()
            remote = part_N[n_id] != r.rank
            rows += int(remote.sum())
            messages += len(set(part_N[n_id[remote]].tolist()))
        assert r.traffic.bytes["feature_request"] == 8 * rows
        assert r.traffic.bytes["feature_response"] == 4 * num_features * rows
        assert r.traffic.messages["feature_response"] == messages


class _PeerSync:
    """Two-rank ``allreduce_mean_`` without threads: rank 1 records, rank 0 averages with it."""

    def __init__(self) -> None:
        self.peer: torch.Tensor | None = None

    def allreduce_mean_(self, flat: torch.Tensor) -> None:
        if self.peer is None:
            self.peer = flat.clone()  # rank 1's buffer; its own step is not checked
        else:
            flat.copy_((flat + self.peer) / 2)


def _whole_graph_sage(split: LinkSplit, *, hidden: int, seed: int) -> tuple[Any, Any, Any]:
    """Features, a seeded 2-layer SAGE encoder with the runtime's typed copy, the train links."""
    g = split.graph
    assert g.x is not None
    x = torch.from_numpy(np.asarray(g.x, dtype=np.float32))
    torch.manual_seed(seed)
    encoder = build_model(
        ModelConfig(name="sage", hidden=hidden, dropout=0.0), x.shape[1], hidden, 2
    )
    typed = one_type_model(g.num_features, hidden, hidden, 2, dropout=0.0)
    typed.load_state_dict(encoder.state_dict())  # a one-type stack keeps SAGE's names
    return x, encoder, typed, torch.from_numpy(split.train_2E)


def test_ranks_with_unequal_batches_weigh_by_positives(split: LinkSplit) -> None:
    # rank 0 holds 7 positives, rank 1 holds 29: the synced gradient must be the gradient of the
    # mean BCE over all 36 positives' pairs, not the mean of the two ranks' means (DDP's 1/P)
    g = split.graph
    x, encoder, typed, train = _whole_graph_sage(split, hidden=8, seed=3)
    initial = LinkModel(encoder, build_decoder("dot", 8))
    owned = {0: train[:, :7], 1: train[:, 7:36]}
    sync, cfg, q = _PeerSync(), Trainer.Config(batch_size=64, lr=0.01), 2
    trainers = {}
    for rank in (1, 0):
        trainers[rank] = one_type_link_trainer(
            g, cfg, LinkConfig(neg_per_pos=q), encoder=copy.deepcopy(typed), decoder="dot",
            width=8, train_2E=owned[rank], rank=rank, sync=sync,
        )  # fmt: skip
        trainers[rank].train_epoch(0, 1)  # one batch each; p.grad keeps the synced gradient
    # reference: one process, the same pairs, exact full-graph embeddings, one mean
    block = full_block(g.indptr, g.indices, g.num_nodes)
    h = initial.encoder(x, [block, block])  # the whole graph, with grad
    logits, labels = [], []
    for rank, owned_2E in owned.items():
        pos = epoch_positions(owned_2E, 1, seed=0, epoch=0)[0]
        links = owned_2E[:, pos]  # the trainer's batch order (negatives pair up by position)
        batch = link_batch(
            links, ONE_RELATION, num_dst=g.num_nodes, neg_per_pos=q,
            seed=batch_seed_for(0, rank, 0, 0),
        )  # fmt: skip
        hb = h[batch.seeds[ONE_TYPE]]
        logits += [initial.score(hb[batch.src_B], hb[batch.dst_B])]
        logits += [initial.score(hb[batch.src_B].unsqueeze(1), hb[batch.neg_Bq]).reshape(-1)]
        labels += [torch.ones(links.shape[1]), torch.zeros(links.shape[1] * q)]
    loss = functional.binary_cross_entropy_with_logits(torch.cat(logits), torch.cat(labels))
    names = [n for n, _ in initial.named_parameters()]
    ref = dict(zip(names, torch.autograd.grad(loss, list(initial.parameters())), strict=True))
    inner = f".convs.<{'___'.join(ONE_RELATION)}>."
    got = {n.replace(inner, "."): p.grad for n, p in trainers[0].model.named_parameters()}
    assert set(got) == set(ref)
    for name, grad in got.items():
        assert grad is not None
        torch.testing.assert_close(grad, ref[name], rtol=1e-4, atol=1e-6)


# ---- flags and stores ---------------------------------------------------------------------------
def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_link_args(p)
    return p.parse_args(list(argv))


def test_link_flags_apply_and_validate() -> None:
    cfg = apply_link_args(
        _args("--task", "link", "--val-edges", "0.05", "--decoder", "mlp"), RunConfig()
    )
    assert cfg.link.decoder == "mlp" and cfg.data.link_split.val == 0.05
    assert cfg.data.link_split.test == 0.1 and cfg.data.link_split.num_neg == 1000
    assert apply_link_args(_args(), RunConfig()).link is None
    with pytest.raises(ValueError, match="add --task link"):
        apply_link_args(_args("--val-edges", "0.1"), RunConfig())
    with pytest.raises(ValueError, match="--decoder"):
        apply_link_args(_args("--task", "link", "--decoder", "cosine"), RunConfig())
    with pytest.raises(ValueError, match="no training"):
        apply_link_args(
            _args("--task", "link", "--val-edges", "0.6", "--test-edges", "0.5"), RunConfig()
        )
    with pytest.raises(ValueError, match="--neg-per-pos"):
        apply_link_args(_args("--task", "link", "--neg-per-pos", "0"), RunConfig())


def test_selection_metric_belongs_to_its_task() -> None:
    assert EvalConfig().selection_metric(7, link=True) == "mrr"
    assert EvalConfig(metric="hits@50").selection_metric(7, link=True) == "hits@50"
    with pytest.raises(ValueError, match="pass --task link"):
        EvalConfig(metric="mrr").selection_metric(7)
    with pytest.raises(ValueError, match="node metric"):
        EvalConfig(metric="acc").selection_metric(7, link=True)
    with pytest.raises(ValueError, match="--metric"):
        EvalConfig(metric="hits@10")


def test_stores_of_the_other_task_are_refused(split: LinkSplit, tmp_path: Path) -> None:
    from gnnsys.commands._preflight import check_store

    link_store = _store(split, 2, tmp_path)
    node_store = tmp_path / "node"
    write_partitions(split.graph, partition(split.graph, "random", 2, seed=0), node_store)
    check_store(link_store, 2, link=True)
    with pytest.raises(ValueError, match="link split"):
        check_store(node_store, 2, link=True)
    from gnnsys.train.control.run import _check_task

    with pytest.raises(ValueError, match="has no link split"):
        _check_task(_config(node_store, 2), node_store)
    with pytest.raises(ValueError, match="written for --task link"):
        _check_task(replace(_config(link_store, 2), link=None), link_store)


@pytest.mark.ray
@pytest.mark.timeout(240)
def test_ray_group_link_scores_equal_one_process(
    ray_session: object, split: LinkSplit, tmp_path: Path
) -> None:
    """Ray ranks score concurrently while serving each other the last table."""
    from gnnsys.train.control.ray_group import RayWorkerGroup
    from gnnsys.train.control.resources import Resources

    store = _store(split, 2, tmp_path)
    cfg = _config(store, 2)
    template = worker_template(cfg, store, store_info(store), "partitioned")
    group = RayWorkerGroup(template, Resources(worker_cpus=0.5, owner_cpus=0.25), 60.0)
    try:
        group.run_epoch(0, group.start(), lambda _: None)
        reports = group.evaluate(("val", "test"))
        state = group.collect()[0].model
    finally:
        group.stop()
    _, sums = _reference(split, cfg, state)
    result = combine_evals(reports, cfg.model.hidden)
    for name in ("val", "test"):
        for key, value in link_metrics(sums[name]).items():
            assert result.metrics[f"{name}_{key}"] == pytest.approx(value, abs=1e-5), key


# ---- a gnnsys step is PyG's full-batch step ------------------------------------------------------
def test_full_batch_steps_equal_pyg_sageconv_on_the_same_pairs(split: LinkSplit) -> None:
    # gnnsys's LinkTrainer at full batch (fanouts -1,-1, every train link in one step) against
    # PyG's link_pred loop (SAGEConv stack, dot product, BCE, Adam) fed the same initial weights
    # and the same negative pairs: the losses and weights must follow each other step by step
    from torch_geometric.nn import SAGEConv

    from gnnsys.datasets.link_split import undirected_pairs

    g = split.graph
    x, encoder, typed, train = _whole_graph_sage(split, hidden=16, seed=0)
    convs = torch.nn.ModuleList([SAGEConv(x.shape[1], 16), SAGEConv(16, 16)])
    with torch.no_grad():
        for conv, layer in zip(convs, encoder.layers, strict=True):
            conv.lin_l.weight.copy_(layer.lin_l.weight)
            conv.lin_l.bias.copy_(layer.lin_l.bias)
            conv.lin_r.weight.copy_(layer.lin_r.weight)
    trainer = one_type_link_trainer(
        g, Trainer.Config(batch_size=1 << 30, lr=0.01, seed=0), LinkConfig(neg_per_pos=1),
        encoder=typed, decoder="dot", width=16, train_2E=train,
    )  # fmt: skip
    edge_index = torch.from_numpy(undirected_pairs(g))
    edge_index = torch.cat([edge_index, edge_index.flip(0)], dim=1)
    opt = torch.optim.Adam(convs.parameters(), lr=0.01)
    for epoch in range(4):
        stats = trainer.train_epoch(epoch, 1)
        pos = epoch_positions(train, 1, seed=0, epoch=epoch)[0]  # the trainer's batch
        batch = link_batch(
            train[:, pos], ONE_RELATION, num_dst=g.num_nodes,
            neg_per_pos=1, seed=batch_seed_for(0, 0, epoch, 0),
        )  # fmt: skip
        seeds = batch.seeds[ONE_TYPE]
        src, dst, neg = seeds[batch.src_B], seeds[batch.dst_B], seeds[batch.neg_Bq[:, 0]]
        opt.zero_grad()
        h = convs[1](convs[0](x, edge_index).relu(), edge_index)
        logits = torch.cat([(h[src] * h[dst]).sum(-1), (h[src] * h[neg]).sum(-1)])
        labels = torch.cat([torch.ones(len(src)), torch.zeros(len(src))])
        loss = functional.binary_cross_entropy_with_logits(logits, labels)
        loss.backward()
        opt.step()
        assert stats.loss_sum / stats.num_seeds == pytest.approx(float(loss), rel=1e-5)
        encoder_layers = cast(Any, trainer.model).encoder.layers
        for conv, typed_layer in zip(convs, encoder_layers, strict=True):
            layer = typed_layer.conv(ONE_RELATION)
            torch.testing.assert_close(conv.lin_l.weight, layer.lin_l.weight, atol=1e-5, rtol=0)
            torch.testing.assert_close(conv.lin_r.weight, layer.lin_r.weight, atol=1e-5, rtol=0)
