"""``NeighborSampler``: multi-hop fanout sampling with PyG's node order and hop-sliced blocks.

Per hop the sampler sends the hop's *new* nodes (deduplicated) to the ``NeighborSource`` in one
call, so a remote source sends one request per hop per owner. Nodes sampled at an earlier hop are
not sampled again (PyG's semantics): hop ``h`` draws in-edges of the nodes first reached at hop
``h - 1`` (the seeds at hop 0).

Layout of the output (``L`` hops, PyG's ``NeighborLoader`` layout)::

    n_id   = [seeds | new at hop 0 | new at hop 1 | ... ]      num_sampled_nodes per segment
    edges  = [hop 0 edges | hop 1 edges | ... ]                num_sampled_edges per hop

Edges are grouped by destination and destinations appear in ``n_id`` order, so the edges of hops
``0 .. h`` form a CSR over the destinations ``n_id[:sum(num_sampled_nodes[:h+1])]``. The block of
layer ``l`` (input layer first) is therefore a *prefix* of the arrays of the input block: every
block is a zero-copy slice.

Relabelling uses a gid -> local-id table of ``N`` int64 kept between batches (as DGL and PyG do
with their hash maps): ``O(E)`` gathers instead of a sort, and only touched entries are reset.
It grows on demand, so a remote source need not tell the sampler ``N``.

Shape legend: ``B`` seeds, ``N`` sampled nodes, ``E`` sampled edges, ``M`` destinations of a hop.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch
from torch import Tensor

from gnnsys.sampler.base import NeighborSource
from gnnsys.types import Block, SampledSubgraph

__all__ = ["NeighborSampler"]

_UNSEEN = -1
_FIRST_BIAS = (1 << 31) - 2  # int32 table: candidate positions map below _UNSEEN in the amin


class NeighborSampler:
    """Implements ``Sampler``: fanout sampling of in-neighbors, hop by hop.

    Args:
        config: Fanouts and replacement.
        source: Where neighbors come from (``CSRNeighborSource`` or a remote implementation).

    Not reentrant: one sampler serves one thread at a time (a lock enforces it).
    """

    @dataclass(frozen=True, kw_only=True, slots=True)
    class Config:
        """Sampling settings."""

        fanouts: tuple[int, ...] = (15, 10)
        """Neighbors drawn per hop, seed hop first; -1 takes every neighbor."""
        replace: bool = False
        """Draw with replacement (exactly ``fanout`` edges for nodes with any in-edge)."""

        def __post_init__(self) -> None:
            """Reject fanouts of 0 or below -1, and an empty tuple."""
            fanouts = tuple(self.fanouts)
            if not fanouts or any(not isinstance(f, int) or f == 0 or f < -1 for f in fanouts):
                raise ValueError(
                    f"fanouts must be a non-empty tuple of ints > 0 or -1, got {self.fanouts!r}"
                )
            object.__setattr__(self, "fanouts", fanouts)

    def __init__(self, config: Config, *, source: NeighborSource) -> None:
        if not isinstance(config, NeighborSampler.Config):
            raise TypeError(f"config must be NeighborSampler.Config, got {type(config).__name__}")
        self.config = config
        self.source = source
        self._local_of_gid = torch.full((0,), _UNSEEN, dtype=torch.int32)
        self._lock = threading.Lock()

    def _grow(self, max_gid: int) -> None:
        size = int(self._local_of_gid.shape[0])
        if max_gid >= size:
            grown = torch.full((max(max_gid + 1, 2 * size),), _UNSEEN, dtype=torch.int32)
            grown[:size] = self._local_of_gid
            self._local_of_gid = grown

    def _add_seeds(self, seed_gid: Tensor) -> None:
        batch = int(seed_gid.shape[0])
        self._grow(int(seed_gid.max()))
        local_B = torch.arange(batch, dtype=torch.int32)
        self._local_of_gid.index_copy_(0, seed_gid, local_B)
        if not torch.equal(self._local_of_gid.index_select(0, seed_gid), local_B):
            self._local_of_gid[seed_gid] = _UNSEEN
            raise ValueError("seed_gid has repeated gids; pass each seed once (e.g. torch.unique)")

    def _relabel(self, src_gid_E: Tensor, num_known: int) -> tuple[Tensor, Tensor]:
        """Local ids of ``src_gid_E``, giving new gids ids ``num_known..`` by first appearance.

        Returns:
            ``(col_E, new_gid)``: int64 local ids of the sources, and the new gids in id order.
        """
        if src_gid_E.numel():
            self._grow(int(src_gid_E.max()))
        table = self._local_of_gid
        col_E = table.index_select(0, src_gid_E)
        fresh_F = torch.nonzero(col_E < 0).squeeze(1)
        cand_F = src_gid_E.index_select(0, fresh_F)
        if cand_F.numel() == 0:
            return col_E.long(), cand_F
        # First occurrence of each new gid: amin of its positions, biased below _UNSEEN. amin
        # is order-independent, so the result does not depend on the thread count.
        pos_F = torch.arange(cand_F.shape[0], dtype=torch.int32) - _FIRST_BIAS
        table.scatter_reduce_(0, cand_F, pos_F, reduce="amin")
        first = torch.nonzero(table.index_select(0, cand_F) == pos_F).squeeze(1)
        new_gid = cand_F.index_select(0, first)
        new_local = torch.arange(num_known, num_known + new_gid.shape[0], dtype=torch.int32)
        table.index_copy_(0, new_gid, new_local)
        col_E.index_copy_(0, fresh_F, table.index_select(0, cand_F))
        return col_E.long(), new_gid

    def sample(self, seed_gid: Tensor, *, seed: int) -> SampledSubgraph:
        """Sample the ``len(fanouts)``-hop in-neighborhood of ``seed_gid``.

        Args:
            seed_gid: ``[B]`` distinct int64 (or int32) seed gids.
            seed: Batch seed (e.g. ``batch_seed(run_seed, epoch, batch_index)``).

        Returns:
            ``SampledSubgraph`` with seeds first in ``n_id`` and blocks input layer first.

        Raises:
            ValueError: Empty or repeated seeds, or a source error (a gid it does not hold).
        """
        if seed_gid.dim() != 1 or seed_gid.numel() == 0:
            raise ValueError(
                f"seed_gid must be a non-empty 1-D tensor, got {tuple(seed_gid.shape)}"
            )
        seed_gid = seed_gid.long()
        if int(seed_gid.min()) < 0:
            raise ValueError(f"seed_gid has negative gid {int(seed_gid.min())}; gids are >= 0")
        with self._lock:
            self._add_seeds(seed_gid)
            node_parts = [seed_gid]
            try:
                return self._sample_hops(seed_gid, seed, node_parts)
            finally:
                self._local_of_gid.index_fill_(0, torch.cat(node_parts), _UNSEEN)

    def _sample_hops(
        self, seed_gid: Tensor, seed: int, node_parts: list[Tensor]
    ) -> SampledSubgraph:
        """Run every hop; ``node_parts`` collects n_id segments (the caller resets the table)."""
        frontier = seed_gid
        num_known = int(seed_gid.shape[0])
        counts, cols, e_ids = [], [], []
        for hop, fanout in enumerate(self.config.fanouts):
            if frontier.numel() == 0:
                empty = torch.zeros(0, dtype=torch.int64)
                counts.append(empty)
                cols.append(empty)
                e_ids.append(empty)
                node_parts.append(empty)
                continue
            drawn = self.source.sample_neighbors(
                frontier, fanout, seed=seed, hop=hop, replace=self.config.replace
            )
            col_E, frontier = self._relabel(drawn.src_gid_E.long(), num_known)
            num_known += int(frontier.shape[0])
            counts.append(drawn.count_M.long())
            cols.append(col_E)
            e_ids.append(drawn.e_id_E.long())
            node_parts.append(frontier)
        return _assemble(node_parts, counts, cols, e_ids)


def _assemble(
    node_parts: list[Tensor], counts: list[Tensor], cols: list[Tensor], e_ids: list[Tensor]
) -> SampledSubgraph:
    """Concatenate the hops and cut one prefix block per layer (input layer first)."""
    num_nodes = tuple(int(p.shape[0]) for p in node_parts)
    num_edges = tuple(int(c.shape[0]) for c in cols)
    count_all = torch.cat(counts)
    rowptr_all = torch.zeros(count_all.shape[0] + 1, dtype=torch.int64)
    torch.cumsum(count_all, 0, out=rowptr_all[1:])
    col_all, e_id_all = torch.cat(cols), torch.cat(e_ids)
    num_hops = len(counts)
    blocks = []
    for layer in range(num_hops):
        hops = num_hops - layer  # this layer sees the edges of hops 0 .. hops-1
        num_dst = sum(num_nodes[:hops])
        num_e = sum(num_edges[:hops])
        blocks.append(
            Block(
                num_src=sum(num_nodes[: hops + 1]),
                num_dst=num_dst,
                rowptr=rowptr_all[: num_dst + 1],
                col=col_all[:num_e],
                e_id=e_id_all[:num_e],
            )
        )
    return SampledSubgraph(
        n_id=torch.cat(node_parts),
        blocks=tuple(blocks),
        batch_size=num_nodes[0],
        num_sampled_nodes=num_nodes,
        num_sampled_edges=num_edges,
    )
