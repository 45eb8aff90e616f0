"""Sparse optimizers for owner-held embedding tables: lazy SparseAdam and SparseAdagrad.

An optimizer here holds the state of one :class:`~gnnsys.models.sparse_embedding.EmbeddingShard`
(``[N_own, D]`` tensors allocated once, zeros) and updates only the rows it is given:

* ``SparseAdam`` is ``torch.optim.SparseAdam``'s rule, operation for operation: lazy moments
  (a row's ``exp_avg``/``exp_avg_sq`` change only on steps that touch it; no decay otherwise)
  and **one global step count** per table, raised by every ``update`` call whether or not it
  touches rows (torch raises ``state["step"]`` on every ``step()`` that sees a gradient, empty
  or not). Bias corrections use that global count; ``eps`` is added to ``sqrt(exp_avg_sq)``
  before the bias correction, as torch does. DGL's ``dgl.optim.SparseAdam`` differs in two
  ways: it counts steps per row and adds ``eps`` after the correction.
* ``SparseAdagrad`` is DGL's ``dgl.optim.SparseAdagrad`` rule: a per-element ``state_sum``
  (``+= g * g``) and ``w -= lr * g / sqrt(state_sum + eps)`` (``eps`` inside the root, DGL's
  default ``1e-10``). It keeps no step count.

Both take a gradient whose duplicates are already summed (``EmbeddingShard.apply`` does it in
a fixed order); DGL *averages* duplicates instead, torch sums them (``coalesce``) as autograd
over a dense table would, and that is what we do.

Bit-identity across partitionings: a row's new value depends only on its own gradient, state
and the global step, and every operation is an IEEE-rounded ``+ - * / sqrt`` applied
element-wise (no ``addcmul``/``addcdiv``/``lerp``, which may fuse a multiply-add in the
vectorised path and round differently in the scalar tail). The same row therefore gets the
same bits whether its owner updates 10 rows or 10 million.

Shape legend: ``N`` rows in the table, ``D`` embedding dim, ``R`` rows in one update.
"""

from __future__ import annotations

import math
from typing import Protocol

import torch
from torch import Tensor

__all__ = ["SPARSE_OPTIMIZERS", "SparseAdagrad", "SparseAdam", "SparseOptimizer"]


class SparseOptimizer(Protocol):
    """State of a sparse optimizer over one ``[N, D]`` table; updates touched rows only."""

    def update(self, weight_ND: Tensor, row_R: Tensor, grad_RD: Tensor) -> None:
        """One step: change ``weight_ND[row_R]`` (distinct rows) by ``grad_RD`` in place."""

    def state_dict(self) -> dict[str, Tensor]:
        """The state tensors (shared, not copied), for checkpoints."""

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        """Copy ``state`` (what :meth:`state_dict` returned) into this optimizer's tensors."""

    @property
    def nbytes(self) -> int:
        """Bytes held by the state tensors."""


def _load_into(own: dict[str, Tensor], state: dict[str, Tensor], kind: str) -> None:
    """Copy ``state`` into ``own`` in place after checking names and shapes."""
    if set(state) != set(own):
        raise ValueError(
            f"{kind} state has keys {sorted(state)}, expected {sorted(own)}; pass the "
            f"state_dict() of a {kind} over a table of the same shape"
        )
    for key, dst in own.items():
        src = state[key]
        if src.shape != dst.shape:
            raise ValueError(
                f"{kind} state {key!r} has shape {tuple(src.shape)}, expected "
                f"{tuple(dst.shape)}; the checkpoint belongs to a different table"
            )
        dst.copy_(src)


def _add_to_rows(table_ND: Tensor, row_R: Tensor, delta_RD: Tensor) -> None:
    """``table_ND[row_R] += delta_RD`` for distinct rows.

    ``index_select``/``index_copy_`` rather than ``t[row]``: 2-4x faster gathers and scatters
    on CPU; rows are distinct, so the scatter has no write conflicts on any device.
    """
    table_ND.index_copy_(0, row_R, table_ND.index_select(0, row_R).add_(delta_RD))


class SparseAdam:
    """``torch.optim.SparseAdam`` over one owner's table (lazy moments, global step)."""

    def __init__(
        self,
        num_rows: int,
        dim: int,
        *,
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        device: torch.device | str = "cpu",
    ) -> None:
        """Allocate ``exp_avg`` and ``exp_avg_sq`` (``[N, D]`` float32 zeros) once.

        Args:
            num_rows: ``N``, rows of the table.
            dim: ``D``, the embedding dim.
            lr: Learning rate.
            betas: ``(beta1, beta2)`` of the moment averages.
            eps: Added to ``sqrt(exp_avg_sq)`` (before the bias correction, as torch does).
            device: Where the state lives (the table's device).
        """
        self.lr, self.beta1, self.beta2, self.eps = lr, betas[0], betas[1], eps
        self.exp_avg_ND = torch.zeros(num_rows, dim, dtype=torch.float32, device=device)
        self.exp_avg_sq_ND = torch.zeros(num_rows, dim, dtype=torch.float32, device=device)
        self.step = 0
        """Global step count: ``update`` calls so far, touched rows or not (torch's rule)."""

    def update(self, weight_ND: Tensor, row_R: Tensor, grad_RD: Tensor) -> None:
        """One torch ``SparseAdam`` step on the distinct rows ``row_R``; counts the step."""
        self.step += 1
        if row_R.numel() == 0:  # torch counts the step and skips an empty gradient
            return
        m_RD = self.exp_avg_ND.index_select(0, row_R)
        v_RD = self.exp_avg_sq_ND.index_select(0, row_R)
        m_RD.add_((grad_RD - m_RD).mul_(1 - self.beta1))  # torch: old += (1 - b) * (new - old)
        v_RD.add_((grad_RD * grad_RD).sub_(v_RD).mul_(1 - self.beta2))
        self.exp_avg_ND.index_copy_(0, row_R, m_RD)
        self.exp_avg_sq_ND.index_copy_(0, row_R, v_RD)
        bias1 = 1 - self.beta1**self.step
        bias2 = 1 - self.beta2**self.step
        step_size = self.lr * math.sqrt(bias2) / bias1
        _add_to_rows(weight_ND, row_R, m_RD.div_(v_RD.sqrt_().add_(self.eps)).mul_(-step_size))

    def state_dict(self) -> dict[str, Tensor]:
        """``exp_avg``, ``exp_avg_sq`` and the global ``step`` (a 0-d int64 tensor)."""
        return {
            "exp_avg": self.exp_avg_ND,
            "exp_avg_sq": self.exp_avg_sq_ND,
            "step": torch.tensor(self.step, dtype=torch.int64),
        }

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        """Restore what :meth:`state_dict` returned."""
        own = {"exp_avg": self.exp_avg_ND, "exp_avg_sq": self.exp_avg_sq_ND}
        step = state.get("step")
        if step is None or step.numel() != 1:
            raise ValueError("SparseAdam state lacks a scalar 'step'; pass its state_dict()")
        _load_into(own, {k: v for k, v in state.items() if k != "step"}, "SparseAdam")
        self.step = int(step)

    @property
    def nbytes(self) -> int:
        """Bytes of the two moment tables (``2 * N * D * 4``)."""
        return sum(t.numel() * t.element_size() for t in (self.exp_avg_ND, self.exp_avg_sq_ND))


class SparseAdagrad:
    """DGL's ``SparseAdagrad`` over one owner's table (per-element sums, ``eps`` in the root)."""

    def __init__(
        self,
        num_rows: int,
        dim: int,
        *,
        lr: float,
        eps: float = 1e-10,
        device: torch.device | str = "cpu",
    ) -> None:
        """Allocate ``state_sum`` (``[N, D]`` float32 zeros) once.

        Args:
            num_rows: ``N``, rows of the table.
            dim: ``D``, the embedding dim.
            lr: Learning rate.
            eps: Added to ``state_sum`` inside the square root (DGL's rule and default).
            device: Where the state lives (the table's device).
        """
        self.lr, self.eps = lr, eps
        self.state_sum_ND = torch.zeros(num_rows, dim, dtype=torch.float32, device=device)

    def update(self, weight_ND: Tensor, row_R: Tensor, grad_RD: Tensor) -> None:
        """One DGL ``SparseAdagrad`` step on the distinct rows ``row_R``."""
        if row_R.numel() == 0:
            return
        sum_RD = self.state_sum_ND.index_select(0, row_R).add_(grad_RD * grad_RD)
        self.state_sum_ND.index_copy_(0, row_R, sum_RD)
        # DGL: w -= clr * g / std (negating first is exact, so the bits equal a subtraction)
        _add_to_rows(weight_ND, row_R, (grad_RD * -self.lr).div_(sum_RD.add_(self.eps).sqrt_()))

    def state_dict(self) -> dict[str, Tensor]:
        """``state_sum``."""
        return {"state_sum": self.state_sum_ND}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        """Restore what :meth:`state_dict` returned."""
        _load_into({"state_sum": self.state_sum_ND}, state, "SparseAdagrad")

    @property
    def nbytes(self) -> int:
        """Bytes of ``state_sum`` (``N * D * 4``)."""
        return self.state_sum_ND.numel() * self.state_sum_ND.element_size()


SPARSE_OPTIMIZERS: dict[str, type[SparseAdam] | type[SparseAdagrad]] = {
    "sparse_adam": SparseAdam,
    "sparse_adagrad": SparseAdagrad,
}
"""Registry: ``EmbeddingConfig.optimizer`` -> optimizer class."""
