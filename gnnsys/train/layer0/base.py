"""What the trainer's layer-0 helpers share: their config, the linearity test, their output.

Two helpers compute layer 0's aggregation instead of ``layer.aggregate`` over fetched float rows:
``gnnsys.train.layer0.owner_sums.FirstLayerAggregator`` (owners send partial sums) and
``gnnsys.train.layer0.fused.FusedFirstLayer`` (halo rows summed from their int8/int4 codes). Both
need the aggregation to be linear in the inputs and both return a :class:`FirstLayerInput`,
which ``BlockModel.forward_from_first_agg`` consumes. :class:`FirstLayerConfig` is the run's
setting for them (``--aggregate-at``, ``--decode-halo``), validated once.

Shape legend: ``M`` block-0 destinations, ``F`` features.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from torch import Tensor, nn

from gnnsys.models import BlockModel, GCNLayer, SAGELayer
from gnnsys.types import SampledSubgraph

if TYPE_CHECKING:
    from gnnsys.train.layer0.plan import PartialPlan

__all__ = [
    "FirstLayer",
    "FirstLayerConfig",
    "FirstLayerInput",
    "Placement",
    "LinearAggregation",
    "linear_aggregation",
    "linear_first_layer",
]


class Placement(str, enum.Enum):
    """Where layer 0's neighbour aggregation runs (a ``str``: prints, compares and dumps as one)."""

    REQUESTER = "requester"
    """The worker that trains fetches every source row and aggregates (the default)."""
    OWNER = "owner"
    """Each owner sums its remote-only rows and sends one partial sum per destination."""
    AUTO = "auto"
    """Per owner and batch, whichever of partial sums or rows costs fewer bytes."""

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, kw_only=True, slots=True)
class FirstLayerConfig:
    """How layer 0 gets its aggregation: placement and fused dequantization."""

    placement: Placement = Placement.REQUESTER
    """``requester``, ``owner`` or ``auto`` (``--aggregate-at``); a string is accepted and
    converted here. Models whose first layer is not linear (GAT, max) fall back to
    ``requester`` (``owner_sums.resolve_placement``)."""
    fused_dequant: bool = True
    """With a codec whose ``fused_aggregate`` is true (int8, int4), ``requester`` placement and a
    linear first layer, sum halo rows straight from their codes instead of decoding them to
    float32 first (``--decode-halo`` turns it off). Same bytes on the wire."""
    compress_partials: bool = True
    """Encode owner-side partial sums with the run codec when its ``partial_sums`` is true
    (else, and when off, they travel as float32)."""

    def __post_init__(self) -> None:
        if not isinstance(self.placement, Placement):
            choices = ", ".join(p.value for p in Placement)
            if self.placement not in tuple(Placement):
                raise ValueError(f"placement={self.placement!r}; choose one of {choices}")
            object.__setattr__(self, "placement", Placement(self.placement))


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
    if not isinstance(model, BlockModel) or not len(model.layers):
        return None
    return linear_aggregation(model.layers[0])


class FirstLayer(Protocol):
    """Computes layer 0's aggregation and root features for one batch, in two steps.

    Built with the worker's ``HaloFeatureSource`` (it fetches every row it still needs there).
    :meth:`prepare` runs in the fetch stage (weight-free, on the host); the trainer's transfer
    stage moves what it returns to the step's device, and :meth:`finish` computes there in the
    compute loop. ``finish(prepare(layer, sub))`` equals ``gather(layer, sub)``.
    """

    def gather(self, layer: nn.Module, sub: SampledSubgraph) -> FirstLayerInput:
        """Layer 0's inputs for ``sub``."""
        ...

    def prepare(self, layer: nn.Module, sub: SampledSubgraph) -> Any:
        """Fetch what layer 0 needs for ``sub`` (a record of tensors; no weights read)."""
        ...

    def finish(self, prepared: Any) -> FirstLayerInput:
        """Layer 0's inputs from what :meth:`prepare` returned, on its tensors' device."""
        ...
