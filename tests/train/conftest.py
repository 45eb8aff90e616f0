"""Fixtures of the training tests: small partitioned stores on disk (homogeneous and typed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gnnsys.cache.codecs import Codec, EncodedRows
from gnnsys.datasets.hetero import HeteroGraph
from gnnsys.datasets.mag import synthetic_mag
from gnnsys.partitioners import partition, partition_hetero
from gnnsys.store import write_hetero_partitions, write_partitions
from gnnsys.train.remote.client import SampleArrays
from gnnsys.train.remote.server import ShardOwner
from gnnsys.types import Graph


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
        write_hetero_partitions(mag, partition_hetero(mag, "random", parts, 0), root, num_hops=2)
        out[parts] = root
    return out


@pytest.fixture(scope="session")
def store4(tiny_graph: Graph, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tiny_graph`` split into 4 random parts, with a 2-hop halo."""
    root = tmp_path_factory.mktemp("store4") / "store"
    write_partitions(tiny_graph, partition(tiny_graph, "random", 4, seed=0), root, num_hops=2)
    return root


class LocalOwnerClient:
    """In-process ``OwnerClient``: the same ``ShardOwner`` objects, called directly."""

    def __init__(self, root: Path, num_parts: int) -> None:
        self.owners = [ShardOwner(str(root), p) for p in range(num_parts)]
        self.calls: list[tuple[str, int]] = []

    def sample_many(
        self,
        dst_by_part: dict[int, np.ndarray],
        fanout: int,
        *,
        seed: int,
        hop: int,
        replace: bool,
        edge_type: tuple[str, str, str] | None = None,
    ) -> dict[int, SampleArrays]:
        assert edge_type is None  # one relation
        self.calls += [("sample", p) for p in dst_by_part]
        return {
            p: self.owners[p].sample(dst, fanout, seed, hop, replace)
            for p, dst in dst_by_part.items()
        }

    def degree_many(
        self, gid_by_part: dict[int, np.ndarray], edge_type: tuple[str, str, str] | None = None
    ) -> dict[int, np.ndarray]:
        self.calls += [("degree", p) for p in gid_by_part]
        return {p: self.owners[p].degree(gid, edge_type) for p, gid in gid_by_part.items()}

    def fetch_many(self, gid_by_part: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
        self.calls += [("fetch", p) for p in gid_by_part]
        return {p: self.owners[p].fetch(gid) for p, gid in gid_by_part.items()}

    def fetch_encoded_many(
        self, gid_by_part: dict[int, np.ndarray], codec: Codec, node_type: str | None = None
    ) -> dict[int, EncodedRows]:
        assert node_type is None  # one node type
        self.calls += [("fetch", p) for p in gid_by_part]
        return {p: self.owners[p].fetch_encoded(gid, codec) for p, gid in gid_by_part.items()}
