"""Sampler interfaces: where neighbors come from (``NeighborSource``) and what a sampler emits.

The randomness contract that makes distributed sampling reproducible: the neighbors drawn for a
destination node depend only on ``(seed, hop, dst gid, fanout, replace)`` and that node's in-edge
list in global CSR order, never on which process draws them or what else is in the request. A
shard keeps each owned node's in-edges in global CSR order, so sampling a node at its owner gives
exactly the draw the whole-graph source gives; partitioned and replicated training then see
identical batches for the same seed.
"""

from __future__ import annotations

from typing import Protocol

from torch import Tensor

from gnnsys.types import Block, NeighborSample, SampledSubgraph


class NeighborSource(Protocol):
    """Draws in-neighbors of destination nodes (local CSR, or remote owners over Ray).

    Optional class attribute ``concurrent_calls: bool`` (absent means ``False``): when true,
    ``NeighborSampler`` cuts a big hop into per-thread chunks and calls ``sample_neighbors``
    from several threads at once (``CSRNeighborSource`` sets it); otherwise it sends one
    request per hop, so a remote source keeps one round trip per hop per owner.
    """

    def sample_neighbors(
        self, dst_gid: Tensor, fanout: int, *, seed: int, hop: int, replace: bool = False
    ) -> NeighborSample:
        """Draw up to ``fanout`` in-neighbors of every node in ``dst_gid`` (``-1``: all).

        Args:
            dst_gid: ``[M]`` int64 destination gids (may repeat; each is drawn independently
                of the others but identically for equal gids).
            fanout: Neighbors per destination; ``-1`` takes every in-neighbor.
            seed: Batch seed; with ``hop`` it fixes the draw (see the module docstring).
            hop: Hop index, seed hop = 0.
            replace: Draw with replacement (exactly ``fanout`` when the degree is > 0).

        Returns:
            ``NeighborSample`` grouped by destination in request order.
        """
        ...


class Sampler(Protocol):
    """Turns a batch of seed gids into a ``SampledSubgraph``."""

    def sample(self, seed_gid: Tensor, *, seed: int) -> SampledSubgraph:
        """Sample the multi-hop neighborhood of ``seed_gid`` with batch seed ``seed``."""
        ...


def prefix_blocks(
    num_nodes: tuple[int, ...],
    num_edges: tuple[int, ...],
    rowptr: Tensor,
    col: Tensor,
    e_id: Tensor,
    num_dst_nodes: tuple[int, ...] | None = None,
) -> tuple[Block, ...]:
    """One block per layer, input layer first, each a prefix of the concatenated hops.

    Args:
        num_nodes: Nodes added per hop, seeds first (of the source type, when typed).
        num_edges: Edges drawn per hop, seed hop first.
        rowptr: Row pointer over every hop's destinations (seeds first).
        col: Local source index of every drawn edge.
        e_id: Global edge id of every drawn edge.
        num_dst_nodes: The destination type's ``num_nodes`` for a relation between two types
            (``None``: the same nodes).
    """
    dst_nodes = num_nodes if num_dst_nodes is None else num_dst_nodes
    num_hops = len(num_edges)
    blocks = []
    for layer in range(num_hops):
        hops_seen = num_hops - layer  # this layer sees the edges of hops 0 .. hops_seen-1
        num_dst = sum(dst_nodes[:hops_seen])
        num_e = sum(num_edges[:hops_seen])
        blocks.append(
            Block(
                num_src=sum(num_nodes[: hops_seen + 1]),
                num_dst=num_dst,
                rowptr=rowptr[: num_dst + 1],
                col=col[:num_e],
                e_id=e_id[:num_e],
            )
        )
    return tuple(blocks)
