"""The run's layer-0 setting: where layer 0's neighbour reduction runs, and how rows arrive.

Two paths compute layer 0's reduction instead of reducing fetched float rows
(``gnnsys.train.inputs.PerTypeInputs``, per featured node type): owners send partial sums
(``gnnsys.train.layer0.owner_sums.FirstLayerAggregator``), or halo rows are summed from their
int8/int4 codes (``gnnsys.train.layer0.fused``). Both need layer 0 to be linear in its inputs
(SAGE mean/sum, GCN). :class:`FirstLayerConfig` is the run's setting for them
(``--aggregate-at``, ``--decode-halo``), validated once.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["FirstLayerConfig", "Placement"]


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
    converted here. Models whose first layer is not linear (GAT) and link encoders fall back to
    ``requester``, with one notice (``gnnsys.train.rank``)."""
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
