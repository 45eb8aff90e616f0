"""Runs of destinations in the typed exact evaluation, and each run's cut inputs.

``gnnsys.train.eval.sharded`` computes a layer's outputs of one destination type in runs of its
owned rows: :func:`destination_runs` bounds each run's rows (``RUN_ROWS``) and in-edges
(``EvalConfig.chunk_edges``), :func:`budget_runs` cuts them further so that no run reads more
distinct halo rows than a halo budget (``EvalConfig.halo_mb``). A layer that is not linear in
its inputs (GAT, R-GCN) gets each run's inputs cut (:func:`cut_run`), under a budget with only
the halo rows the run reads (:func:`with_run_halo`). :func:`one_hop` gives each type's 1-hop
halo and each relation's block over ``[owned ; 1-hop halo]``. A linear layer's run sums its
in-edges out of the owned and the halo rows as two tables (:func:`two_table_sum`), so neither
is copied into one.

Shape legend: ``M_t`` owned nodes of type ``t``, ``H_t`` 1-hop halo nodes of type ``t``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from gnnsys.kernels import aggregate
from gnnsys.kernels.csr import dst_of_edges
from gnnsys.store.shard import Shard
from gnnsys.train.eval.evaluate import EvalConfig
from gnnsys.types import Block, EdgeType

__all__ = [
    "budget_runs",
    "cut_run",
    "destination_runs",
    "one_hop",
    "RUN_ROWS",
    "two_table_sum",
    "with_run_halo",
]


RUN_ROWS = 1 << 14
"""Destinations per evaluation run at most: ``[RUN_ROWS, 128]`` float32 temporaries are 8 MiB."""


def destination_runs(
    blocks: dict[EdgeType, Block], owned: dict[str, int], config: EvalConfig
) -> dict[str, list[tuple[int, int]]]:
    """Per destination type, runs of at most ``RUN_ROWS`` owned rows and ``chunk_edges`` in-edges.

    In-edges of every relation count; a run has at least one row. Runs bound a layer's
    temporaries: its gathered messages, and its ``[rows, H]`` sums, projections and outputs
    (a run of every owned row of a sparse part held four ``[M, H]`` of them at once).
    """
    out: dict[str, list[tuple[int, int]]] = {}
    for t, m in owned.items():
        into = [b for et, b in blocks.items() if et[2] == t]
        if not into:
            continue  # no relation leads here: the layer gives the type no output
        degree = sum(np.diff(b.rowptr.numpy()) for b in into)
        ends = np.cumsum(degree) if m else np.zeros(0, dtype=np.int64)
        runs, first = [], 0
        while first < m:
            base = int(ends[first - 1]) if first else 0
            stop = int(np.searchsorted(ends, base + config.chunk_edges, side="right"))
            stop = min(max(stop, first + 1), first + RUN_ROWS)
            runs.append((first, stop))
            first = stop
        out[t] = runs or [(0, 0)]
    return out


def budget_runs(
    blocks: dict[EdgeType, Block],
    owned: dict[str, int],
    node_type: str,
    spans: list[tuple[int, int]],
    budget: int | None,
    present: list[str],
) -> list[tuple[int, int]]:
    """``spans`` cut so that no run needs more than ``budget`` distinct halo rows.

    Greedy from each run's first row: a halo row counts at the first row that reads it.
    """
    if budget is None:
        return spans
    into = [
        (present.index(et[0]), owned[et[0]], b)
        for et, b in blocks.items()
        if et[2] == node_type and et[0] in present
    ]
    out = []
    for first, stop in spans:
        while first < stop:
            new_R = _first_reads(into, first, stop)
            cum = np.cumsum(new_R)
            end = first + max(1, int(np.searchsorted(cum, budget, side="right")))
            out.append((first, end))
            first = end
    return out


def _first_reads(into: list[tuple[int, int, Block]], first: int, stop: int) -> np.ndarray:
    """``[stop - first]`` halo rows first read at each row of ``[first, stop)``."""
    keys, rows = [], []
    for index, m, block in into:
        ptr = block.rowptr[first : stop + 1].numpy()
        col = block.col[int(ptr[0]) : int(ptr[-1])].numpy()
        row = np.repeat(np.arange(stop - first), np.diff(ptr))
        halo = col >= m
        keys.append((col[halo] - m) * len(into) + index)
        rows.append(row[halo])
    key = np.concatenate([np.zeros(0, np.int64), *keys])
    row = np.concatenate([np.zeros(0, np.int64), *rows])
    uniq, inv = np.unique(key, return_inverse=True)
    first_row = np.full(uniq.shape[0], stop - first, dtype=np.int64)
    np.minimum.at(first_row, inv, row)
    out: np.ndarray = np.bincount(first_row, minlength=stop - first)[: stop - first]
    return out


def with_run_halo(
    x_span: dict[str, Tensor],
    blocks: dict[EdgeType, Block],
    halo_rows: Callable[[str, Tensor, int], Tensor],
) -> tuple[dict[str, Tensor], dict[EdgeType, Block]]:
    """A run's inputs with only the halo rows its edges read, fetched now, columns remapped.

    Halo columns (at or past a source type's owned rows in ``x_span``) become positions in
    the run's own halo rows, appended after ``x_span[src]``; ``halo_rows(src, pos, width)``
    fetches the rows of the source type's halo at positions ``pos``.
    """
    x_out, out = dict(x_span), {}
    halo_cols: dict[str, list[Tensor]] = {}
    for et, block in blocks.items():
        if et[0] in x_span:  # a source type without rows this layer reads nothing
            halo_cols.setdefault(et[0], []).append(block.col[block.col >= x_span[et[0]].shape[0]])
    needed = {}
    for src, cols in halo_cols.items():
        base = int(x_span[src].shape[0])
        pos = torch.unique(torch.cat(cols)) - base if cols else torch.zeros(0, dtype=torch.long)
        needed[src] = pos
        x_out[src] = torch.cat([x_span[src], halo_rows(src, pos, int(x_span[src].shape[1]))])
    for et, block in blocks.items():
        if et[0] not in x_span:
            out[et] = block
            continue
        base = int(x_span[et[0]].shape[0])
        col = block.col.clone()
        halo = col >= base
        col[halo] = base + torch.searchsorted(needed[et[0]] + base, col[halo])
        degree = block.src_in_degree  # GCN's: follows the rows
        if degree is not None:
            degree = torch.cat([degree[:base], degree[base + needed[et[0]]]])
        out[et] = Block(
            num_src=int(x_out[et[0]].shape[0]), num_dst=block.num_dst,
            rowptr=block.rowptr, col=col, e_id=block.e_id, src_in_degree=degree,
        )  # fmt: skip
    return x_out, out


def cut_run(
    blocks: dict[EdgeType, Block], x_dict: dict[str, Tensor], node_type: str, first: int, stop: int
) -> tuple[dict[str, Tensor], dict[EdgeType, Block]]:
    """The layer's inputs for owned ``node_type`` rows ``[first, stop)``.

    The relations into the type are cut to those rows, which become the type's first
    (destination) rows. A relation from the type to itself reads the whole table after
    them (its columns shift by ``stop - first``): one copy of the type's table per span.
    """
    m = stop - first
    selfloop = any(et[0] == node_type for et in blocks if et[2] == node_type)
    x_span = dict(x_dict)
    if node_type in x_dict:
        own = x_dict[node_type][first:stop]
        x_span[node_type] = torch.cat([own, x_dict[node_type]]) if selfloop else own
    out = {}
    for et, block in blocks.items():
        if et[2] != node_type:
            continue
        lo, hi = int(block.rowptr[first]), int(block.rowptr[stop])
        shift = m if et[0] == node_type else 0
        degree = block.src_in_degree  # GCN's: the sources' rows, shifted as they are
        if degree is not None and shift:
            degree = torch.cat([degree[first:stop], degree])
        out[et] = Block(
            num_src=block.num_src + shift,
            num_dst=m,
            rowptr=block.rowptr[first : stop + 1] - lo,
            col=block.col[lo:hi].long() + shift,  # int64: the layers index with it
            e_id=block.e_id[lo:hi],
            src_in_degree=degree,
        )
    return x_span, out


def one_hop(shard: Shard) -> tuple[dict[str, np.ndarray], dict[EdgeType, Block]]:
    """Each type's 1-hop halo and each relation's block over ``[owned ; 1-hop halo]``.

    The shard keeps the k-hop halo; evaluation needs the 1-hop one (type-local ids, ascending).
    """
    owned = {t: s.num_owned for t, s in shard.nodes.items()}
    far: dict[str, list[np.ndarray]] = {t: [] for t in shard.nodes}
    for (src, _, _), rel in shard.relations.items():
        local = np.asarray(rel.indices_local, dtype=np.int64)
        far[src].append(local[local >= owned[src]] - owned[src])
    needed = {t: np.unique(np.concatenate([np.zeros(0, np.int64), *js])) for t, js in far.items()}
    halo_lid = {
        t: np.asarray(shard.nodes[t].halo_lid, dtype=np.int64)[needed[t]] for t in shard.nodes
    }
    blocks = {}
    for et, rel in shard.relations.items():
        src, m = et[0], owned[et[0]]
        col = _relabelled(rel.indices_local, m, needed[src])
        blocks[et] = Block(
            num_src=m + int(needed[src].shape[0]),
            num_dst=owned[et[2]],
            rowptr=torch.from_numpy(np.asarray(rel.indptr, dtype=np.int64)),
            col=torch.from_numpy(col),
            e_id=torch.from_numpy(np.asarray(rel.e_id, dtype=np.int64)),
        )
    return halo_lid, blocks


def _relabelled(local_E: np.ndarray, m: int, needed_H: np.ndarray) -> np.ndarray:
    """``local_E`` over ``[owned ; 1-hop halo]``: int32 where it fits, a chunk at a time.

    The shard's k-hop halo positions become positions in ``needed_H`` (ascending). A part
    holding most of a skewed graph's edges holds ``E * 4`` bytes, not two ``[E]`` int64 copies.
    """
    num_src = m + int(needed_H.shape[0])
    out = np.empty(local_E.shape[0], dtype=np.int32 if num_src < 2**31 else np.int64)
    step = 1 << 22
    for lo in range(0, int(local_E.shape[0]), step):
        col = np.array(local_E[lo : lo + step], dtype=np.int64)
        halo = col >= m
        col[halo] = m + np.searchsorted(needed_H, col[halo] - m)
        out[lo : lo + step] = col
    return out


def two_table_sum(own_MF: Tensor, halo_HF: Tensor, rowptr: Tensor, col: Tensor) -> Tensor:
    """``[D, F]`` neighbour sums of a run's destinations over ``[own ; halo]`` sources.

    ``col`` indexes ``[own ; halo]`` (``M = len(own)``); the edges split by where their source
    lives into two kernel calls, one over each table, so the two are never concatenated (a
    copy of the owned rows, ``M * F * 4`` bytes per layer, is what that would cost).
    """
    m, num_dst = int(own_MF.shape[0]), int(rowptr.shape[0]) - 1
    col = col.to(torch.int64)
    is_own = col < m
    if bool(is_own.all()):
        return aggregate(own_MF, rowptr, col, "sum")
    dst_E = dst_of_edges(rowptr)
    out: Tensor | None = None
    for keep_E, table, offset in ((is_own, own_MF, 0), (~is_own, halo_HF, m)):
        ptr = torch.zeros(num_dst + 1, dtype=torch.int64)
        torch.cumsum(torch.bincount(dst_E[keep_E], minlength=num_dst), 0, out=ptr[1:])
        part = aggregate(table, ptr, col[keep_E] - offset, "sum")
        out = part if out is None else out.add_(part)
    assert out is not None
    return out
