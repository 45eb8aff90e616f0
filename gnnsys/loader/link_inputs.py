"""The seed-link arguments of ``LinkNeighborLoader``, checked as PyG checks them.

Shared by the loader's seeds of both graph kinds (``link_loader.LinkSeeds``,
``hetero_link_loader.TypedLinkSeeds``).

Shape legend: ``L`` seed links of an epoch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

__all__ = ["LinkInputs", "check_time_args", "edge_input", "neg_sampling_of"]


@dataclass(frozen=True, slots=True)
class LinkInputs:
    """A link loader's seed-link arguments as the user gave them (PyG's meanings)."""

    edge_label_index: Any
    edge_label: Tensor | None
    edge_label_time: Tensor | None
    input_id: Tensor | None
    neg_sampling: Any


def edge_input(
    label_index: Tensor,
    edge_label: Tensor | None,
    edge_label_time: Tensor | None,
    input_id: Tensor | None,
    neg_sampling: Any,
    input_type: Any = None,
) -> Any:
    """PyG's ``EdgeSamplerInput`` of every seed link (``[2, L]`` ``label_index``), checked.

    One label, time and id per link (ids default to positions); no labels with triplet
    negatives; labels that start at 0 shifted by one when binary negatives are added (0 then
    means "negative"), as PyG does. ``input_type`` is the edge type on typed graphs.
    """
    from torch_geometric.sampler import EdgeSamplerInput

    num_links = int(label_index.shape[1])
    if input_id is None:
        input_id = torch.arange(num_links)
    for name, value in (
        ("edge_label", edge_label), ("edge_label_time", edge_label_time), ("input_id", input_id)
    ):  # fmt: skip
        if value is not None and int(value.shape[0]) != num_links:
            raise ValueError(f"{name} has {value.shape[0]} entries; need {num_links}")
    neg = neg_sampling
    if edge_label is not None and neg is not None and neg.is_triplet():
        raise ValueError(
            "'edge_label' needs to be undefined for 'triplet'-based negative sampling; use "
            "src_index, dst_pos_index and dst_neg_index of the batch instead"
        )
    binary = neg is not None and neg.is_binary()
    if edge_label is not None and binary and edge_label.numel() and edge_label.min() == 0:
        edge_label = edge_label + 1  # PyG: zero now denotes "negative"
    return EdgeSamplerInput(
        input_id=input_id, row=label_index[0], col=label_index[1], label=edge_label,
        time=edge_label_time, input_type=input_type,
    )  # fmt: skip


def check_time_args(edge_label_time: Tensor | None, time_attr: str | None) -> None:
    """``edge_label_time`` and ``time_attr`` are given together or not at all."""
    if (edge_label_time is not None) != (time_attr is not None):
        raise ValueError(
            "edge_label_time and time_attr go together: pass both for temporal sampling "
            f"('edge_label_time' is {'set' if edge_label_time is not None else 'not set'}, "
            f"time_attr is {time_attr!r})"
        )


def neg_sampling_of(neg_sampling: Any, neg_sampling_ratio: float | None) -> Any:
    """PyG's ``NegativeSampling`` of the arguments (``neg_sampling_ratio``: deprecated form)."""
    from torch_geometric.sampler import NegativeSampling

    if neg_sampling_ratio is not None and neg_sampling_ratio != 0.0:
        neg_sampling = NegativeSampling("binary", neg_sampling_ratio)
    return NegativeSampling.cast(neg_sampling)
