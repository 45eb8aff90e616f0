"""PyG ``Aggregation`` modules backed by ``gnnsys.kernels.aggregate``.

``torch_geometric.nn.SAGEConv(16, 32, aggr=FusedMeanAggregation())`` works unchanged. PyG hands an
aggregation the already-gathered messages ``[E, F]`` plus their destination ``index`` (or a CSR
``ptr``), so here the fused op reduces message rows: with ``ptr`` it reads them in place; with an
unsorted ``index`` it first sorts the edge positions by destination (one ``E`` argsort, no copy of
the messages). Shape legend: ``E`` messages, ``M`` destinations (``dim_size``), ``F`` features.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.nn.aggr import Aggregation

from gnnsys.kernels import aggregate

__all__ = ["FusedMaxAggregation", "FusedMeanAggregation", "FusedSumAggregation"]


def _csr_of_index(index_E: Tensor, dim_size: int) -> tuple[Tensor, Tensor]:
    """``(rowptr [M + 1], col [E])`` grouping message positions by destination, stably."""
    if index_E.numel() > 1 and bool((index_E[1:] >= index_E[:-1]).all()):
        col_E = torch.arange(index_E.numel(), device=index_E.device)  # already grouped
    else:
        col_E = torch.argsort(index_E, stable=True)
    counts = torch.bincount(index_E, minlength=dim_size)
    rowptr = torch.zeros(dim_size + 1, dtype=torch.long, device=index_E.device)
    torch.cumsum(counts, dim=0, out=rowptr[1:])
    return rowptr, col_E


# torch_geometric ships no type information, so its base class is Any to mypy.
class _FusedAggregation(Aggregation):  # type: ignore[misc]
    """Reduces message rows with ``gnnsys.kernels.aggregate`` (``reduce`` set by subclasses)."""

    reduce: str = "sum"

    def forward(
        self,
        x: Tensor,
        index: Tensor | None = None,
        ptr: Tensor | None = None,
        dim_size: int | None = None,
        dim: int = -2,
        max_num_elements: int | None = None,
    ) -> Tensor:
        """Aggregate ``x`` (messages along ``dim``) per destination; see PyG ``Aggregation``.

        Raises:
            ValueError: Neither ``index`` nor ``ptr`` given.
        """
        msgs = x.movedim(dim, 0)
        rest = msgs.shape[1:]
        msgs_EF = msgs.reshape(msgs.shape[0], -1)
        if ptr is not None:
            rowptr = ptr
            col_E = torch.arange(msgs_EF.shape[0], device=x.device)
        elif index is not None:
            size = int(index.max()) + 1 if dim_size is None and index.numel() else dim_size or 0
            rowptr, col_E = _csr_of_index(index.long(), size)
        else:
            raise ValueError(f"{type(self).__name__} needs index or ptr; got neither")
        out_MF = aggregate(msgs_EF, rowptr, col_E, self.reduce)
        return out_MF.reshape(out_MF.shape[0], *rest).movedim(0, dim)


class FusedSumAggregation(_FusedAggregation):
    """Sum aggregation on ``gnnsys.kernels.aggregate``."""

    reduce = "sum"


class FusedMeanAggregation(_FusedAggregation):
    """Mean aggregation on ``gnnsys.kernels.aggregate`` (empty destinations give 0)."""

    reduce = "mean"


class FusedMaxAggregation(_FusedAggregation):
    """Max aggregation on ``gnnsys.kernels.aggregate`` (empty destinations give 0)."""

    reduce = "max"
