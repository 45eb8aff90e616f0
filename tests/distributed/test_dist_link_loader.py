"""``DistLinkNeighborLoader`` on 2 gloo ranks, against the whole graph sampled in one process.

Each batch is checked as PyG's ``edge_sample`` defines it: the endpoints of the positives and
negatives, made distinct and sorted, are the first nodes of ``n_id`` (PyG's non-disjoint
``unique``), ``edge_label_index`` / ``src_index`` ... index them, the labels are the positives'
(or 1) then zeros, and the sampled nodes and edges equal the runtime's sampler over the whole
graph from those seeds with the batch's seed. Every rank's positives are its links, once per
epoch, and every rank has the same length.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gnnsys.partitioners import partition
from gnnsys.store import load_books, write_partitions
from gnnsys.train.schedule import batch_seed_for
from gnnsys.types import ONE_RELATION, ONE_TYPE
from tests.distributed.dist_loader_rank import given_links
from tests.distributed.test_dist_loader import _batches, _reference, run_ranks, typed_run


def _link_batches(rec: dict, tag: str, epoch: int) -> list[dict]:
    return _batches(rec, tag, epoch, marker="batch")


@pytest.fixture(scope="module")
def link_run(tiny_graph, tmp_path_factory):
    root = tmp_path_factory.mktemp("distlinkloader")
    store = root / "store"
    write_partitions(tiny_graph, partition(tiny_graph, "random", 2, seed=0), store, num_hops=2)
    return store, run_ranks(store, root, "link")


def _check_sampled(got: dict, sampler, endpoints: np.ndarray, seed: int) -> None:
    """``n_id`` starts with the sorted distinct endpoints; nodes/edges equal the whole graph's."""
    seeds = np.unique(endpoints)
    np.testing.assert_array_equal(got["n_id"][: seeds.size], seeds)
    want = sampler.sample_types({ONE_TYPE: torch.from_numpy(seeds)}, seed=seed)
    np.testing.assert_array_equal(got["n_id"], want.n_id[ONE_TYPE].numpy())
    np.testing.assert_array_equal(got["edge_index"], want.edge_index[ONE_RELATION].numpy())


@pytest.mark.timeout(200)
def test_binary_batches_hold_each_edge_once_with_seeded_negatives(link_run) -> None:
    store, recs = link_run
    graph, sampler = _reference(store, {ONE_RELATION: (3, 2)})
    x = np.asarray(graph.nodes[ONE_TYPE].x)
    rel = graph.relations[ONE_RELATION]
    indptr = np.asarray(rel.indptr)
    dst = np.repeat(np.arange(indptr.size - 1), np.diff(indptr))
    every = {(int(s), int(d)) for s, d in zip(np.asarray(rel.indices), dst, strict=True)}
    assert len({int(r["binary/len"][0]) for r in recs}) == 1
    part = load_books(store)[None].part_N
    for e in range(2):
        seen: list[tuple[int, int]] = []
        orders = []
        for rank, rec in enumerate(recs):
            batches = _link_batches(rec, "binary", e)
            assert len(batches) == int(rec["binary/len"][0])
            order = []
            for b, got in enumerate(batches):
                pairs = got["n_id"][got["edge_label_index"]]  # [2, B + B_neg] global ids
                label = got["edge_label"]
                num_pos = int((label == 1).sum())
                assert pairs.shape[1] == num_pos + math.ceil(num_pos * 2)
                np.testing.assert_array_equal(label[:num_pos], np.ones(num_pos))
                np.testing.assert_array_equal(label[num_pos:], np.zeros(pairs.shape[1] - num_pos))
                assert np.all(part[pairs[1, :num_pos]] == rank)  # at the destination's owner
                seen += [(int(s), int(d)) for s, d in pairs[:, :num_pos].T]
                order.append(got["input_id"])
                np.testing.assert_array_equal(got["x"], x[got["n_id"]])
                _check_sampled(got, sampler, pairs, batch_seed_for(7, rank, e, b))
            orders.append(np.concatenate(order))
        assert len(seen) == len(every) and set(seen) == every  # each edge once per epoch
    first = [np.concatenate([b["input_id"] for b in _link_batches(r, "binary", 0)]) for r in recs]
    second = [np.concatenate([b["input_id"] for b in _link_batches(r, "binary", 1)]) for r in recs]
    assert any(not np.array_equal(a, b) for a, b in zip(first, second, strict=True))


@pytest.mark.timeout(200)
def test_given_links_go_to_their_source_owner_with_their_labels(link_run) -> None:
    store, recs = link_run
    _, sampler = _reference(store, {ONE_RELATION: (3, 2)})
    links = given_links().numpy()
    labels = np.arange(300) % 2
    part = load_books(store)[None].part_N
    for rank, rec in enumerate(recs):
        ids = []
        for b, got in enumerate(_link_batches(rec, "given", 0)):
            pairs = got["n_id"][got["edge_label_index"]]
            np.testing.assert_array_equal(pairs, links[:, got["input_id"]])
            np.testing.assert_array_equal(got["edge_label"], labels[got["input_id"]])
            _check_sampled(got, sampler, pairs, batch_seed_for(7, rank, 0, b))
            ids.append(got["input_id"])
        np.testing.assert_array_equal(
            np.sort(np.concatenate(ids)), np.flatnonzero(part[links[0]] == rank)
        )


@pytest.mark.timeout(200)
def test_triplet_batches_index_source_positive_and_negatives(link_run) -> None:
    store, recs = link_run
    _, sampler = _reference(store, {ONE_RELATION: (3, 2)})
    links = given_links().numpy()
    for rank, rec in enumerate(recs):
        for b, got in enumerate(_link_batches(rec, "triplet", 0)):
            n_id, num_pos = got["n_id"], got["input_id"].size
            assert "edge_label_index" not in got and "edge_label" not in got
            assert got["dst_neg_index"].shape == (num_pos, 3)
            np.testing.assert_array_equal(n_id[got["src_index"]], links[0, got["input_id"]])
            np.testing.assert_array_equal(n_id[got["dst_pos_index"]], links[1, got["input_id"]])
            endpoints = np.concatenate(
                [n_id[got["src_index"]], n_id[got["dst_pos_index"]],
                 n_id[got["dst_neg_index"]].ravel()]
            )  # fmt: skip
            _check_sampled(got, sampler, endpoints, batch_seed_for(7, rank, 0, b))


@pytest.mark.timeout(200)
def test_typed_store_puts_link_fields_on_the_relation(tmp_path) -> None:
    mag, store, recs = typed_run(tmp_path, "typed-link")
    et = ("paper", "has_topic", "field_of_study")
    _, sampler = _reference(store, {tuple(r): (3, 2) for r in mag.relations})
    rel = mag.relations[et]
    dst = np.repeat(np.arange(len(rel.indptr) - 1), np.diff(rel.indptr))
    every = {(int(s), int(d)) for s, d in zip(np.asarray(rel.indices), dst, strict=True)}
    assert len({int(r["typed/len"][0]) for r in recs}) == 1
    seen = []
    for rank, rec in enumerate(recs):
        for b, got in enumerate(_link_batches(rec, "typed", 0)):
            index, label = got["edge_label_index"], got["edge_label"]
            num_pos = int((label == 1).sum())
            src, dst_ids = got["paper/n_id"][index[0]], got["field_of_study/n_id"][index[1]]
            seen += list(zip(src[:num_pos].tolist(), dst_ids[:num_pos].tolist(), strict=True))
            seeds = {"paper": np.unique(src), "field_of_study": np.unique(dst_ids)}
            for t, ids in seeds.items():
                np.testing.assert_array_equal(got[f"{t}/n_id"][: ids.size], ids)
            want = sampler.sample_types(
                {t: torch.from_numpy(v) for t, v in seeds.items()},
                seed=batch_seed_for(7, rank, 0, b),
            )
            for t, n_id in want.n_id.items():
                np.testing.assert_array_equal(got[f"{t}/n_id"], n_id.numpy())
            for r, ei in want.edge_index.items():
                np.testing.assert_array_equal(got[f"{'__'.join(r)}/edge_index"], ei.numpy())
    assert len(seen) == len(every) and set(seen) == every


@pytest.mark.timeout(200)
def test_pyg_graphsage_learns_links_under_ddp_on_the_batches(link_run) -> None:
    _, recs = link_run
    losses = [r["train/losses"] for r in recs]
    assert losses[0][-1] < 0.9 * losses[0][0], losses[0]  # it learns
    np.testing.assert_array_equal(recs[0]["train/weights"], recs[1]["train/weights"])  # DDP
