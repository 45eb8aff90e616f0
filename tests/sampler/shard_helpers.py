"""Hand-built shards for sampler tests: owned subset, in-edges in global CSR order."""

from __future__ import annotations

import numpy as np

from gnnsys.types import Graph, PartitionShard


def hand_shard(graph: Graph, part_N: np.ndarray, part: int) -> PartitionShard:
    """Owned gids ascending, their in-edges in global CSR order, global edge ids."""
    owned = np.flatnonzero(part_N == part).astype(np.int64)
    deg = graph.in_degree[owned]
    indptr = np.zeros(owned.size + 1, dtype=np.int64)
    np.cumsum(deg, out=indptr[1:])
    e_id = np.concatenate([np.arange(graph.indptr[v], graph.indptr[v + 1]) for v in owned])
    return PartitionShard(
        part=part,
        num_parts=2,
        num_nodes=graph.num_nodes,
        owned_gid=owned,
        indptr=indptr,
        indices_gid=graph.indices[e_id].astype(np.int64),
        e_id=e_id.astype(np.int64),
        halo_gid=np.zeros(0, dtype=np.int64),
        halo_part=np.zeros(0, dtype=np.int32),
    )
