"""The one-type shard built whole, in memory: the reference the streaming writer's files equal.

``gnnsys.store.writer`` never holds a part's edges (it streams them); the tests compare its
files, byte for byte, with these arrays saved whole. Used only by tests.
"""

from __future__ import annotations

import numpy as np

from gnnsys.partitioners.base import csr_positions
from gnnsys.partitioners.halo import halo_of_part
from gnnsys.store.shard import local_index
from gnnsys.types import Graph, PartitionBook, PartitionShard


def whole_shard(
    graph: Graph, book: PartitionBook, part: int, num_hops: int, *, with_data: bool = True
) -> PartitionShard:
    """The shard of ``part``: owned gids, their in-edge CSR, the k-hop halo, and owned data.

    Args:
        graph: The whole graph.
        book: Its partition book (``PartitionBook.from_assignment``).
        part: Which part, in ``[0, P)``.
        num_hops: ``k`` of the k-hop halo (number of GNN layers).
        with_data: Also gather the owned rows of ``x``, ``y`` and the masks (copies).

    Returns:
        A ``PartitionShard`` with ``indices_local`` set.
    """
    if not 0 <= part < book.num_parts:
        raise ValueError(f"part={part}; choose a part in [0, {book.num_parts - 1}]")
    owned_gid = np.flatnonzero(book.part_N == part).astype(np.int64)
    pos_E, count_M = csr_positions(graph.indptr, owned_gid)
    indptr = np.zeros(owned_gid.shape[0] + 1, dtype=np.int64)
    np.cumsum(count_M, out=indptr[1:])
    indices_gid = np.asarray(graph.indices[pos_E], dtype=np.int64)
    halo_gid = halo_of_part(graph, book.part_N, part, num_hops, seeds=owned_gid)
    data: dict[str, np.ndarray | None] = {}
    if with_data:
        for key in ("x", "y", "train_mask", "val_mask", "test_mask"):
            value = getattr(graph, key)
            data[key] = None if value is None else np.asarray(value[owned_gid])
    return PartitionShard(
        part=part,
        num_parts=book.num_parts,
        num_nodes=graph.num_nodes,
        owned_gid=owned_gid,
        indptr=indptr,
        indices_gid=indices_gid,
        e_id=pos_E,
        halo_gid=halo_gid,
        halo_part=book.part_N[halo_gid].astype(np.int32),
        indices_local=local_index(indices_gid, book, part, halo_gid, owned_gid.shape[0]),
        **data,
    )
