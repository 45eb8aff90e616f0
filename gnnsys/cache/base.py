"""Feature-source interface: where the feature rows of halo nodes come from.

The cache and the fetcher see owners only through ``FeatureSource``; ``gnnsys.train.transport``
implements it over Ray, and an in-process implementation serves tests and single-worker runs.
"""

from __future__ import annotations

from typing import Protocol

from torch import Tensor


class FeatureSource(Protocol):
    """Returns feature rows for gids (owned by one or several remote parts)."""

    def fetch(self, gid: Tensor) -> Tensor:
        """Rows ``[K, F]`` (float32) for ``gid`` ``[K]`` int64, in request order."""
        ...
