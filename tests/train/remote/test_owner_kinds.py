"""One ``ShardOwner`` for stores of either kind, keyed by node type and relation.

A homogeneous store is the one-type case (type and relation ``None``, ids are gids); a typed
store's calls name the type or relation (ids are type-local, routed by ``load_books``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from gnnsys.cache.codecs import make_codec
from gnnsys.store import load_book, load_books, load_shard, read_shard
from gnnsys.store.info import store_info
from gnnsys.train.remote.server import ShardOwner
from gnnsys.types import PartitionBook
from gnnsys.types.relations import HeteroGraph

CITES = ("paper", "cites", "paper")


def test_books_are_keyed_by_node_type(store4: Path, stores: dict[int, Path]) -> None:
    one = load_books(store4)
    assert list(one) == [None]
    book = load_book(store4)
    assert np.array_equal(one[None].part_N, book.part_N)
    assert np.array_equal(one[None].lid_N, book.lid_N)
    typed = load_books(stores[4])
    for p in range(4):
        shard = read_shard(stores[4], p)
        for t, nodes in shard.nodes.items():
            b = typed[t]
            assert isinstance(b, PartitionBook) and b.num_parts == 4
            owned = np.asarray(nodes.owned_lid)
            assert np.all(b.part_N[owned] == p)  # the type's owner of every owned id
            assert np.array_equal(b.lid_N[owned], np.arange(owned.shape[0]))  # its position


def test_store_info_of_either_kind(store4: Path, stores: dict[int, Path], mag: HeteroGraph) -> None:
    one = store_info(store4)
    assert (one.node_types, one.edge_types, one.typed) == ((None,), (None,), False)
    assert one.named_types == ["node"] and one.num_features == load_shard(store4, 0).x.shape[1]
    typed = store_info(stores[2])
    assert typed.typed and typed.named_types == list(mag.nodes)
    assert typed.named_relations == list(mag.relations)
    assert typed.named_dims == {"paper": int(mag.nodes["paper"].x.shape[1])}
    assert typed.num_features == 0  # no type is None


def test_typed_owner_answers_per_type_and_relation(stores: dict[int, Path]) -> None:
    root = stores[2]
    books = load_books(root)
    shard = read_shard(root, 1)
    owner = ShardOwner(str(root), 1)
    lid = np.asarray(shard.nodes["paper"].owned_lid)[::3]
    rows = owner.fetch(lid, "paper")
    x = np.asarray(shard.nodes["paper"].data["x"], dtype=np.float32)
    assert np.array_equal(rows, x[books["paper"].lid_N[lid]])
    fp32 = make_codec("fp32")
    got = fp32.decode(owner.fetch_encoded(lid, fp32, "paper"))
    assert torch.equal(got, torch.from_numpy(rows))
    rel = shard.relations[CITES]
    indptr = np.asarray(rel.indptr)
    assert np.array_equal(owner.degree(lid, CITES), (indptr[1:] - indptr[:-1])[::3])
    count, src, _ = owner.sample(lid, -1, 0, 0, False, CITES)
    assert np.array_equal(count, owner.degree(lid, CITES))
    assert src.shape[0] == int(count.sum())


def test_owner_refuses_keys_of_the_other_kind(store4: Path, stores: dict[int, Path]) -> None:
    one = ShardOwner(str(store4), 0)
    gid = np.asarray(load_shard(store4, 0).owned_gid)[:2]
    with pytest.raises(
        ValueError, match=r"node type 'paper' is not in the store.*\['node', None\]"
    ):
        one.fetch(gid, "paper")
    assert np.array_equal(one.fetch(gid, "node"), one.fetch(gid))  # its one type, by name too
    with pytest.raises(ValueError, match="relation .*cites.* is not in the store"):
        one.sample(gid, 2, 0, 0, False, CITES)
    typed = ShardOwner(str(stores[2]), 0)
    with pytest.raises(ValueError, match="node type None is not in the store"):
        typed.fetch(np.zeros(1, dtype=np.int64))
    with pytest.raises(ValueError, match="relation None is not in the store"):
        typed.degree(np.zeros(1, dtype=np.int64))
    featureless = next(t for t in load_books(stores[2]) if t != "paper")
    with pytest.raises(ValueError, match=f"node type '{featureless}' has no stored features"):
        typed.fetch(np.zeros(1, dtype=np.int64), featureless)
