"""The blocks of sharded evaluation: a shard's in-edges, cut into chunks of destinations.

A rank evaluates its ``M`` owned nodes over every in-edge. Its sources are the owned nodes and
the ``H`` distinct 1-hop halo nodes; the layer input is held as two tables, ``own`` ``[M, F]``
(the memory-mapped features, or the previous layer's outputs) and ``halo`` ``[H, F]`` (fetched
once per layer). Rather than concatenating them into one ``[M + H, F]`` tensor and keeping an
``[E]`` relabelled index, :func:`chunk_blocks` walks the destinations in runs of at most
``max_edges`` in-edges and yields each run as a small self-contained ``Block`` (destinations
first, then the run's other distinct sources) plus the rows to gather for it, so evaluation
costs the two tables, the output table and one chunk's temporaries.

Shape legend: ``M`` owned nodes, ``H`` 1-hop halo nodes, ``K`` k-hop halo nodes of the store,
``E`` in-edges of owned nodes, ``S`` sources of one chunk, ``F`` features.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol, cast

import numpy as np
import torch
from torch import Tensor, nn

from gnnsys.kernels import aggregate
from gnnsys.models import BlockModel, GCNLayer, SAGELayer
from gnnsys.train.device import StepDevice
from gnnsys.train.eval_memory import eval_tick
from gnnsys.types import Block, PartitionShard

__all__ = [
    "ChunkBlock",
    "LinearLayerRun",
    "linear_layer_outputs",
    "HaloIndex",
    "LayerwiseModel",
    "chunk_blocks",
    "divide_by_degree",
    "edge_runs",
    "full_block",
    "full_graph_logits",
    "gather_rows",
    "halo_index",
    "halo_spans",
    "linear_run",
    "model_device",
    "span_outputs",
    "restricted",
]

_SCAN_CHUNK = 1 << 22  # edges per pass of the index scans (bounded temporaries)


class LayerwiseModel(Protocol):
    """What exact evaluation needs from a model (every model in ``gnnsys.models`` has it)."""

    num_layers: int

    def forward_layer(self, layer: int, x: Tensor, block: Block) -> Tensor:
        """Apply layer ``layer`` (activation included except after the last)."""
        ...


@dataclass(frozen=True, slots=True, eq=False)
class HaloIndex:
    """A shard's 1-hop halo, and how its ``indices_local`` map onto it.

    Attributes:
        halo_gid: ``[H]`` int64 gids of the 1-hop halo, ascending.
        source_of_K: ``[K]`` int64: for the store's k-hop halo position ``k``, the source index
            ``M + h`` of that node in ``[own; halo]`` (``-1`` for nodes no owned node points at).
    """

    halo_gid: np.ndarray
    source_of_K: np.ndarray


def halo_index(shard: PartitionShard) -> HaloIndex:
    """Scan ``indices_local`` once for the halo nodes some owned node points at."""
    m = int(shard.num_owned)
    local_E = shard.indices_local
    assert local_E is not None  # every store writes it (SHARD_ARRAYS)
    used_K = np.zeros(int(shard.halo_gid.shape[0]), dtype=bool)
    for start in range(0, int(local_E.shape[0]), _SCAN_CHUNK):
        piece = np.asarray(local_E[start : start + _SCAN_CHUNK], dtype=np.int64)
        used_K[piece[piece >= m] - m] = True
    source_of_K = np.where(used_K, np.cumsum(used_K, dtype=np.int64) - 1 + m, -1)
    return HaloIndex(np.asarray(shard.halo_gid, dtype=np.int64)[used_K], source_of_K)


@dataclass(frozen=True, slots=True, eq=False)
class ChunkBlock:
    """Destinations ``[start, end)`` of a shard with every in-edge, as one block.

    Attributes:
        start: First owned lid of the run.
        end: One past the last.
        source: ``[S]`` int64 rows of ``[own; halo]`` to gather, the run's destinations first.
        block: The run's block over those ``S`` sources.
    """

    start: int
    end: int
    source: np.ndarray
    block: Block


def chunk_blocks(
    shard: PartitionShard,
    index: HaloIndex,
    degree_S: np.ndarray | None,
    max_edges: int = 1 << 18,
    span: tuple[int, int] | None = None,
) -> Iterator[ChunkBlock]:
    """Runs of destinations with at most ``max_edges`` in-edges (one node may exceed it alone).

    Args:
        shard: The rank's shard.
        index: Its :func:`halo_index`.
        degree_S: ``[M + H]`` whole-graph in-degrees of ``[own; halo]`` (GCN), or ``None``.
        max_edges: Edge budget of one chunk.
        span: Only destinations ``[first, stop)`` (default: all owned nodes).
    """
    m = int(shard.num_owned)
    indptr = np.asarray(shard.indptr, dtype=np.int64)
    local_E = shard.indices_local
    assert local_E is not None
    start, stop = span if span is not None else (0, m)
    while start < stop:
        end = int(np.searchsorted(indptr, indptr[start] + max_edges, side="right")) - 1
        end = min(max(end, start + 1), stop)
        e0, e1 = int(indptr[start]), int(indptr[end])
        col = np.array(local_E[e0:e1], dtype=np.int64)
        halo = col >= m
        col[halo] = index.source_of_K[col[halo] - m]
        yield _chunk(start, end, indptr[start : end + 1] - e0, col, degree_S, e0)
        start = end


def _chunk(
    start: int, end: int, rowptr: np.ndarray, col: np.ndarray, degree_S: np.ndarray | None, e0: int
) -> ChunkBlock:
    """Relabel one run's sources: its destinations first, then the others ascending."""
    inside = (col >= start) & (col < end)
    others = np.unique(col[~inside])
    local = np.empty_like(col)
    local[inside] = col[inside] - start
    local[~inside] = (end - start) + np.searchsorted(others, col[~inside])
    source = np.concatenate([np.arange(start, end, dtype=np.int64), others])
    block = Block(
        num_src=int(source.shape[0]),
        num_dst=end - start,
        rowptr=torch.from_numpy(np.ascontiguousarray(rowptr)),
        col=torch.from_numpy(local),
        e_id=torch.arange(e0, e0 + int(col.shape[0]), dtype=torch.int64),
        src_in_degree=None if degree_S is None else torch.from_numpy(degree_S[source]),
    )
    return ChunkBlock(start=start, end=end, source=source, block=block)


@dataclass(frozen=True, slots=True)
class LinearLayerRun:
    """How one linear layer (SAGE mean/sum, GCN) runs over a shard without gathering rows.

    Attributes:
        reduce: ``"mean"`` or ``"sum"`` (SAGE's), or ``"gcn"``.
        max_dst: Destinations per chunk (bounds the ``[chunk, H]`` temporaries).
        max_edges: In-edges per chunk (bounds the edge index temporaries); a node with more
            in-edges is a chunk of its own.
    """

    reduce: str
    max_dst: int = 1 << 14
    max_edges: int = 1 << 20


def linear_run(layer: nn.Module) -> LinearLayerRun | None:
    """The fast path for ``layer`` when its aggregation is a (weighted) sum, else ``None``."""
    if isinstance(layer, SAGELayer) and layer.reduce in ("mean", "sum"):
        return LinearLayerRun(layer.reduce)
    if isinstance(layer, GCNLayer):
        return LinearLayerRun("gcn")
    return None


def _split_edges(col: np.ndarray, m: int, rowptr: np.ndarray) -> tuple[Tensor, ...]:
    """Row pointers and columns of one run's edges from owned and from halo sources."""
    num_dst = int(rowptr.shape[0] - 1)
    dst_E = torch.from_numpy(np.repeat(np.arange(num_dst), np.diff(rowptr)))
    col_E = torch.from_numpy(col)
    out: list[Tensor] = []
    for keep_E, offset in ((col_E < m, 0), (col_E >= m, m)):
        counts = torch.bincount(dst_E[keep_E], minlength=num_dst)
        ptr = torch.zeros(num_dst + 1, dtype=torch.int64)
        torch.cumsum(counts, 0, out=ptr[1:])
        out += [ptr, col_E[keep_E] - offset]
    return tuple(out)


def divide_by_degree(sum_DF: Tensor, rowptr: np.ndarray) -> None:
    """Neighbour sums -> means, in place, by each row's in-edges (a row without any stays 0)."""
    sum_DF.div_(torch.from_numpy(np.diff(rowptr)).clamp_(min=1).to(sum_DF.dtype)[:, None])


def model_device(model: nn.Module) -> torch.device:
    """The device ``model``'s parameters live on (the host for a model without any)."""
    first = next(model.parameters(), None)
    return torch.device("cpu") if first is None else first.device


def span_outputs(
    model: BlockModel,
    layer: int,
    run: LinearLayerRun,
    sum_DF: Tensor,
    own_DF: Tensor,
    rowptr: np.ndarray,
    degree_S: np.ndarray | None,
    start: int,
) -> Tensor:
    """A linear layer's outputs for destinations ``start ..`` from their neighbour sums.

    ``sum_DF`` is the callers' own temporary: a mean divides it in place. The dense part runs
    where ``model`` lives: on a GPU the run's sums and own rows go up (``LinearLayerRun.max_dst``
    rows at most: the bound on the device memory a run takes) and its outputs come back.
    """
    module = cast(SAGELayer | GCNLayer, model.layers[layer])  # linear_run checked the type
    num = int(rowptr.shape[0] - 1)
    if run.reduce == "mean":
        divide_by_degree(sum_DF, rowptr)
    block = Block(
        num_src=num,
        num_dst=num,
        rowptr=torch.from_numpy(rowptr),
        col=torch.zeros(0, dtype=torch.int64),
        e_id=torch.zeros(0, dtype=torch.int64),
        src_in_degree=None if degree_S is None else torch.from_numpy(degree_S[start : start + num]),
    )
    step = StepDevice(model_device(model))  # on the host: no copies
    sum_DF, own_DF, block = step.put((sum_DF, own_DF, block))
    return model.activate(layer, module.combine(sum_DF, own_DF, block)).to("cpu")


@torch.no_grad()
def linear_layer_outputs(
    model: BlockModel,
    layer: int,
    own_MF: Tensor,
    halo_HF: Tensor,
    shard: PartitionShard,
    index: HaloIndex,
    degree_S: np.ndarray | None,
    run: LinearLayerRun,
    span: tuple[int, int] | None = None,
    *,
    into: Callable[[int], Tensor] | None = None,
) -> Tensor:
    """``[stop - first, H]`` outputs of a linear layer over destinations ``span`` (default all).

    Each edge reads its source row once, in place. The rows are written chunk by chunk into
    ``into(H)`` (called once, at the first chunk, when ``H`` is known; it returns the
    ``[stop - first, H]`` buffer, e.g. rows of a memory-mapped table), by default a new tensor.

    The neighbour sum of a run of destinations is two kernel calls, one over the owned table and
    one over the halo table (edges split by where their source lives), so neither table is
    copied or gathered; GCN's per-source weights scale a copy of the two tables once per layer.
    """
    m = int(own_MF.shape[0])
    own, halo = own_MF, halo_HF
    if run.reduce == "gcn":
        assert degree_S is not None  # the evaluator fetches degrees for GCN models
        s_S = torch.from_numpy(degree_S + 1).float().rsqrt()
        own, halo = own_MF * s_S[:m, None], halo_HF * s_S[m:, None]
    first, stop = span if span is not None else (0, m)
    out: Tensor | None = None
    for start, end, rowptr, col in edge_runs(shard, index, (first, stop), run):
        ptr_own, col_own, ptr_halo, col_halo = _split_edges(col, m, rowptr)
        agg = aggregate(own, ptr_own, col_own, "sum") + aggregate(halo, ptr_halo, col_halo, "sum")
        rows = span_outputs(model, layer, run, agg, own_MF[start:end], rowptr, degree_S, start)
        if out is None:
            width = int(rows.shape[1])
            out = into(width) if into else torch.empty(stop - first, width, dtype=rows.dtype)
        out[start - first : end - first] = rows
        eval_tick()
    assert out is not None  # a span holds at least one node
    return out


def edge_runs(
    shard: PartitionShard, index: HaloIndex, span: tuple[int, int], run: LinearLayerRun
) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
    """Runs ``[start, end)`` of destinations in ``span`` with their in-edges, bounded by ``run``.

    Yields ``(start, end, rowptr, col)``: ``col`` holds int64 source indices into ``[own; halo]``.
    """
    m = int(shard.num_owned)
    indptr = np.asarray(shard.indptr, dtype=np.int64)
    local_E = shard.indices_local
    assert local_E is not None
    start, stop = span
    while start < stop:
        by_edges = int(np.searchsorted(indptr, indptr[start] + run.max_edges, side="right")) - 1
        end = min(start + run.max_dst, stop, max(by_edges, start + 1))
        e0, e1 = int(indptr[start]), int(indptr[end])
        col = np.array(local_E[e0:e1], dtype=np.int64)  # a copy: ours to edit
        halo_E = col >= m
        col[halo_E] = index.source_of_K[col[halo_E] - m]
        yield start, end, indptr[start : end + 1] - e0, col
        start = end


def halo_spans(
    shard: PartitionShard, index: HaloIndex, max_rows: int, step: int | None = None
) -> list[tuple[int, int, np.ndarray]]:
    """Runs of destinations whose distinct halo sources number at most ``max_rows`` each.

    Returns ``(first, stop, halo_pos)`` per run, ``halo_pos`` the sorted positions (into
    ``index.halo_gid``) of the halo rows the run reads. Greedy over steps of ``step``
    destinations (default ``M / 64``, at most 4096); a single step over the limit becomes a
    run of its own.
    """
    m = int(shard.num_owned)
    step = step if step is not None else max(1, min(4096, m // 64))
    indptr = np.asarray(shard.indptr, dtype=np.int64)
    local_E = shard.indices_local
    assert local_E is not None
    spans: list[tuple[int, int, np.ndarray]] = []
    first, held = 0, np.zeros(0, dtype=np.int64)
    for start in range(0, m, step):
        end = min(start + step, m)
        col = np.asarray(local_E[int(indptr[start]) : int(indptr[end])], dtype=np.int64)
        mine = np.unique(index.source_of_K[col[col >= m] - m] - m)
        merged = np.union1d(held, mine)
        if merged.shape[0] > max_rows and start > first:
            spans.append((first, start, held))
            first, merged = start, mine
        held = merged
    spans.append((first, m, held))
    return spans


def restricted(index: HaloIndex, halo_pos: np.ndarray, m: int) -> HaloIndex:
    """``index`` with only the halo rows at ``halo_pos``, renumbered ``M, M + 1, ...``."""
    renumber = np.full(index.halo_gid.shape[0], -1, dtype=np.int64)
    renumber[halo_pos] = np.arange(m, m + halo_pos.shape[0], dtype=np.int64)
    used = index.source_of_K >= 0
    source_of_K = np.full_like(index.source_of_K, -1)
    source_of_K[used] = renumber[index.source_of_K[used] - m]
    return HaloIndex(index.halo_gid[halo_pos], source_of_K)


def gather_rows(own_MF: Tensor, halo_HF: Tensor, source: np.ndarray) -> Tensor:
    """``[S, F]`` rows of ``[own; halo]`` at ``source`` (own rows come first, ascending)."""
    m = int(own_MF.shape[0])
    mine = torch.from_numpy(source[source < m])
    rest = torch.from_numpy(source[source >= m] - m)
    if not rest.numel():
        return own_MF[mine]
    return torch.cat([own_MF[mine], halo_HF[rest]])


def full_block(indptr: np.ndarray, indices: np.ndarray, num_nodes: int) -> Block:
    """Every in-edge of a whole graph as one block (destinations = sources = all nodes).

    Carries the in-degrees, so GCN normalises as on a rank's shard block (and as PyG's
    ``GCNConv`` does on the full graph).
    """
    rowptr = torch.from_numpy(np.asarray(indptr, dtype=np.int64))
    return Block(
        num_src=num_nodes,
        num_dst=num_nodes,
        rowptr=rowptr,
        col=torch.from_numpy(np.asarray(indices, dtype=np.int64)),
        e_id=torch.arange(int(indptr[-1]), dtype=torch.int64),
        src_in_degree=rowptr[1:] - rowptr[:-1],
    )


@torch.no_grad()
def full_graph_logits(model: nn.Module, block: Block, x_NF: Tensor) -> Tensor:
    """Layer-wise inference over one whole-graph block: the single-process reference.

    Costs one ``[N, H]`` activation per layer; used by tests and small-graph tools, never by
    the runtime (which evaluates sharded, ``gnnsys.train.evaluate.ShardEvaluator``).
    """
    model.eval()
    layered = cast(LayerwiseModel, model)
    h = x_NF
    for layer in range(layered.num_layers):
        h = layered.forward_layer(layer, h, block)
    return h
