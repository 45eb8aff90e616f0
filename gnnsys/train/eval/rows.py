"""Rows of the sharded exact evaluation, for graphs of one node type or many.

The evaluator (``gnnsys.train.eval.sharded.ShardEvaluator``) keeps one table per layer and
node type and reads rows here:

- **table numbers** (what a peer is asked for): ``layer * T + type index`` for ``T`` node types,
  so a one-type graph's table number is its layer (:func:`table_number`);
- **rows of any ids** (:func:`rows_of`): the owned ones from this rank's table (through its book:
  owner and in-owner position of every id of the type), the others from their owners;
- **cached rows** (:func:`fill_cached`): layer-0 halo rows the training cache holds, read
  without changing it, so that only the rest are fetched;
- **remote rows** (:func:`fill_remote`): one request per owner and message piece of at most
  ``message_mb``, each counted in the type's evaluation ledger (``feature_request`` ids,
  ``feature_response`` bytes) and decoded into the caller's rows in request order.

An id is a global node id on a one-type graph and a type-local id on a typed one: the same
thing for a graph with one type.

Shape legend: ``K`` requested rows, ``M`` owned rows, ``F`` a row's width.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor

from gnnsys.cache.codecs import Codec
from gnnsys.train.eval.memory import eval_tick, table_rows
from gnnsys.train.remote.ledger import Ledger
from gnnsys.train.remote.routed import group_by_owner, message_pieces

__all__ = ["Book", "Fetch", "fill_cached", "fill_remote", "rows_of", "table_number"]

Fetch = Callable[[dict[int, np.ndarray]], tuple[dict[int, Any], Codec]]
"""``fetch(ids by owner) -> (encoded answers by owner, their codec)``: one request per owner."""


class Book(Protocol):
    """Owner (``part_N``) and in-owner position (``lid_N``) of every id of one node type."""

    @property
    def part_N(self) -> np.ndarray:
        """``[N]`` owner of every id."""
        ...

    @property
    def lid_N(self) -> np.ndarray:
        """``[N]`` position of every id in its owner's rows."""
        ...


def table_number(layer: int, type_index: int, num_types: int) -> int:
    """The number peers ask for: table ``layer`` of the node type at ``type_index``."""
    return layer * num_types + type_index


def fill_cached(out_KF: Tensor, ids_K: np.ndarray, cache: Any) -> tuple[np.ndarray, int]:
    """Write the rows of ``ids_K`` that ``cache`` holds into ``out_KF`` (``HaloCache.peek``).

    Returns:
        ``(miss_K, hits)``: positions of the ids still to fetch (``fill_remote``'s ``at_K``)
        and how many rows the cache gave.
    """
    got = cache.peek(torch.from_numpy(np.asarray(ids_K, dtype=np.int64)))
    miss_K: np.ndarray = got.miss_pos.numpy()
    hit = np.ones(ids_K.shape[0], dtype=bool)
    hit[miss_K] = False
    hit_K = torch.from_numpy(hit)
    out_KF[hit_K] = got.values_NF[hit_K].to(out_KF.device, out_KF.dtype)
    return miss_K, int(hit.sum())


def fill_remote(
    out_KF: Tensor,
    ids_K: np.ndarray,
    part_K: np.ndarray,
    *,
    part: int,
    message_mb: float,
    ledger: Ledger,
    fetch: Fetch,
    at_K: np.ndarray | None = None,
) -> None:
    """Write the rows of ``ids_K`` that other parts own into ``out_KF`` (request order).

    Args:
        out_KF: Rows to fill; row ``at_K[k]`` (``k`` when ``at_K`` is ``None``) gets id ``k``'s.
        ids_K: The ids (global or type-local).
        part_K: Their owners; rows of ``part`` are left as they are.
        part: This rank.
        message_mb: Bound of one answer (float32 rows of ``out_KF``'s width).
        ledger: Where each request and answer is counted.
        fetch: Asks the owners (``Fetch``).
        at_K: Rows of ``out_KF`` the ids go to.
    """
    by_part = group_by_owner(np.asarray(part_K), skip=part)
    for piece in message_pieces(by_part, int(out_KF.shape[1]), message_mb):
        requests = {p: ids_K[pos] for p, pos in piece.items()}
        answers, codec = fetch(requests)
        for p, pos in piece.items():
            ledger.record("feature_request", requests[p])
            ledger.record_nbytes("feature_response", answers[p].nbytes)
            rows = pos if at_K is None else at_K[pos]
            out_KF[torch.from_numpy(rows)] = codec.decode(answers[p])
            del answers[p]
        eval_tick()


def rows_of(
    own_MF: Tensor,
    ids_K: np.ndarray,
    book: Book,
    *,
    part: int,
    fill: Callable[[Tensor, np.ndarray, np.ndarray], None],
) -> Tensor:
    """``[K, F]`` rows of any ``ids_K``: owned ones from ``own_MF``, the rest through ``fill``.

    ``fill(out_KF, ids_K, part_K)`` writes the rows other parts own (:func:`fill_remote`).
    ``own_MF`` may be a spilled table (rows are read with ``table_rows``).
    """
    part_K = np.asarray(book.part_N[ids_K])
    out_KF = torch.empty(ids_K.shape[0], int(own_MF.shape[1]), dtype=own_MF.dtype)
    mine = np.flatnonzero(part_K == part)
    lid = np.asarray(book.lid_N[ids_K[mine]], dtype=np.int64)
    out_KF[torch.from_numpy(mine)] = table_rows(own_MF, lid)
    fill(out_KF, ids_K, part_K)
    return out_KF
