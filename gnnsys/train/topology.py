"""Whole-graph views rebuilt from a partition store, and the topology choice.

``replicated`` workers and the driver's exact evaluation need the global CSR. A shard keeps each
owned node's in-edges with their global edge ids (positions in the global CSR), so scattering
every shard's ``indices_gid`` to ``e_id`` rebuilds the global CSR exactly, with no other file.

Shape legend: ``N`` nodes, ``E`` edges, ``F`` features, ``P`` parts.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np
import psutil

from gnnsys.types import Graph

__all__ = ["TOPOLOGIES", "assemble_graph", "choose_topology", "replicated_csr_bytes"]

log = logging.getLogger(__name__)

TOPOLOGIES = ("auto", "partitioned", "replicated")
"""``partitioned``: local CSR + remote sampling; ``replicated``: every worker holds the CSR."""

_REPLICATED_MEMORY_SHARE = 0.25  # replicate only if P copies of the CSR fit in this share of RAM


def assemble_graph(store: str | os.PathLike[str], *, with_data: bool) -> Graph:
    """The global graph from every shard of ``store`` (features and labels if ``with_data``).

    Costs the global CSR (``8 (N + 1) + 4..8 E`` bytes) plus, with data, ``N F`` feature rows.
    """
    from gnnsys.store import load_book, load_shard

    book = load_book(store)
    n = book.num_nodes
    shards = [load_shard(store, p) for p in range(book.num_parts)]
    deg_N = np.zeros(n, dtype=np.int64)
    for shard in shards:
        deg_N[shard.owned_gid] = np.diff(shard.indptr)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(deg_N, out=indptr[1:])
    indices = np.empty(int(indptr[-1]), dtype=np.int32 if n < 2**31 else np.int64)
    for shard in shards:
        indices[np.asarray(shard.e_id)] = shard.indices_gid
    if not with_data:
        return Graph(indptr=indptr, indices=indices, num_nodes=n, name=str(store))
    fields: dict[str, Any] = {}
    for key in ("x", "y", "train_mask", "val_mask", "test_mask"):
        first = getattr(shards[0], key)
        if first is None:
            continue
        full = np.zeros((n, *first.shape[1:]), dtype=first.dtype)
        for shard in shards:
            full[shard.owned_gid] = getattr(shard, key)
        fields[key] = full
    return Graph(indptr=indptr, indices=indices, num_nodes=n, name=str(store), **fields)


def replicated_csr_bytes(num_nodes: int, num_edges: int) -> int:
    """Bytes one worker needs for the global CSR in ``replicated`` mode (indptr + indices)."""
    return 8 * (num_nodes + 1) + (4 if num_nodes < 2**31 else 8) * num_edges


def choose_topology(requested: str, *, num_nodes: int, num_edges: int, num_parts: int) -> str:
    """Resolve ``auto``: replicate when ``P`` CSR copies fit in a quarter of available RAM.

    Raises:
        ValueError: ``requested`` is not one of :data:`TOPOLOGIES`.
    """
    if requested not in TOPOLOGIES:
        raise ValueError(f"topology={requested!r}; choose one of {TOPOLOGIES}")
    if requested != "auto":
        return requested
    need = replicated_csr_bytes(num_nodes, num_edges) * num_parts
    budget = int(psutil.virtual_memory().available * _REPLICATED_MEMORY_SHARE)
    choice = "replicated" if need <= budget else "partitioned"
    log.info(
        "topology auto -> %s (P=%d CSR copies need %.1f MiB, budget %.1f MiB)",
        choice,
        num_parts,
        need / 2**20,
        budget / 2**20,
    )
    return choice
