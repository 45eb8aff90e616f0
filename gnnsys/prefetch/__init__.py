"""Batches prepared ahead on threads, in order: used by the sampler, loaders, cache and training.

``Prefetcher`` (``chain``) runs a chain of in-order stages on threads, up to ``depth`` items
ahead; ``OrderedMap`` (``ordered``) maps a function over items on worker threads with results
in input order. Neither knows what a batch holds: the stages are the caller's.
"""

from __future__ import annotations

from gnnsys.prefetch.chain import Prefetcher
from gnnsys.prefetch.ordered import OrderedMap

__all__ = ["OrderedMap", "Prefetcher"]
