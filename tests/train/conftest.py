"""Fixtures of the training tests: small partitioned stores on disk (homogeneous and typed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

from gnnsys.cache.codecs import Codec, EncodedRows
from gnnsys.datasets.mag import synthetic_mag
from gnnsys.partitioners import partition, partition_hetero
from gnnsys.store import write_partitions
from gnnsys.train.remote.client import SampleArrays
from gnnsys.train.remote.server import LocalOwnerClient as RuntimeClient
from gnnsys.train.remote.server import ShardOwner
from gnnsys.types import ONE_TYPE, EdgeType, Graph
from gnnsys.types.relations import HeteroGraph


@pytest.fixture(scope="session")
def mag() -> HeteroGraph:
    """A small ``synthetic:mag`` (scale 0.002, reverse relations: 3.9 k nodes, 4 types)."""
    return synthetic_mag(0.002, reverse=True)


@pytest.fixture(scope="session")
def stores(mag: HeteroGraph, tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """``mag`` written as 1, 2 and 4 random parts (2-hop halo); read-only for the tests."""
    out = {}
    for parts in (1, 2, 4):
        root = tmp_path_factory.mktemp(f"mag{parts}") / "store"
        write_partitions(mag, partition_hetero(mag, "random", parts, 0), root, num_hops=2)
        out[parts] = root
    return out


@pytest.fixture(scope="session")
def store4(tiny_graph: Graph, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tiny_graph`` split into 4 random parts, with a 2-hop halo."""
    root = tmp_path_factory.mktemp("store4") / "store"
    write_partitions(tiny_graph, partition(tiny_graph, "random", 4, seed=0), root, num_hops=2)
    return root


class LocalOwnerClient(RuntimeClient):
    """The runtime's in-process ``OwnerClient`` over every part's ``ShardOwner``, counting calls.

    ``calls`` records ``(kind, part)`` of each owner call: ``sample``, ``fetch``, ``degree``,
    ``partial``.
    """

    def __init__(self, root: Path, num_parts: int) -> None:
        super().__init__([ShardOwner(str(root), p) for p in range(num_parts)])
        self.calls: list[tuple[str, int]] = []

    def sample_many(
        self,
        dst_by_part: dict[int, np.ndarray],
        fanout: int,
        *,
        seed: int,
        hop: int,
        replace: bool,
        edge_type: EdgeType | None = None,
    ) -> dict[int, SampleArrays]:
        self.calls += [("sample", p) for p in dst_by_part]
        return super().sample_many(
            dst_by_part, fanout, seed=seed, hop=hop, replace=replace, edge_type=edge_type
        )

    def fetch_encoded_many(
        self, gid_by_part: dict[int, np.ndarray], codec: Codec, node_type: str | None = None
    ) -> dict[int, EncodedRows]:
        self.calls += [("fetch", p) for p in gid_by_part]
        return super().fetch_encoded_many(gid_by_part, codec, node_type)

    def degree_many(
        self, gid_by_part: dict[int, np.ndarray], edge_type: EdgeType | None = None
    ) -> dict[int, np.ndarray]:
        self.calls += [("degree", p) for p in gid_by_part]
        return super().degree_many(gid_by_part, edge_type)

    def partial_many(
        self,
        req_by_part: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray | None]],
        codec: Codec,
        node_type: str | None = None,
    ) -> dict[int, EncodedRows]:
        self.calls += [("partial", p) for p in req_by_part]
        return super().partial_many(req_by_part, codec, node_type)


def rank_sources(
    store: Path, part: int, *, model: str = "sage", client: Any = None, **fields: Any
) -> Any:
    """Part ``part``'s typed sampler and row sources as the runtime builds them, and its ledger.

    ``build_sources`` over a ``WorkerSpec`` of the store (16 features, 4 classes, fanouts 3,2
    unless ``fields`` say otherwise: ``codec=``, ``cache=``, ``layer0=``, ``link=``,
    ``topology=``, ``trainer=``, ``sampler=``), asking the owners through ``client`` (``None``:
    the runtime's in-process client). Returns ``(sources, ledger, shard)``.
    """
    from gnnsys.models import ModelConfig
    from gnnsys.sampler import NeighborSampler
    from gnnsys.store import load_book, load_books, read_shard
    from gnnsys.train.rank import RankLayout, build_sources
    from gnnsys.train.remote.ledger import PerTypeLedger
    from gnnsys.train.trainer import Trainer
    from gnnsys.train.worker import WorkerSpec

    num_parts = load_book(store).num_parts
    spec = WorkerSpec(**{
        "rank": part, "world_size": num_parts, "store": str(store), "topology": "partitioned",
        "trainer": Trainer.Config(), "sampler": NeighborSampler.Config(fanouts=(3, 2)),
        "model": ModelConfig(name=model), "num_features": 16, "num_classes": 4,
        "deadline_s": 10.0, **fields,
    })  # fmt: skip
    shard = read_shard(store, part)
    books = {ONE_TYPE if t is None else t: b for t, b in load_books(store).items()}
    ledger = PerTypeLedger(list(shard.nodes))
    if client is None:
        client = RuntimeClient([ShardOwner(str(store), p) for p in range(num_parts)])
    sources = build_sources(
        spec, RankLayout.of(spec), shard, books, client, cast(Any, None), ledger, None,
        step=lambda: 0,
    )  # fmt: skip
    return sources, ledger, shard
