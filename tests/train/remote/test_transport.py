"""Routed structure and feature requests: exact rows, exact bytes, one message per owner.

The sources are a rank's as the runtime builds them (``gnnsys.train.rank.build_sources``): a
homogeneous store is the one relation ``ONE_RELATION`` of the one node type ``ONE_TYPE``, whose
type-local ids are its gids.
"""

from __future__ import annotations

from pathlib import Path

import torch

from gnnsys.sampler import CSRNeighborSource
from gnnsys.sampler.csr_source import NO_EDGE_ID
from gnnsys.store import load_book, load_shard, read_shard
from gnnsys.train.remote.features import RoutedFeatureSource
from gnnsys.train.remote.ledger import Ledger
from gnnsys.train.remote.routed import RoutedNeighborSource
from gnnsys.types import ONE_RELATION, ONE_TYPE, Graph
from tests.train.conftest import LocalOwnerClient


def _routed(
    store: Path, part: int
) -> tuple[RoutedNeighborSource, RoutedFeatureSource, Ledger, LocalOwnerClient]:
    """Part ``part``'s routed neighbor and feature sources, as ``build_sources`` makes them."""
    book = load_book(store)
    shard = read_shard(store, part)
    client = LocalOwnerClient(store, book.num_parts)
    ledger = Ledger()
    local = CSRNeighborSource.from_relation(shard, ONE_RELATION, book.lid_N, edge_ids=False)
    x = shard.nodes[ONE_TYPE].data["x"]
    return (
        RoutedNeighborSource(part, book.part_N, local, client, ledger, edge_type=ONE_RELATION),
        RoutedFeatureSource(part, book.part_N, book.lid_N, x, client, ledger, node_type=ONE_TYPE),
        ledger,
        client,
    )


def test_routed_sampling_equals_whole_graph(tiny_graph: Graph, store4: Path) -> None:
    routed, _, ledger, client = _routed(store4, part=1)
    whole = CSRNeighborSource.from_graph(tiny_graph)
    dst = torch.tensor([5, 900, 5, 17, 333, 42, 999, 0], dtype=torch.int64)
    for fanout, replace in ((3, False), (-1, False), (4, True)):
        got = routed.sample_neighbors(dst, fanout, seed=7, hop=1, replace=replace)
        want = whole.sample_neighbors(dst, fanout, seed=7, hop=1, replace=replace)
        assert torch.equal(got.count_M, want.count_M)
        assert torch.equal(got.src_gid_E, want.src_gid_E)
        assert bool((got.e_id_E == NO_EDGE_ID).all())  # edge ids are not read, nor sent
    # one message per remote owner per call
    book = load_book(store4)
    remote_parts = set(book.owner(dst.numpy()).tolist()) - {1}
    assert sorted(p for _, p in client.calls[: len(remote_parts)]) == sorted(remote_parts)
    assert ledger.snapshot().messages["structure_request"] == 3 * len(remote_parts)


def test_structure_bytes_are_exact(store4: Path) -> None:
    routed, _, ledger, _ = _routed(store4, part=0)
    book = load_book(store4)
    dst = torch.arange(0, 1000, 7, dtype=torch.int64)
    got = routed.sample_neighbors(dst, 5, seed=1, hop=0)
    remote = book.owner(dst.numpy()) != 0
    snap = ledger.snapshot()
    assert snap.bytes["structure_request"] == 8 * int(remote.sum())
    remote_edges = int(got.count_M[torch.from_numpy(remote)].sum())
    # count_M (int64) per remote dst + src_gid (int64) per remote edge; no edge ids
    assert snap.bytes["structure_response"] == 8 * int(remote.sum()) + 8 * remote_edges


def test_feature_fetch_rows_and_bytes(tiny_graph: Graph, store4: Path) -> None:
    _, features, ledger, client = _routed(store4, part=2)
    gid = torch.tensor([3, 3, 700, 1, 999, 250], dtype=torch.int64)
    rows = features.fetch(gid)
    assert tiny_graph.x is not None
    assert torch.equal(rows, torch.from_numpy(tiny_graph.x[gid.numpy()]))
    owner = load_book(store4).owner(gid.numpy())
    remote = len({int(g) for g, p in zip(gid.tolist(), owner, strict=True) if p != 2})
    snap = ledger.snapshot()  # a gid repeated in one request travels once
    assert snap.bytes["feature_request"] == 8 * remote
    assert snap.bytes["feature_response"] == 4 * tiny_graph.num_features * remote
    assert snap.messages["feature_request"] == len({p for op, p in client.calls if op == "fetch"})


def test_encoded_fetch_counts_encoded_bytes(tiny_graph: Graph, store4: Path) -> None:
    from gnnsys.cache.codecs import make_codec

    _, plain, plain_ledger, _ = _routed(store4, part=0)
    book = load_book(store4)
    shard = load_shard(store4, 0)
    assert shard.x is not None and tiny_graph.x is not None
    ledger = Ledger()
    client = LocalOwnerClient(store4, book.num_parts)
    codec = make_codec("int8")
    encoded = RoutedFeatureSource(0, book.part_N, book.lid_N, shard.x, client, ledger, codec=codec)
    gid = torch.arange(0, 1000, 3, dtype=torch.int64)
    rows = encoded.fetch(gid)
    exact = torch.from_numpy(tiny_graph.x[gid.numpy()])
    assert torch.allclose(rows, exact, atol=0.05)
    plain.fetch(gid)
    remote = book.owner(gid.numpy()) != 0
    want = sum(
        codec.encode(exact[torch.from_numpy(remote & (book.owner(gid.numpy()) == p))]).nbytes
        for p in range(1, book.num_parts)
    )
    got = ledger.snapshot()
    assert got.bytes["feature_response"] == want
    assert got.bytes["feature_response"] < plain_ledger.snapshot().bytes["feature_response"] / 3
    assert got.bytes["feature_request"] == plain_ledger.snapshot().bytes["feature_request"]


def test_distinct_fetch_equals_fetch(tiny_graph: Graph, store4: Path) -> None:
    """A request that never repeats a gid takes the short path: same rows, bytes and stats."""
    from gnnsys.cache import HaloCache
    from gnnsys.cache.admission import make_policy
    from gnnsys.cache.codecs import make_codec

    book, shard = load_book(store4), load_shard(store4, 1)
    assert shard.x is not None and tiny_graph.x is not None
    gid = torch.from_numpy(
        torch.randperm(tiny_graph.num_nodes, generator=torch.Generator().manual_seed(0))[
            :400
        ].numpy()
    )
    score_N = torch.rand(tiny_graph.num_nodes, generator=torch.Generator().manual_seed(1))
    for codec_name, budget in (("fp32", 0), ("int8", 0), ("fp32", 8_000)):
        got = []
        for method in ("fetch", "fetch_distinct"):
            ledger, codec = Ledger(), make_codec(codec_name)
            policy = make_policy("degree" if budget else "none", score_N=score_N)
            config = HaloCache.Config(capacity_bytes=budget, policy=policy.name)
            cache = HaloCache(config, feature_dim=16, codec=codec, policy=policy)
            source = RoutedFeatureSource(
                1, book.part_N, book.lid_N, shard.x, LocalOwnerClient(store4, book.num_parts),
                ledger, codec=codec, cache=cache,
            )  # fmt: skip
            out = [getattr(source, method)(gid), getattr(source, method)(gid.flip(0))]
            got.append((out, ledger.snapshot(), source.counters(), cache.stats))
        (a, la, ca, sa), (b, lb, cb, sb) = got
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True)), codec_name
        assert la.bytes == lb.bytes and la.messages == lb.messages
        assert ca == cb and sa == sb
        assert (sa.hits > 0) == (budget > 0), codec_name  # the second request hits a cache
    exact = torch.from_numpy(tiny_graph.x[gid.numpy()])
    plain = RoutedFeatureSource(
        1, book.part_N, book.lid_N, shard.x, LocalOwnerClient(store4, book.num_parts), Ledger()
    )
    assert torch.equal(plain.fetch_distinct(gid), exact)
