"""How a worker calls the shard owners: the ``OwnerClient`` protocol and its Ray executor.

The Ray client issues every owner's call before waiting on any, so owners work in parallel, and
every wait has a deadline.

Shape legend: ``M`` destinations, ``E`` drawn edges, ``K`` requested rows, ``F`` features.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import numpy as np

from gnnsys.cache.codecs import Codec, EncodedRows
from gnnsys.errors import RemoteCallTimeoutError
from gnnsys.types import EdgeType

__all__ = [
    "DelayedOwnerClient",
    "EdgeType",
    "OwnerClient",
    "RayOwnerClient",
    "NO_EDGE_IDS",
    "SampleArrays",
    "get_within",
]

"""``(src, rel, dst)`` of a typed store's relation."""

SampleArrays = tuple[np.ndarray, np.ndarray, np.ndarray]
"""``(count_M, src_gid_E, e_id_E)`` int64 arrays as an owner returns them; an empty ``e_id_E``
(``NO_EDGE_IDS``) means the ids were not read (the runtime's owners never read them)."""

NO_EDGE_IDS = np.zeros(0, dtype=np.int64)
"""The ``e_id_E`` of an answer without edge ids: nothing on the wire."""


class OwnerClient(Protocol):
    """Sends one batched request to each owner and returns the answers keyed by part.

    One protocol for every store: ``edge_type`` and ``node_type`` name the relation and the
    node type of a typed store (ids are then type-local); ``None`` is the one relation and the
    one node type of a homogeneous store (ids are gids). ``degree_many`` and ``partial_many``
    are answered by homogeneous owners only.
    """

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
        """Sample in-neighbors of ``dst_by_part[p]`` at owner ``p``, for every ``p`` at once."""
        ...

    def fetch_encoded_many(
        self, gid_by_part: dict[int, np.ndarray], codec: Codec, node_type: str | None = None
    ) -> dict[int, EncodedRows]:
        """Rows of ``gid_by_part[p]`` encoded by owner ``p`` with ``codec`` before sending."""
        ...

    def degree_many(
        self, gid_by_part: dict[int, np.ndarray], edge_type: EdgeType | None = None
    ) -> dict[int, np.ndarray]:
        """``[K]`` int64 whole-graph in-degrees of ``gid_by_part[p]`` from owner ``p``.

        Over relation ``edge_type`` (type-local ids); ``None``: a homogeneous store's one.
        """
        ...

    def partial_many(
        self,
        req_by_part: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray | None]],
        codec: Codec,
        node_type: str | None = None,
    ) -> dict[int, EncodedRows]:
        """Partial sums ``[G, F]`` of ``req_by_part[p]`` computed at owner ``p``, for every ``p``.

        Each request is ``(group_rowptr, src_gid, src_weight)`` (see ``ShardOwner.partial_sums``);
        answers are encoded with ``codec`` (``FP32Codec``: plain float32 sums). ``node_type``:
        whose rows are summed (``None`` on a graph of one type).
        """
        ...


def get_within(refs: dict[int, Any], deadline_s: float, what: str, whose: str) -> dict[int, Any]:
    """``ray.get`` of every ref in ``refs`` with one deadline, keyed like ``refs``.

    Raises:
        RemoteCallTimeoutError: Naming ``what`` and the keys, when the deadline passes.
    """
    import ray

    try:
        values = ray.get(list(refs.values()), timeout=deadline_s)
    except ray.exceptions.GetTimeoutError as err:
        raise RemoteCallTimeoutError(
            f"{what} {sorted(refs)} got no answer within {deadline_s}s; "
            f"raise the deadline (--deadline) or check the {whose} logs"
        ) from err
    return dict(zip(refs, values, strict=True))


class RayOwnerClient:
    """:class:`OwnerClient` over ``ShardOwner`` actor handles, with a deadline on every wait.

    Args:
        owners: Actor handle of each part's owner, indexed by part.
        deadline_s: Seconds a batch of calls may take before ``RemoteCallTimeoutError``.
    """

    def __init__(self, owners: list[Any], deadline_s: float) -> None:
        self.owners, self.deadline_s = owners, deadline_s

    def _get(self, refs: dict[int, Any], what: str) -> dict[int, Any]:
        return get_within(refs, self.deadline_s, f"{what} to parts", "owners'")

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
        """One ``sample`` call per part, all in flight together."""
        refs = {
            p: self.owners[p].sample.remote(dst, fanout, seed, hop, replace, edge_type)
            for p, dst in dst_by_part.items()
        }
        return self._get(refs, "sample_neighbors")

    def fetch_encoded_many(
        self, gid_by_part: dict[int, np.ndarray], codec: Codec, node_type: str | None = None
    ) -> dict[int, EncodedRows]:
        """One ``fetch_encoded`` call per part, all in flight together."""
        refs = {
            p: self.owners[p].fetch_encoded.remote(gid, codec, node_type)
            for p, gid in gid_by_part.items()
        }
        return self._get(refs, "fetch_encoded")

    def degree_many(
        self, gid_by_part: dict[int, np.ndarray], edge_type: EdgeType | None = None
    ) -> dict[int, np.ndarray]:
        """One ``ShardOwner.degree`` call per part, all in flight together."""
        refs = {p: self.owners[p].degree.remote(gid, edge_type) for p, gid in gid_by_part.items()}
        return self._get(refs, "degree")

    def partial_many(
        self,
        req_by_part: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray | None]],
        codec: Codec,
        node_type: str | None = None,
    ) -> dict[int, EncodedRows]:
        """One ``ShardOwner.partial_sums`` call per part, all in flight together."""
        refs = {
            p: self.owners[p].partial_sums.remote(rowptr, gid, weight, codec, node_type)
            for p, (rowptr, gid, weight) in req_by_part.items()
        }
        return self._get(refs, "partial_sums")


class DelayedOwnerClient:
    """An :class:`OwnerClient` that waits ``delay_s`` before every batch of owner calls.

    Test and benchmark only (``FaultSpec(kind="delay")``): network latency on demand, to check
    that prefetching hides it.
    """

    def __init__(self, inner: OwnerClient, delay_s: float) -> None:
        self.inner, self.delay_s = inner, delay_s

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
        """``inner.sample_many`` after the delay."""
        time.sleep(self.delay_s)
        return self.inner.sample_many(
            dst_by_part, fanout, seed=seed, hop=hop, replace=replace, edge_type=edge_type
        )

    def fetch_encoded_many(
        self, gid_by_part: dict[int, np.ndarray], codec: Codec, node_type: str | None = None
    ) -> dict[int, EncodedRows]:
        """``inner.fetch_encoded_many`` after the delay."""
        time.sleep(self.delay_s)
        return self.inner.fetch_encoded_many(gid_by_part, codec, node_type)

    def degree_many(
        self, gid_by_part: dict[int, np.ndarray], edge_type: EdgeType | None = None
    ) -> dict[int, np.ndarray]:
        """``inner.degree_many`` after the delay."""
        time.sleep(self.delay_s)
        return self.inner.degree_many(gid_by_part, edge_type)

    def partial_many(
        self,
        req_by_part: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray | None]],
        codec: Codec,
        node_type: str | None = None,
    ) -> dict[int, EncodedRows]:
        """``inner.partial_many`` after the delay."""
        time.sleep(self.delay_s)
        return self.inner.partial_many(req_by_part, codec, node_type)
