"""``CSRNeighborSource``: neighbor draws from an in-edge CSR held in this process.

It serves both the whole graph (rows = gids) and one shard (rows = lids of the owned nodes). A
shard keeps each owned node's in-edges in global CSR order, and the draw depends only on the dst
gid and that list (see ``gnnsys.sampler.draw``), so both give identical samples.

**Edge ids** are read only when asked for (``edge_ids=True``, the default): the distributed
runtime's sources leave them out (``edge_ids=False``: every ``e_id`` is ``NO_EDGE_ID``), since
no model it trains reads them and a shard's ``e_id`` array is 8 bytes per edge, read at random:
two thirds of a draw's bytes beside 4-byte ``indices``.

Shape legend: ``M`` destinations, ``E`` drawn edges, ``R`` CSR rows, ``N`` gids.
"""

from __future__ import annotations

import warnings
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor

from gnnsys.sampler.draw import draw_key, draw_positions
from gnnsys.store.pages import ReadAhead
from gnnsys.store.shard import Shard
from gnnsys.types import Graph, NeighborSample

__all__ = ["NO_EDGE_ID", "CSRNeighborSource"]

NO_EDGE_ID = -1
"""The ``e_id`` of a drawn edge whose id was not read (a source with ``edge_ids=False``)."""


def _as_tensor(name: str, value: Tensor | np.ndarray) -> Tensor:
    if isinstance(value, np.ndarray):
        with warnings.catch_warnings():
            # Read-only memory-mapped shard arrays: the source never writes to them, and a copy
            # would cost the whole shard's RAM.
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            value = torch.from_numpy(value)
    if not isinstance(value, Tensor) or value.dim() != 1:
        raise TypeError(f"{name} must be a 1-D tensor or numpy array, got {type(value).__name__}")
    if value.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{name} has dtype {value.dtype}; use int32 or int64")
    return value


class CSRNeighborSource:
    """Implements ``NeighborSource`` over an in-edge CSR in memory.

    Args:
        indptr: ``[R + 1]`` int64 row pointer.
        indices: ``[E]`` int32/int64 source gids of each row's in-edges, in global CSR order.
        e_id: ``[E]`` int64 global edge ids; ``None`` means position = edge id (whole graph).
        row_of_gid: ``[N]`` gid -> row; ``None`` means row = gid (whole graph). Negative = absent.
        owned_gid: ``[R]`` gid of each row; when given, requests for gids whose row holds another
            gid raise (a shard given the global ``lid_N`` map needs it).
        edge_ids: Return each drawn edge's id; ``False`` returns ``NO_EDGE_ID`` for every edge
            without reading ``e_id`` (see the module docstring).

    Raises:
        TypeError: A tensor of the wrong kind or dtype.
        ValueError: Inconsistent lengths.
    """

    concurrent_calls: ClassVar[bool] = True
    """``sample_neighbors`` only reads, in numpy (no torch intra-op threads), so several threads
    may call it at once on disjoint chunks of a request (see ``NeighborSampler.Config``)."""

    def __init__(
        self,
        indptr: Tensor | np.ndarray,
        indices: Tensor | np.ndarray,
        e_id: Tensor | np.ndarray | None = None,
        row_of_gid: Tensor | np.ndarray | None = None,
        *,
        owned_gid: Tensor | np.ndarray | None = None,
        edge_ids: bool = True,
    ) -> None:
        self.edge_ids = edge_ids
        self.indptr = _as_tensor("indptr", indptr).long()
        self.indices = _as_tensor("indices", indices)
        self.e_id = None if e_id is None else _as_tensor("e_id", e_id).long()
        self.row_of_gid = None if row_of_gid is None else _as_tensor("row_of_gid", row_of_gid)
        self.owned_gid = None if owned_gid is None else _as_tensor("owned_gid", owned_gid).long()
        self.num_rows = int(self.indptr.shape[0]) - 1
        # numpy views of the same memory: the draw runs in numpy, single-threaded per call.
        self._indptr = self.indptr.numpy()
        self._indices = self.indices.numpy()
        self._e_id = None if self.e_id is None else self.e_id.numpy()
        self._ahead = self._read_aheads(indptr, indices, e_id, row_of_gid, owned_gid)
        num_edges = int(self.indptr[-1])
        if self.num_rows < 0 or int(self.indices.shape[0]) != num_edges:
            raise ValueError(
                f"indices has {self.indices.shape[0]} entries but indptr[-1]={num_edges}; "
                "pass a CSR whose indptr ends at len(indices)"
            )
        if self.e_id is not None and int(self.e_id.shape[0]) != num_edges:
            raise ValueError(f"e_id has {self.e_id.shape[0]} entries; expected {num_edges}")
        if self.owned_gid is not None and int(self.owned_gid.shape[0]) != self.num_rows:
            raise ValueError(
                f"owned_gid has {self.owned_gid.shape[0]} rows; expected {self.num_rows}"
            )

    def _read_aheads(self, *given: Tensor | np.ndarray | None) -> dict[str, ReadAhead]:
        """A shard's arrays are file mappings: a draw's scattered reads ask for pages first.

        ``given``: the constructor's arrays (the mapping shows on them, not on the views).
        """
        names = ("indptr", "indices", "e_id", "row_of_gid", "owned_gid")
        views = (
            self._indptr,
            self._indices,
            self._e_id,
            None if self.row_of_gid is None else self.row_of_gid.numpy(),
            None if self.owned_gid is None else self.owned_gid.numpy(),
        )
        return {
            name: ReadAhead(view, mapped=array)
            for name, view, array in zip(names, views, given, strict=True)
            if view is not None
        }

    @classmethod
    def from_graph(cls, graph: Graph) -> CSRNeighborSource:
        """Source over a whole ``Graph`` (shares its arrays; edge id = CSR position)."""
        return cls(graph.indptr, graph.indices)

    @classmethod
    def from_relation(
        cls,
        shard: Shard,
        edge_type: tuple[str, str, str],
        lid_N: Tensor | np.ndarray,
        *,
        edge_ids: bool = True,
    ) -> CSRNeighborSource:
        """Source over one relation of a shard: answers only for its owned destinations.

        Ids are the relation's type-local ids; a homogeneous store's one relation
        (``gnnsys.types.ONE_RELATION``) has its gids.

        Args:
            shard: The part; ``edge_type``'s in-edges of its owned destinations (ascending), in
                the relation's CSR order, ``e_id`` their positions in it.
            edge_type: ``(src, rel, dst)``.
            lid_N: The destination type's ``PartitionBook.lid_N``.
            edge_ids: Read each drawn edge's id (``False``: ``NO_EDGE_ID``).
        """
        rel, dst = shard.relations[edge_type], shard.nodes[edge_type[2]]
        return cls(
            rel.indptr.astype(np.int64, copy=False),
            rel.indices_lid,
            rel.e_id.astype(np.int64, copy=False),
            lid_N,
            owned_gid=dst.owned_lid.astype(np.int64, copy=False),
            edge_ids=edge_ids,
        )

    def rows_of(self, gid_M: np.ndarray) -> np.ndarray:
        """CSR rows of int64 ``gid_M``; raises ``ValueError`` naming the first gid not held here."""
        return self._rows(gid_M)

    def _rows(self, gid_M: np.ndarray) -> np.ndarray:
        """CSR rows of ``gid_M``; raises ``ValueError`` naming the first gid not held here."""
        if gid_M.shape[0] == 0:
            return gid_M
        limit = self.num_rows if self.row_of_gid is None else int(self.row_of_gid.shape[0])
        lo, hi = int(gid_M.min()), int(gid_M.max())
        if lo < 0 or hi >= limit:
            self._raise_not_held(lo if lo < 0 else hi)
        if self.row_of_gid is None:
            return gid_M
        rows_M = self._ahead["row_of_gid"].take(gid_M).astype(np.int64, copy=False)
        bad_M = (rows_M < 0) | (rows_M >= self.num_rows)
        if self.owned_gid is not None and self.num_rows > 0:
            held_M = self._ahead["owned_gid"].take(rows_M.clip(0, self.num_rows - 1))
            bad_M |= held_M != gid_M
        if bad_M.any():
            self._raise_not_held(int(gid_M[np.argmax(bad_M)]))
        return rows_M

    def _raise_not_held(self, gid: int) -> None:
        raise ValueError(
            f"gid {gid} is not held by this CSRNeighborSource ({self.num_rows} rows); "
            "send the request to the gid's owner (PartitionBook.owner)"
        )

    def sample_neighbors(
        self, dst_gid: Tensor, fanout: int, *, seed: int, hop: int, replace: bool = False
    ) -> NeighborSample:
        """Draw up to ``fanout`` in-neighbors of every node in ``dst_gid`` (``-1``: all).

        See ``NeighborSource.sample_neighbors``; cost is ``O(M * fanout^2 + E)``, independent
        of degrees (``fanout=-1`` costs the sum of the degrees). Safe to call from several
        threads at once.

        Raises:
            ValueError: ``fanout`` is 0 or below -1, or a gid is not held here.
        """
        if fanout == 0 or fanout < -1:
            raise ValueError(f"fanout={fanout}; use a positive fanout or -1 for all neighbors")
        gid_M = dst_gid.numpy().astype(np.int64, copy=False)
        rows_M = self._rows(gid_M)
        start_M = self._ahead["indptr"].take(rows_M)
        deg_M = self._ahead["indptr"].take(rows_M + 1)
        deg_M -= start_M
        key = draw_key(seed, hop, fanout, replace)
        count_M, pos_E = draw_positions(gid_M, start_M, deg_M, fanout, key=key, replace=replace)
        src_gid_E = self._ahead["indices"].take(pos_E).astype(np.int64, copy=False)
        if not self.edge_ids:
            e_id_E = np.full(pos_E.shape[0], NO_EDGE_ID, dtype=np.int64)
        elif self._e_id is None:
            e_id_E = pos_E
        else:
            e_id_E = self._ahead["e_id"].take(pos_E)
        return NeighborSample(
            count_M=torch.from_numpy(count_M),
            src_gid_E=torch.from_numpy(src_gid_E),
            e_id_E=torch.from_numpy(e_id_E),
        )
