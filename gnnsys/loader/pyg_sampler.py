"""The loaders' sampler: gnnsys sampling with PyG's options, emitting PyG's ``SamplerOutput``.

It picks ``NeighborSampler`` (the fast path, the one the distributed runtime uses) for plain
fanout sampling and ``ExtendedSampler`` when a batch needs disjoint trees, edge weights or
timestamps (with every node's in-edges in time order first, as PyG's ``sort_csc``, so a batch's
node order is PyG's); ``subgraph_type`` is applied to the sampled nodes afterwards:

* ``'directional'``: the sampled edges (messages toward the seeds), with ``e_id``.
* ``'bidirectional'``: the sampled edges plus their reverses, coalesced (PyG's
  ``to_bidirectional``); ``num_sampled_nodes``/``num_sampled_edges`` are ``None``, as in PyG.
* ``'induced'``: every edge of the graph between sampled nodes (PyG's deprecated
  ``directed=False``); ``num_sampled_*`` are ``None``, as with PyG's torch-sparse path.

Link sampling (``sample_edges``) runs PyG's own ``edge_sample`` (negative sampling, label and
index bookkeeping) with this sampler as its ``sample_fn``, so ``LinkNeighborLoader`` batches have
PyG's exact meaning. Negative pairs are drawn by PyG's ``NegativeSampling`` from torch's global
RNG, as in PyG (``torch.manual_seed`` makes them repeatable; with ``num_workers > 1`` their
order across batches depends on thread timing).

Shape legend: ``N`` nodes, ``E`` edges of the batch, ``B`` seeds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from gnnsys.loader.graph_view import GraphView
from gnnsys.sampler import NeighborSampler
from gnnsys.sampler.candidates import check_strategy, time_sorted
from gnnsys.sampler.draw import ragged_range
from gnnsys.sampler.extended import ExtendedSampler
from gnnsys.types import SampledSubgraph

__all__ = ["PyGSampler", "SUBGRAPH_TYPES", "induced_edges"]

SUBGRAPH_TYPES = ("directional", "bidirectional", "induced")


class PyGSampler:
    """Samples node or link batches of one ``GraphView``; see the module docstring.

    Args:
        view: The graph.
        config: The sampling options (PyG's ``NeighborSampler`` arguments).
        num_threads: Threads one fast-path ``sample`` call may use (``None``: torch's).

    Raises:
        ValueError: Unknown ``subgraph_type``/``time_attr``/``weight_attr``, or induced
            subgraphs with disjoint (or temporal) sampling, which PyG refuses too.
    """

    @dataclass(frozen=True, kw_only=True, slots=True)
    class Config:
        """PyG's sampling options."""

        fanouts: tuple[int, ...] = (15, 10)
        """``num_neighbors``: per hop, seed hop first; -1 takes every neighbor."""
        replace: bool = False
        """Sample with replacement."""
        subgraph_type: str = "directional"
        """``'directional'``, ``'bidirectional'`` or ``'induced'``."""
        disjoint: bool = False
        """Every seed its own subgraph (``batch`` says which); forced on by ``time_attr``."""
        temporal_strategy: str = "uniform"
        """``'uniform'`` or ``'last'`` (most recent neighbors first)."""
        time_attr: str | None = None
        """Node- or edge-level attribute holding timestamps (temporal sampling)."""
        weight_attr: str | None = None
        """Edge-level attribute holding sampling weights (weighted sampling)."""

        def __post_init__(self) -> None:
            """Normalise ``subgraph_type`` (enum or str) and reject unknown values."""
            kind = getattr(self.subgraph_type, "value", self.subgraph_type)
            if kind not in SUBGRAPH_TYPES:
                raise ValueError(
                    f"subgraph_type={self.subgraph_type!r}; use one of {SUBGRAPH_TYPES}"
                )
            object.__setattr__(self, "subgraph_type", kind)
            object.__setattr__(self, "fanouts", tuple(self.fanouts))

    def __init__(self, view: GraphView, config: Config, *, num_threads: int | None = None) -> None:
        self.view, self.config = view, config
        node_time, edge_time = _times(view, config.time_attr)
        weight = None if config.weight_attr is None else _edge_attr(view, config.weight_attr)
        self.node_time = node_time
        self.disjoint = config.disjoint or config.time_attr is not None
        if config.subgraph_type == "induced" and self.disjoint:
            raise ValueError(
                "'disjoint' (or temporal) sampling is not supported with "
                "subgraph_type='induced' (PyG refuses it too); use 'directional'"
            )
        self.sampler: NeighborSampler | ExtendedSampler
        if self.disjoint or weight is not None or not config.fanouts:  # [] = zero hops
            self.sampler = ExtendedSampler.over_graph(
                config.fanouts,
                source=time_sorted(view.source, src_time=node_time, edge_time=edge_time),
                replace=config.replace,
                disjoint=config.disjoint,
                temporal_strategy=config.temporal_strategy,
                edge_weight=weight,
                node_time=node_time,
                edge_time=edge_time,
            )
        else:
            fast = NeighborSampler.Config(
                fanouts=config.fanouts, replace=config.replace, num_threads=num_threads
            )
            self.sampler = NeighborSampler(fast, source=view.source)
            check_strategy(config.temporal_strategy)  # accepted, as in PyG, though unused here

    def subgraph(self, seed_gid: Tensor, seed_time: Tensor | None, seed: int) -> SampledSubgraph:
        """The raw ``SampledSubgraph`` of one batch of seeds."""
        if isinstance(self.sampler, ExtendedSampler):
            return self.sampler.sample_graph(seed_gid, seed=seed, seed_time=seed_time)
        return self.sampler.sample(seed_gid, seed=seed)

    def sample_nodes(
        self, seed_gid: Tensor, seed_time: Tensor | None, seed: int, metadata: Any = None
    ) -> Any:
        """PyG ``SamplerOutput`` of one batch of seed nodes (``subgraph_type`` applied)."""
        from torch_geometric.sampler import SamplerOutput

        sub = self.subgraph(seed_gid, seed_time, seed)
        row = edge = torch.zeros(0, dtype=torch.int64)
        col = row
        if sub.blocks:  # the input block holds every hop's edges
            block = sub.blocks[0]
            deg = np.diff(block.rowptr.numpy())
            # numpy, not torch.repeat_interleave: one thread, no OpenMP team to wait for (on
            # the loaded 2-core machine torch's version took 40 ms for 4k edges).
            col = torch.from_numpy(np.repeat(np.arange(block.num_dst, dtype=np.int64), deg))
            row, edge = block.col, block.e_id
        out = SamplerOutput(
            node=sub.n_id,
            row=row,
            col=col,
            edge=edge,
            batch=sub.batch,
            num_sampled_nodes=list(sub.num_sampled_nodes),
            num_sampled_edges=list(sub.num_sampled_edges),
            metadata=metadata,
        )
        if self.config.subgraph_type == "bidirectional":
            out = out.to_bidirectional()
        elif self.config.subgraph_type == "induced":
            out = self._induced(out)
        return out

    def _induced(self, out: Any) -> Any:
        """Every edge of the graph among ``out.node`` (in-edges of each node, CSR order)."""
        out.row, out.col, out.edge = induced_edges(self.view.source, out.node, out.node)
        out.num_sampled_nodes = out.num_sampled_edges = None
        return out

    def sample_edges(self, inputs: Any, neg_sampling: Any, seed: int) -> Any:
        """PyG ``SamplerOutput`` of one batch of seed links (PyG's ``edge_sample``).

        Args:
            inputs: A ``torch_geometric.sampler.EdgeSamplerInput`` (homogeneous).
            neg_sampling: A ``NegativeSampling`` or ``None``.
            seed: Batch seed of the neighbor draws.
        """
        from torch_geometric.sampler.neighbor_sampler import edge_sample

        def sample_fn(seed_gid: Tensor, seed_time: Tensor | None) -> Any:
            return self.sample_nodes(seed_gid, seed_time, seed)

        out = edge_sample(
            inputs, sample_fn, self.view.num_nodes, self.disjoint, self.node_time, neg_sampling
        )
        return out


def induced_edges(source: Any, src_node: Tensor, dst_node: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Every edge of ``source`` (an in-edge CSR) from a ``src_node`` to a ``dst_node`` node.

    Returns ``(row, col, edge)``: positions in the two node lists and edge ids. Edges come per
    destination in ``dst_node`` order, each destination's in CSR order (PyG's
    ``subgraph_type='induced'``). A homogeneous graph passes one node list twice.
    """
    node = src_node.numpy()
    order = np.argsort(node, kind="stable")
    sorted_node = node[order]
    dst = dst_node.numpy()
    indptr = source.indptr.numpy()
    start = indptr.take(dst)
    deg = indptr.take(dst + 1) - start
    pos = ragged_range(start, deg)
    src = source.indices.numpy().take(pos).astype(np.int64, copy=False)
    at = np.searchsorted(sorted_node, src).clip(0, max(node.shape[0] - 1, 0))
    keep = sorted_node.take(at) == src if node.shape[0] else np.zeros(src.shape[0], dtype=bool)
    dst_local = np.repeat(np.arange(dst.shape[0], dtype=np.int64), deg)[keep]
    src_local = order.take(at[keep]).astype(np.int64, copy=False)
    edge = pos[keep] if source.e_id is None else source.e_id.numpy().take(pos[keep])
    return (
        torch.from_numpy(src_local),
        torch.from_numpy(dst_local),
        torch.from_numpy(np.ascontiguousarray(edge)),
    )


def _edge_attr(view: GraphView, name: str) -> Tensor:
    value = view.edge_attr(name)
    if value is None:
        raise ValueError(f"weight_attr={name!r} is not an edge-level attribute of the data")
    return value


def _times(view: GraphView, name: str | None) -> tuple[Tensor | None, Tensor | None]:
    """``(node_time, edge_time)`` from ``time_attr``: one of them, or neither."""
    if name is None:
        return None, None
    node_time = view.node_attr(name)
    if node_time is not None:
        return node_time, None
    edge_time = view.edge_attr(name)
    if edge_time is not None:
        return None, edge_time
    raise ValueError(f"The time attribute {name!r} is neither a node-level or edge-level attribute")
