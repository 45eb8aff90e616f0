"""Build one part's shard in memory from the whole graph (pure; the writer saves it).

The in-edges of every owned node are kept in exactly the global CSR order, with ``e_id`` the
global edge positions: the sampler's randomness contract (``gnnsys.sampler.base``) depends on
it, so that sampling a node at its owner draws what the whole-graph sampler draws.

Shape legend: ``N`` nodes, ``M`` owned nodes, ``E`` owned in-edges, ``H`` halo nodes.
"""

from __future__ import annotations

import numpy as np

from gnnsys.partitioners.base import csr_positions
from gnnsys.partitioners.halo import halo_of_part
from gnnsys.types import Graph, PartitionBook, PartitionShard


def local_index(
    src_gid_E: np.ndarray, book: PartitionBook, part: int, halo_gid: np.ndarray, num_owned: int
) -> np.ndarray:
    """``[E]`` int64: lid for owned sources, ``num_owned + j`` for ``halo_gid[j]``.

    Raises:
        ValueError: A source is neither owned by ``part`` nor in ``halo_gid``.
    """
    owned_E = book.part_N[src_gid_E] == part
    halo_pos = np.searchsorted(halo_gid, src_gid_E)
    halo_pos = np.minimum(halo_pos, max(halo_gid.shape[0] - 1, 0))
    in_halo = halo_gid.shape[0] > 0 and halo_gid[halo_pos] == src_gid_E
    if not np.all(owned_E | in_halo):
        raise ValueError(f"part {part}: an edge source is neither owned nor in the halo")
    out: np.ndarray = np.where(owned_E, book.lid_N[src_gid_E], num_owned + halo_pos)
    return out.astype(np.int64)


def build_shard(
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
