"""What the trainer's layer-0 helpers share: the linear-aggregation test and their output record.

Two helpers compute layer 0's aggregation instead of ``layer.aggregate`` over fetched float rows:
``gnnsys.train.layer0.owner_sums.FirstLayerAggregator`` (owners send partial sums) and
``gnnsys.train.layer0.fused.FusedFirstLayer`` (halo rows summed from their int8/int4 codes). Both
need the aggregation to be linear in the inputs and both return a :class:`FirstLayerInput`,
which ``BlockModel.forward_from_first_agg`` consumes.

Shape legend: ``M`` block-0 destinations, ``F`` features.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from torch import Tensor, nn

from gnnsys.models import GCNLayer, SAGELayer
from gnnsys.train.layer0.plan import PartialPlan
from gnnsys.types import SampledSubgraph

__all__ = [
    "FirstLayer",
    "FirstLayerInput",
    "LinearAggregation",
    "linear_aggregation",
    "linear_first_layer",
]


@dataclass(frozen=True, slots=True)
class LinearAggregation:
    """How layer 0 aggregates, when that is linear in its inputs.

    Attributes:
        reduce: ``"mean"`` or ``"sum"`` over the block's in-edges.
        weighted: Sources are scaled by ``GCNLayer.src_scale(block)`` first (GCN).
    """

    reduce: str
    weighted: bool


@dataclass(frozen=True, slots=True, eq=False)
class FirstLayerInput:
    """What layer 0 needs, without the remote rows its owners aggregated.

    Attributes:
        agg_MF: ``[M, F]`` layer 0's neighbour aggregation (``layer.aggregate`` of the full rows).
        x_dst_MF: ``[M, F]`` features of block 0's destinations (the root term).
        plan: The partial-sum plan this batch ran (for inspection and tests); ``None`` when
            no owner summed anything (fused dequantization at the requester).
    """

    agg_MF: Tensor
    x_dst_MF: Tensor
    plan: PartialPlan | None


def linear_aggregation(layer: nn.Module) -> LinearAggregation | None:
    """``layer``'s aggregation when it is linear (SAGE mean/sum, GCN); ``None`` otherwise."""
    if isinstance(layer, SAGELayer) and layer.reduce in ("mean", "sum"):
        return LinearAggregation(reduce=layer.reduce, weighted=False)
    if isinstance(layer, GCNLayer):
        return LinearAggregation(reduce="sum", weighted=True)
    return None


def linear_first_layer(model: nn.Module) -> LinearAggregation | None:
    """The model's layer-0 aggregation when it is linear; ``None`` otherwise (GAT, max)."""
    layers = getattr(model, "layers", None)
    if not isinstance(layers, nn.ModuleList) or not len(layers):
        return None
    return linear_aggregation(layers[0])


class FirstLayer(Protocol):
    """Computes layer 0's aggregation and root features for one batch."""

    def gather(self, layer: nn.Module, sub: SampledSubgraph, features: Any) -> FirstLayerInput:
        """Layer 0's inputs for ``sub``, fetching through the worker's ``features``."""
        ...
