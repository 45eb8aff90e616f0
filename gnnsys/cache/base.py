"""Feature-source interface: where the feature rows of halo nodes come from.

The cache and the fetcher see owners only through ``FeatureSource``; ``gnnsys.train.remote.routed``
implements it over Ray, and an in-process implementation serves tests and single-worker runs.

``EncodedFeatureSource`` adds an encoded fetch: the owner encodes the requested rows once per
request with the requester's codec, and the rows stay encoded on the wire and in the cache.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from torch import Tensor

from gnnsys.cache.codecs.base import Codec, EncodedRows


class FeatureSource(Protocol):
    """Returns feature rows for gids (owned by one or several remote parts)."""

    def fetch(self, gid: Tensor) -> Tensor:
        """Rows ``[K, F]`` (float32) for ``gid`` ``[K]`` int64, in request order."""
        ...


@runtime_checkable
class EncodedFeatureSource(Protocol):
    """A ``FeatureSource`` whose owners can encode before sending."""

    def fetch(self, gid: Tensor) -> Tensor:
        """Rows ``[K, F]`` (float32) for ``gid`` ``[K]`` int64, in request order."""
        ...

    def fetch_encoded(self, gid: Tensor, codec: Codec) -> EncodedRows:
        """Rows for ``gid`` ``[K]`` encoded by the owner with ``codec``, in request order.

        ``codec`` is a small frozen object, cheap to pickle to a Ray actor per request.
        """
        ...
