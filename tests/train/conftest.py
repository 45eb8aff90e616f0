"""Fixtures of the training tests: a small partitioned store on disk."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gnnsys.cache.codecs import Codec, EncodedRows
from gnnsys.partitioners import partition
from gnnsys.store import write_partitions
from gnnsys.train.remote.client import SampleArrays
from gnnsys.train.remote.server import ShardOwner
from gnnsys.types import Graph


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

    def degree_many(self, gid_by_part: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
        self.calls += [("degree", p) for p in gid_by_part]
        return {p: self.owners[p].degree(gid) for p, gid in gid_by_part.items()}

    def fetch_many(self, gid_by_part: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
        self.calls += [("fetch", p) for p in gid_by_part]
        return {p: self.owners[p].fetch(gid) for p, gid in gid_by_part.items()}

    def fetch_encoded_many(
        self, gid_by_part: dict[int, np.ndarray], codec: Codec, node_type: str | None = None
    ) -> dict[int, EncodedRows]:
        assert node_type is None  # one node type
        self.calls += [("fetch", p) for p in gid_by_part]
        return {p: self.owners[p].fetch_encoded(gid, codec) for p, gid in gid_by_part.items()}
