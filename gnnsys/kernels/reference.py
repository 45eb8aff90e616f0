"""The specification of ``aggregate`` in plain torch: slow, obviously correct, differentiable.

Shape legend: ``N`` source rows, ``M`` destination rows, ``E`` edges, ``F`` feature dim.

For destination ``i`` with edges ``e`` in ``rowptr[i]:rowptr[i+1]``::

    out[i] = reduce_{e} dequant(x[col[e]])        reduce in {sum, mean, max}; empty rows give 0

It materialises the ``[E, F]`` messages (``index_select``) and reduces them with ``index_add_`` /
``scatter_reduce``; autograd provides the backward pass (ties in ``max`` split the gradient, which
leaves the gradient with respect to ``x`` unchanged when the tied edges share a source row).
Every fast path is tested against this module.
"""

from __future__ import annotations

import torch
from torch import Tensor

from gnnsys.kernels.csr import AggInputs, dequantize, dst_of_edges

__all__ = ["aggregate_reference"]


def aggregate_reference(inputs: AggInputs) -> Tensor:
    """Aggregate validated inputs; accumulates in fp32 (fp64 for fp64 ``x``).

    Args:
        inputs: Output of ``gnnsys.kernels.csr.check_inputs``.

    Returns:
        ``[M, F]`` in ``inputs.out_dtype``.
    """
    acc_dtype = torch.float64 if inputs.x.dtype == torch.float64 else torch.float32
    values_NF = dequantize(inputs, acc_dtype)
    msgs_EF = values_NF.index_select(0, inputs.col.long())
    dst_E = dst_of_edges(inputs.rowptr)
    shape = (inputs.num_dst, inputs.num_features)
    zeros_MF = torch.zeros(shape, dtype=acc_dtype, device=values_NF.device)
    if inputs.reduce == "max":
        index_EF = dst_E[:, None].expand_as(msgs_EF)
        out_MF = zeros_MF.scatter_reduce(0, index_EF, msgs_EF, "amax", include_self=False)
    else:
        out_MF = zeros_MF.index_add(0, dst_E, msgs_EF)
        if inputs.reduce == "mean":
            deg_M = (inputs.rowptr[1:] - inputs.rowptr[:-1]).clamp(min=1).to(acc_dtype)
            out_MF = out_MF / deg_M[:, None]
    return out_MF.to(inputs.out_dtype)
