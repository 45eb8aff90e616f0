"""``DistNeighborLoader`` on 2 gloo ranks, against the whole graph sampled in one process.

Each rank's batches are recorded by ``dist_loader_rank.py``; here they are checked against the
graph assembled from the store: the runtime's sampler over the whole graph with the batch's
seeds and seed gives the same nodes and edges (the sampler's randomness depends only on the
batch seed and the node, so partitioned equals replicated), features are the graph's rows,
labels its labels, every owned seed appears once per epoch, and every rank has the same length.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from gnnsys.partitioners import partition, partition_hetero
from gnnsys.store import assemble_hetero, load_books, write_partitions
from gnnsys.train.schedule import batch_seed_for
from gnnsys.types import ONE_TYPE

ROOT = Path(__file__).resolve().parents[2]
RANK_SCRIPT = Path(__file__).with_name("dist_loader_rank.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_ranks(store: Path, out: Path, scenario: str, world: int = 2) -> list[dict]:
    """Run the rank script on ``world`` gloo ranks; each rank's records."""
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    env.update(WORLD_SIZE=str(world), OMP_NUM_THREADS="1")
    pattern = str(out / f"{scenario}-%d.npz")
    procs = [
        subprocess.Popen(
            [sys.executable, str(RANK_SCRIPT), str(store), pattern, scenario],
            cwd=ROOT,
            env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for r in range(world)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=150)
        assert proc.returncode == 0, err[-4000:]
    return [dict(np.load(pattern % r, allow_pickle=False)) for r in range(world)]


@pytest.fixture(scope="module")
def node_run(tiny_graph, tmp_path_factory):
    root = tmp_path_factory.mktemp("distloader")
    store = root / "store"
    write_partitions(tiny_graph, partition(tiny_graph, "random", 2, seed=0), store, num_hops=2)
    return store, run_ranks(store, root, "node")


def _batches(rec: dict, tag: str, epoch: int, marker: str = "batch_size") -> list[dict]:
    """Batch ``b``'s recorded fields, for every ``b`` that recorded ``marker``."""
    out, b = [], 0
    while f"{tag}/{epoch}/{b}/{marker}" in rec:
        prefix = f"{tag}/{epoch}/{b}/"
        out.append({k[len(prefix) :]: v for k, v in rec.items() if k.startswith(prefix)})
        b += 1
    return out


def _reference(store: Path, fanouts: dict):
    from gnnsys.sampler.neighbor import RelationalSampler, csr_sources

    graph = assemble_hetero(store)
    sampler = RelationalSampler(
        RelationalSampler.Config(fanouts=fanouts),
        sources=csr_sources(graph), node_types=list(graph.node_types),
    )  # fmt: skip
    return graph, sampler


def _owned_train(store: Path, rank: int, node_type: str | None = None) -> np.ndarray:
    graph = assemble_hetero(store)
    t = node_type or ONE_TYPE
    book = load_books(store)[node_type]
    mask = np.asarray(graph.nodes[t].train_mask, dtype=bool)
    return np.flatnonzero(mask & (book.part_N == rank))


@pytest.mark.timeout(200)
def test_every_rank_has_the_same_length_and_sees_its_seeds_once(node_run) -> None:
    store, recs = node_run
    for tag in ("shuffled", "ordered", "drop", "mask", "int8"):
        lengths = {int(r[f"{tag}/len"][0]) for r in recs}
        assert len(lengths) == 1, (tag, lengths)
        (length,) = lengths
        assert [len(_batches(r, tag, 0)) for r in recs] == [length] * len(recs), tag
    for rank, rec in enumerate(recs):
        want = _owned_train(store, rank)
        for tag, epochs in (("shuffled", 2), ("ordered", 1)):
            for e in range(epochs):
                batches = _batches(rec, tag, e)
                assert len(batches) == int(rec[f"{tag}/len"][0])
                seeds = np.concatenate([b["n_id"][: int(b["batch_size"][0])] for b in batches])
                np.testing.assert_array_equal(np.sort(seeds), want)
        drop = _batches(rec, "drop", 0)
        assert {int(b["batch_size"][0]) for b in drop} == {40}
        assert len(drop) == min(len(_owned_train(store, r)) for r in range(2)) // 40
        mask_seeds = np.concatenate([b["n_id"][: int(b["batch_size"][0])] for b in
                                     _batches(rec, "mask", 0)])  # fmt: skip
        owned = np.flatnonzero(load_books(store)[None].part_N == rank)
        np.testing.assert_array_equal(mask_seeds, owned[owned % 3 == 0])  # no shuffle: in order


@pytest.mark.timeout(200)
def test_batches_equal_the_whole_graph_sampled_in_one_process(node_run) -> None:
    store, recs = node_run
    graph, sampler = _reference(store, {(ONE_TYPE, "to", ONE_TYPE): (4, 3)})
    x = np.asarray(graph.nodes[ONE_TYPE].x)
    y = np.asarray(graph.nodes[ONE_TYPE].y)
    for rank, rec in enumerate(recs):
        for tag, epochs in (("shuffled", 2), ("ordered", 1), ("mask", 1)):
            for e in range(epochs):
                for b, got in enumerate(_batches(rec, tag, e)):
                    size = int(got["batch_size"][0])
                    seeds = torch.from_numpy(got["n_id"][:size])
                    want = sampler.sample(
                        seeds, input_type=ONE_TYPE, seed=batch_seed_for(7, rank, e, b),
                        with_edge_index=True,
                    )  # fmt: skip
                    np.testing.assert_array_equal(got["n_id"], want.n_id[ONE_TYPE].numpy())
                    (ei,) = want.edge_index.values()
                    np.testing.assert_array_equal(got["edge_index"], ei.numpy())
                    np.testing.assert_array_equal(got["x"], x[got["n_id"]])  # fp32: exact
                    np.testing.assert_array_equal(got["y"], y[got["n_id"][:size]])
        for b, got in enumerate(_batches(rec, "int8", 0)):  # halo rows through the int8 codec
            ref = x[got["n_id"]]
            scale = np.abs(ref).max(axis=1, keepdims=True) / 127 + 1e-12
            assert np.all(np.abs(got["x"] - ref) <= scale * 1.01), b


@pytest.mark.timeout(200)
def test_shuffling_repeats_from_the_seed_and_changes_every_epoch(node_run) -> None:
    _, recs = node_run
    for rec in recs:
        first, again = _batches(rec, "shuffled", 0), _batches(rec, "again", 0)
        for a, b in zip(first, again, strict=True):
            np.testing.assert_array_equal(a["n_id"], b["n_id"])
            np.testing.assert_array_equal(a["edge_index"], b["edge_index"])
        e0, e1 = _batches(rec, "shuffled", 0), _batches(rec, "shuffled", 1)
        assert not np.array_equal(e0[0]["n_id"], e1[0]["n_id"])


def _seeds_of(batch: dict) -> np.ndarray:
    return batch["n_id"][: int(batch["batch_size"][0])]


@pytest.mark.timeout(200)
def test_the_shuffle_is_global_one_part_batches_are_the_ranks_unions(
    node_run, tiny_graph, tmp_path
) -> None:
    """The 2-rank run's batch ``b`` over both ranks holds a 1-part run's batch ``b``'s seeds."""
    store, recs = node_run
    one = tmp_path / "one"
    write_partitions(tiny_graph, partition(tiny_graph, "random", 1, seed=0), one, num_hops=2)
    (whole,) = run_ranks(one, tmp_path, "one", world=1)
    assert int(whole["shuffled/len"][0]) == int(recs[0]["shuffled/len"][0])
    sizes = set()
    for e in range(2):
        ranks = [_batches(rec, "shuffled", e) for rec in recs]
        for b, got in enumerate(_batches(whole, "shuffled", e)):
            union = np.concatenate([_seeds_of(batches[b]) for batches in ranks])
            np.testing.assert_array_equal(np.sort(union), np.sort(_seeds_of(got)))
            sizes.add(tuple(len(_seeds_of(batches[b])) for batches in ranks))
    assert len(sizes) > 1  # a rank's share of a global batch varies


@pytest.mark.timeout(200)
def test_gnnsys_train_steps_on_exactly_the_loaders_batches(node_run, tmp_path, monkeypatch) -> None:
    """One data path: ``gnnsys train`` on the store, with the loader's settings, steps on the
    very batches ``DistNeighborLoader`` yields a user's loop: the same count per epoch and,
    batch by batch on every rank, the same seeds and sampled nodes in the same order."""
    from dataclasses import replace

    from gnnsys.train.control.run import train_local
    from tests.train import replay_reference as ref
    from tests.train.run_configs import sbm_run

    store, recs = node_run  # the loaders: fanouts [4, 3], batch_size 40, seed 7, shuffled
    cfg = sbm_run(
        num_nodes=1000, num_features=16, parts=2, fanouts=(4, 3), hidden=8, batch_size=40,
        epochs=2, trainer={"seed": 7},
    )  # fmt: skip
    cfg = replace(cfg, data=replace(cfg.data, store=str(store)), eval=replace(cfg.eval, every=0))
    with ref.recording(monkeypatch) as rec:
        train_local(cfg, tmp_path / "run")
    for r, record in enumerate(recs):
        loader = [batch for e in range(2) for batch in _batches(record, "shuffled", e)]
        steps = rec.steps[r]
        assert len(steps) == len(loader) == 2 * int(record["shuffled/len"][0])
        for b, (step, batch) in enumerate(zip(steps, loader, strict=True)):
            assert step.num_items == int(batch["batch_size"][0]), (r, b)
            if step.n_id is None:  # an empty batch: no seeds on either side
                assert batch["n_id"].size == 0, (r, b)
                continue
            assert np.array_equal(step.n_id.numpy(), batch["n_id"]), (r, b)


@pytest.mark.timeout(200)
def test_pyg_graphsage_trains_under_ddp_on_the_batches(node_run) -> None:
    _, recs = node_run
    losses = recs[0]["train/losses"]
    assert losses[-1] < 0.6 * losses[0], losses
    # DDP keeps the replicas equal: the same all-reduced gradients on both ranks
    torch.testing.assert_close(
        torch.from_numpy(recs[0]["train/weights"]), torch.from_numpy(recs[1]["train/weights"]),
        rtol=0, atol=0,
    )  # fmt: skip


def typed_run(tmp_path: Path, scenario: str):
    """A small synthetic MAG in 2 random parts and the rank records of ``scenario``."""
    from gnnsys.datasets.mag import synthetic_mag

    mag = synthetic_mag(0.002, reverse=True)
    store = tmp_path / "store"
    write_partitions(mag, partition_hetero(mag, "random", 2, 0), store, num_hops=2)
    return mag, store, run_ranks(store, tmp_path, scenario)


@pytest.mark.timeout(200)
def test_typed_store_gives_hetero_data_equal_to_the_whole_graph(tmp_path) -> None:
    mag, store, recs = typed_run(tmp_path, "typed")
    fanouts = {tuple(et): (3, 2) for et in mag.relations}
    graph, sampler = _reference(store, fanouts)
    assert len({int(r["typed/len"][0]) for r in recs}) == 1
    for rank, rec in enumerate(recs):
        seen = []
        for b, got in enumerate(_batches(rec, "typed", 0)):
            size = int(got["batch_size"][0])
            seeds = torch.from_numpy(got["paper/n_id"][:size])
            seen.append(seeds.numpy())
            want = sampler.sample(
                seeds, input_type="paper", seed=batch_seed_for(7, rank, 0, b),
                with_edge_index=True,
            )  # fmt: skip
            for t, n_id in want.n_id.items():
                np.testing.assert_array_equal(got[f"{t}/n_id"], n_id.numpy())
                if f"{t}/x" in got:
                    xt = np.asarray(graph.nodes[t].x)
                    np.testing.assert_array_equal(got[f"{t}/x"], xt[n_id.numpy()])
            for et, ei in want.edge_index.items():
                np.testing.assert_array_equal(got[f"{'__'.join(et)}/edge_index"], ei.numpy())
            y = np.asarray(graph.nodes["paper"].y)
            np.testing.assert_array_equal(got["y"], y[seeds.numpy()])
        want = _owned_train(store, rank, "paper")
        np.testing.assert_array_equal(np.sort(np.concatenate(seen)), want)


@pytest.mark.timeout(200)
def test_a_rank_short_of_seeds_yields_empty_batches_with_every_field(node_run) -> None:
    _, recs = node_run
    lengths = [int(r["uneven/len"][0]) for r in recs]
    assert lengths == [2, 2]  # ceil(101 seeds / (40 x 2 ranks)): the same on both ranks
    sizes = [[int(b["batch_size"][0]) for b in _batches(r, "uneven", 0)] for r in recs]
    assert sizes == [[50, 50], [1, 0]]
    empty = _batches(recs[1], "uneven", 0)[1]
    assert empty["x"].shape == (0, 16) and empty["edge_index"].shape == (2, 0)
    assert empty["n_id"].shape == (0,) and empty["y"].shape == (0,)
    assert empty["input_id"].shape == (0,)


@pytest.mark.timeout(200)
def test_layer0_owner_sums_and_fused_codes_give_the_rows_means(tiny_graph, tmp_path) -> None:
    """``layer0='owner'`` (fp32) and ``'fused'`` (int8) against ``'rows'`` with the same codec:
    the same nodes, ``x`` the rows of layer 0's destinations, ``agg0`` the mean of their
    in-neighbours' rows, and HopTrimmed(GraphSAGE) on ``agg0`` the model on the rows."""
    store = tmp_path / "store"
    write_partitions(tiny_graph, partition(tiny_graph, "random", 2, seed=0), store, num_hops=2)
    recs = run_ranks(store, tmp_path, "layer0")
    tol = {"rtol": 1e-5, "atol": 1e-5}  # float32 sums in another order
    assert 0 in recs[1]["short/agg0_rows"].tolist()  # rank 1's empty batches have agg0
    for rec in recs:
        for mode, codec in (("owner", "fp32"), ("fused", "int8")):
            sent = {
                str(c): int(b)
                for c, b in zip(
                    rec[f"{mode}-{codec}/categories"], rec[f"{mode}-{codec}/bytes"], strict=True
                )
            }
            assert (sent["partial_response"] > 0) == (mode == "owner")  # the owners summed
            rows, opted = _batches(rec, f"rows-{codec}", 0), _batches(rec, f"{mode}-{codec}", 0)
            assert len(rows) == len(opted) > 0
            for want, got in zip(rows, opted, strict=True):
                np.testing.assert_array_equal(got["n_id"], want["n_id"])
                m0 = int(want["nodes"][:-1].sum())
                assert got["x"].shape[0] == m0 < want["x"].shape[0]
                torch.testing.assert_close(torch.from_numpy(got["x"]),
                                           torch.from_numpy(want["x"][:m0]), **tol)  # fmt: skip
                src, dst = (torch.from_numpy(e) for e in want["edge_index"])
                x = torch.from_numpy(want["x"])
                sums = torch.zeros(m0, x.shape[1]).index_add_(0, dst, x[src])
                mean = sums / torch.bincount(dst, minlength=m0).clamp(min=1)[:, None]
                torch.testing.assert_close(torch.from_numpy(got["agg0"]), mean, **tol)
                torch.testing.assert_close(torch.from_numpy(got["y"]),
                                           torch.from_numpy(want["y"]), **tol)  # fmt: skip
