"""``CacheConfig``: a worker's halo cache budget and admission policy, as the run sets them.

The run names a budget relative to what each worker owns (``--cache-ratio``) or in MiB
(``--cache-mb``); :meth:`CacheConfig.halo_config` turns it into the byte budget of one worker's
``HaloCache.Config``; :meth:`CacheConfig.budget_bytes` is the bare byte budget, which a
heterogeneous worker splits over its node types (``gnnsys.cache.per_type``). Without a policy or a
budget the cache has capacity 0: every halo row is fetched from its owner, and no scores are
computed (no presample dry run).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from gnnsys.cache.admission import ADMISSION_POLICIES, AdaptiveAdmission
from gnnsys.cache.halo_cache import HaloCache

__all__ = ["MIB", "CacheConfig"]

MIB = 1 << 20


@dataclass(frozen=True, kw_only=True, slots=True)
class CacheConfig:
    """Halo cache of every worker: policy, budget and the policies' knobs."""

    policy: str = "none"
    """Admission policy in ``gnnsys.cache.ADMISSION_POLICIES``: ``none``, ``degree``,
    ``presample`` or ``adaptive`` (``--cache-policy``)."""
    ratio: float = 0.0
    """Budget as a fraction of the worker's own float32 feature bytes (``--cache-ratio``)."""
    mb: float | None = None
    """Budget in MiB (``--cache-mb``); overrides ``ratio`` when set."""
    presample_epochs: int = 1
    """Dry-run sampling epochs behind the ``presample`` and ``adaptive`` scores."""
    placement: str = "host"
    """Where a trainer keeps the feature rows it holds (``--features-on``): ``host`` memory, or
    ``device``: the trainer's device (its GPU), for its own shard's rows (a copy) and its halo
    cache's slots (the budget then being device memory). A batch's rows are then gathered
    there, and the fused layer 0 (``--codec int8|int4``) sums cached rows where they are. On a
    CPU run both are the host."""
    adaptive: AdaptiveAdmission.Config = field(default_factory=AdaptiveAdmission.Config)
    """Knobs of the ``adaptive`` policy (``--cache-decay``, ``--cache-warm-weight``,
    ``--cache-margin``); ignored by the other policies."""

    def __post_init__(self) -> None:
        if self.policy not in ADMISSION_POLICIES:
            choices = sorted(ADMISSION_POLICIES)
            raise ValueError(f"cache policy={self.policy!r}; choose one of {choices}")
        if not (math.isfinite(self.ratio) and self.ratio >= 0):
            raise ValueError(f"cache ratio={self.ratio}; choose a fraction >= 0, e.g. 0.1")
        if self.mb is not None and not (math.isfinite(self.mb) and self.mb >= 0):
            raise ValueError(f"cache mb={self.mb}; choose a budget >= 0 MiB or leave it unset")
        if self.placement not in ("host", "device"):
            raise ValueError(f"cache placement={self.placement!r}; choose host or device")
        if self.presample_epochs < 1:
            raise ValueError(f"cache presample_epochs={self.presample_epochs}; choose >= 1")

    def rows_device(self, device: torch.device | str) -> torch.device | None:
        """Where a trainer on ``device`` keeps the rows it holds; ``None``: the host.

        ``device`` with ``placement == "device"`` on an accelerator; on a CPU run its device is
        the host, so nothing moves (its own rows stay the mapped shard, read ahead).
        """
        on = torch.device(device)
        return on if self.placement == "device" and on.type != "cpu" else None

    @property
    def enabled(self) -> bool:
        """Whether workers keep a halo cache (a policy other than ``none`` and a budget)."""
        budget = self.mb if self.mb is not None else self.ratio
        return self.policy != "none" and budget > 0

    def halo_config(self, *, owned_feature_bytes: int) -> HaloCache.Config:
        """One worker's ``HaloCache.Config``; capacity 0 and policy ``none`` when disabled.

        Args:
            owned_feature_bytes: The worker's own feature matrix as float32 (``M_own * F * 4``),
                the base of ``ratio``.
        """
        if not self.enabled:
            return HaloCache.Config()
        budget = self.budget_bytes(owned_feature_bytes=owned_feature_bytes)
        return HaloCache.Config(capacity_bytes=budget, policy=self.policy)

    def budget_bytes(self, *, owned_feature_bytes: int) -> int:
        """One worker's cache byte budget: ``mb`` MiB, else ``ratio`` x its own feature bytes.

        0 when disabled. A heterogeneous worker splits this one budget over its node types
        (``gnnsys.cache.per_type.split_budget``), with ``owned_feature_bytes`` summed over them.

        Args:
            owned_feature_bytes: The worker's own feature rows as float32 (``M_own * F * 4``,
                summed over node types with features), the base of ``ratio``.
        """
        if not self.enabled:
            return 0
        if self.mb is not None:
            return int(self.mb * MIB)
        # As HaloCache.Config.from_ratio, whose own check of the ratio this path does not need.
        return int(self.ratio * owned_feature_bytes)
