"""``DistLinkNeighborLoader``: PyG link batches of a partition store in a user's process group.

The link counterpart of :class:`gnnsys.distributed.DistNeighborLoader`, over the same data
path (the runtime's sampler, owner reads, halo cache, codecs, stage threads) and the same
DDP-safe schedule (``len(loader)`` agreed by every rank at construction). A batch holds
``batch_size`` of this rank's seed links, the negatives that ``neg_sampling`` asks for, and
the sampled neighbourhood of every endpoint; its fields have the meaning of PyG's
``LinkNeighborLoader`` (``torch_geometric.sampler.neighbor_sampler.edge_sample``, non-disjoint):

* no / binary negatives: ``edge_label_index`` (``[2, B + B_neg]`` local ids into ``n_id``),
  ``edge_label`` (the positives' labels, or 1; negatives 0; labels that start at 0 are shifted
  by one when negatives are added, as PyG does);
* triplet negatives: ``src_index`` and ``dst_pos_index`` (``[B]``), ``dst_neg_index``
  (``[B]``, or ``[B, amount]``);
* always: ``input_id``, ``n_id``, ``edge_index``, ``x``, ``num_sampled_nodes/edges``; on a
  typed store the link fields sit on the relation (``batch[edge_type]``) and the triplet
  fields on the endpoint types, as in PyG's ``HeteroData`` link batches.

Seed links: given as ``edge_label_index`` (``[2, L]`` over the whole graph, the same on every
rank), a link goes to the rank that owns its source. ``None`` takes the store's train links when
it was written with a link split (``gnnsys train --task link``), else every edge of the
relation, each at the rank owning its destination (the part that holds the edge). Negative
endpoints are drawn uniformly over the node type (or from ``src_weight``/``dst_weight``), from
the batch's seed, so the same seed gives the same batches; most are owned by other ranks and
their rows come through the halo path.

Shape legend: ``L`` seed links, ``B`` per batch, ``U`` distinct endpoints of a batch.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
import torch
from torch import Tensor

from gnnsys.distributed.loader import DistNeighborLoader
from gnnsys.distributed.metrics import DEFAULT_TIMEOUT_S
from gnnsys.types import EdgeType

__all__ = ["DistLinkNeighborLoader"]


class DistLinkNeighborLoader(DistNeighborLoader):
    """Neighbor-sampled PyG link batches of this rank's seed links, over a partition store.

    Args:
        store: Directory written by ``gnnsys partition`` with one part per rank.
        num_neighbors: Fanouts per hop, as for ``DistNeighborLoader``.
        edge_label_index: The seed links over the whole graph, the same on every rank: a
            ``[2, L]`` tensor of (source, destination) ids; on a typed store the relation
            ``(src, rel, dst)`` (its default links) or ``(edge_type, [2, L])``. ``None``: the
            store's train links, or every edge (module docstring).
        edge_label: ``[L]`` labels of the given links (not with triplet negatives).
        neg_sampling: PyG's ``NegativeSampling`` or what its ``cast`` takes (``'binary'``,
            ``'triplet'``, ``{'mode': 'binary', 'amount': 2}``); ``None``: positives only.
        batch_size: Seed links per batch per rank.
        shuffle, drop_last, num_workers, seed, codec, cache, prefetch, schedule, timeout_s,
            verify: As for ``DistNeighborLoader``.

    Raises:
        RuntimeError: No ``torch.distributed`` process group has been initialised.
        ValueError: Parts differ from ranks; link ids outside the graph; labels with triplet
            negatives; an edge type the store does not have; the source type has no features.
        TypeError: ``edge_label_index`` does not match the store's kind.
    """

    def __init__(
        self,
        store: str | os.PathLike[str],
        num_neighbors: list[int] | tuple[int, ...] | dict[Any, list[int]],
        *,
        edge_label_index: Any = None,
        edge_label: Tensor | None = None,
        neg_sampling: Any = None,
        batch_size: int = 1,
        shuffle: bool = False,
        drop_last: bool = False,
        num_workers: int = 0,
        seed: int = 0,
        codec: Any = "fp32",
        cache: Any = None,
        prefetch: int = 2,
        schedule: str = "global",
        timeout_s: float = DEFAULT_TIMEOUT_S,
        verify: bool = True,
    ) -> None:
        from gnnsys.loader.link_inputs import neg_sampling_of

        self._open(store, verify, batch_size, num_workers, prefetch, schedule)
        self._settings(batch_size, shuffle, drop_last, num_workers, seed, prefetch, timeout_s)
        self.edge_type, given = self._edge_type(edge_label_index)
        self.input_type = self.edge_type[0]
        self.neg_sampling = neg_sampling_of(neg_sampling, None)
        self._sources, self.ledger, self.layout = self._build(num_neighbors, codec, cache)
        self.links, self.input_id, self.link_label = self._links(given, edge_label, verify)
        self._num_batches = self._agree(schedule)

    # ---- construction ---------------------------------------------------------------------
    def _edge_type(self, edge_label_index: Any) -> tuple[EdgeType, Any]:
        """The seed relation and what ``edge_label_index`` says about its links."""
        return self.format.edge_type(self.store, edge_label_index, self.info)

    def _links(
        self, given: Any, edge_label: Tensor | None, verify: bool
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """``[2, L_r]`` this rank's seed links, their ``input_id`` and labels (or ``None``)."""
        from gnnsys.loader.link_inputs import edge_input

        neg = self.neg_sampling
        if given is None:
            if edge_label is not None:
                raise ValueError("edge_label needs edge_label_index: one label per given link")
            links, input_id = self._default_links(verify)
            return links, input_id, None
        src_t, _, dst_t = self.edge_type
        index = torch.as_tensor(given).long()
        if index.dim() != 2 or index.shape[0] != 2:
            raise ValueError(f"edge_label_index must be [2, L], got {tuple(index.shape)}")
        for row, t in ((0, src_t), (1, dst_t)):
            n = int(self.shard.nodes[t].num_nodes)
            if index.numel() and (int(index[row].min()) < 0 or int(index[row].max()) >= n):
                raise ValueError(
                    f"{type(self).__name__}: edge_label_index row {row} has ids outside "
                    f"[0, {n}) of node type {t!r}"
                )
        # PyG's checks and label shift (labels from 0 move up one when negatives are added)
        labels = None if edge_label is None else torch.as_tensor(edge_label)
        label = edge_input(index, labels, None, None, neg).label
        mine = torch.from_numpy(self.books[src_t].part_N[index[0].numpy()] == self.rank)
        input_id = torch.nonzero(mine).squeeze(1)
        return index[:, mine], input_id, None if label is None else label[mine]

    def _default_links(self, verify: bool) -> tuple[Tensor, Tensor]:
        """The store's train links of the relation (link split), else the part's edges."""
        from gnnsys.store.links import link_edge_type, load_relation_links

        if link_edge_type(self.store) == self.edge_type:
            _, split = load_relation_links(self.store, self.rank, verify=verify)
            train = torch.from_numpy(np.ascontiguousarray(split.train_2E, dtype=np.int64))
            return train, torch.arange(int(train.shape[1]))
        rel = self.shard.relations[self.edge_type]
        owned = np.asarray(self.shard.nodes[self.edge_type[2]].owned_lid, dtype=np.int64)
        dst = np.repeat(owned, np.diff(np.asarray(rel.indptr)))
        src = np.asarray(rel.indices_lid, dtype=np.int64)
        e_id = np.asarray(rel.e_id, dtype=np.int64).copy()
        return torch.from_numpy(np.stack([src, dst])), torch.from_numpy(e_id)

    # ---- the hooks of the link seed kind ---------------------------------------------------
    def _item_ids(self) -> Tensor:
        return self.links

    def _draw(self, count: int, endpoint: str, gen: torch.Generator) -> Tensor:
        """``count`` negative endpoints of ``endpoint`` (``'src'``/``'dst'``), PyG's rule."""
        neg = self.neg_sampling
        t = self.edge_type[0] if endpoint == "src" else self.edge_type[2]
        num = int(self.shard.nodes[t].num_nodes)
        weight = neg.src_weight if endpoint == "src" else neg.dst_weight
        if weight is None:
            return torch.randint(0, num, (count,), generator=gen, dtype=torch.int64)
        if weight.numel() != num:
            raise ValueError(f"{endpoint}_weight has {weight.numel()} entries; need {num}")
        return torch.multinomial(weight.float(), count, replacement=True, generator=gen)

    def _sample(self, pos: Tensor, seed: int) -> tuple[Any, Any]:
        """Positives at ``pos``, their seeded negatives, and the endpoints' typed subgraph."""
        from gnnsys.train.schedule import mix_seed

        src, dst = self.links[0, pos], self.links[1, pos]
        neg, b = self.neg_sampling, int(pos.numel())
        gen = torch.Generator().manual_seed(mix_seed(seed, 0x4E4C))
        num_neg = 0 if neg is None else math.ceil(b * neg.amount)
        if neg is not None and neg.is_binary():
            src = torch.cat([src, self._draw(num_neg, "src", gen)])
            dst = torch.cat([dst, self._draw(num_neg, "dst", gen)])
        elif neg is not None:
            dst = torch.cat([dst, self._draw(num_neg, "dst", gen)])
        src_t, _, dst_t = self.edge_type
        if src_t == dst_t:
            ids, inverse = torch.unique(torch.cat([src, dst]), sorted=True, return_inverse=True)
            seeds = {src_t: ids}
            inv_src, inv_dst = inverse[: src.numel()], inverse[src.numel() :]
        else:
            src_ids, inv_src = torch.unique(src, sorted=True, return_inverse=True)
            dst_ids, inv_dst = torch.unique(dst, sorted=True, return_inverse=True)
            seeds = {src_t: src_ids, dst_t: dst_ids}
        sampler = self._sources.sampler.sampler
        sub = sampler.sample_types(seeds, seed=seed, with_edge_index=True)
        return (b, num_neg, inv_src, inv_dst), sub

    def _fields(self, batch: Any, extra: Any, pos: Tensor, batch_size: int) -> Any:
        """PyG's link fields (binary or triplet) of ``batch``."""
        del batch_size  # a link batch has no seed-node count
        neg = self.neg_sampling
        if extra is None:  # an empty batch
            none = torch.zeros(0, dtype=torch.int64)
            extra = (0, 0, none, none)
        b, num_neg, inv_src, inv_dst = extra
        src_t, _, dst_t = self.edge_type
        rel = self.format.of_type(batch, self.edge_type)
        rel.input_id = self.input_id[pos]
        if neg is None or neg.is_binary():
            rel.edge_label_index = torch.stack([inv_src, inv_dst])
            label = torch.ones(b) if self.link_label is None else self.link_label[pos]
            rel.edge_label = torch.cat([label, label.new_zeros((num_neg, *label.shape[1:]))])
            return batch
        src_store = self.format.of_type(batch, src_t)
        dst_store = self.format.of_type(batch, dst_t)
        src_store.src_index = inv_src
        dst_store.dst_pos_index = inv_dst[:b]
        dst_store.dst_neg_index = inv_dst[b:].view(b, -1).squeeze(-1)
        return batch
