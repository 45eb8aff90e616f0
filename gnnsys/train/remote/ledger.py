"""Byte ledger: exact counts of the tensors a worker sends to other processes, by category.

Only payload tensors count (``ndarray.nbytes`` / ``Tensor.nbytes``): Ray's framing, actor-call
arguments that are scalars (fanout, seed, hop) and gloo's protocol bytes are excluded, so two runs
with the same seed give identical counts on any machine.

Besides bytes and messages per traffic category (:data:`CATEGORIES`), the ledger keeps plain
counters (:data:`COUNTERS`) of things that are not bytes on the wire, so ``total_bytes`` stays a
sum of real traffic: owner-side partial aggregation (issue 8) counts the (destination, source)
pairs it sent, the partial sums it got back and the remote rows that did not travel.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np
from torch import Tensor

__all__ = ["CATEGORIES", "COUNTERS", "Ledger", "LedgerSnapshot", "PerTypeLedger"]

CATEGORIES: tuple[str, ...] = (
    "structure_request",
    "structure_response",
    "feature_request",
    "feature_response",
    "allreduce",
    "partial_request",
    "partial_response",
    "embedding_grad",
)
"""Traffic categories; every snapshot lists all of them (zeros included).

``partial_request``: what a requester sends an owner for owner-side aggregation (group row
pointer, source gids, GCN weights); ``partial_response``: the partial sums it gets back (float32,
or the run codec's encoded bytes); ``embedding_grad``: the sparse gradient rows of learnable
embeddings a heterogeneous run sends to the rows' owners (int64 ids plus float32 rows).
"""

COUNTERS: tuple[str, ...] = ("partial_pairs", "partial_sums", "rows_avoided")
"""Non-byte counters; every snapshot lists all of them (zeros included).

``partial_pairs``: (destination, source) pairs sent to owners; ``partial_sums``: partial-sum rows
returned (one per destination and owner); ``rows_avoided``: distinct remote feature rows the
requester did not fetch because their owner aggregated them (multiply by the wire bytes of one
row, plus 8 for its gid, for the bytes they would have cost).
"""


def _nbytes(arrays: tuple[np.ndarray | Tensor, ...]) -> int:
    return sum(int(a.nbytes) for a in arrays)


@dataclass(frozen=True, slots=True)
class LedgerSnapshot:
    """Bytes and messages per category at one point in time (or a difference of two).

    Attributes:
        bytes: Category -> payload bytes.
        messages: Category -> number of messages (one per remote call or collective).
        counts: Counter in :data:`COUNTERS` -> value (not bytes; see there).
        by_type: Node type -> category -> bytes, the part of ``bytes`` a heterogeneous run
            attributes to one node type (empty for homogeneous runs; see ``PerTypeLedger``).
    """

    bytes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0))
    messages: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0))
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))
    by_type: dict[str, dict[str, int]] = field(default_factory=dict)

    def __add__(self, other: LedgerSnapshot) -> LedgerSnapshot:
        return LedgerSnapshot(
            bytes={c: self.bytes[c] + other.bytes[c] for c in CATEGORIES},
            messages={c: self.messages[c] + other.messages[c] for c in CATEGORIES},
            counts={c: self.counts[c] + other.counts[c] for c in COUNTERS},
            by_type=_combine(self.by_type, other.by_type, 1),
        )

    def __sub__(self, other: LedgerSnapshot) -> LedgerSnapshot:
        return LedgerSnapshot(
            bytes={c: self.bytes[c] - other.bytes[c] for c in CATEGORIES},
            messages={c: self.messages[c] - other.messages[c] for c in CATEGORIES},
            counts={c: self.counts[c] - other.counts[c] for c in COUNTERS},
            by_type=_combine(self.by_type, other.by_type, -1),
        )

    @property
    def total_bytes(self) -> int:
        """Bytes over every category."""
        return sum(self.bytes.values())


def _combine(
    a: dict[str, dict[str, int]], b: dict[str, dict[str, int]], sign: int
) -> dict[str, dict[str, int]]:
    """``a + sign * b`` per node type and category (missing entries count as 0)."""
    out: dict[str, dict[str, int]] = {}
    for node_type in sorted(a.keys() | b.keys()):
        x, y = a.get(node_type, {}), b.get(node_type, {})
        out[node_type] = {c: x.get(c, 0) + sign * y.get(c, 0) for c in sorted(x.keys() | y.keys())}
    return out


class Ledger:
    """Mutable counters owned by one worker; read them with :meth:`snapshot`.

    Thread-safe: the prefetch thread counts fetches while the step counts the allreduce.
    """

    def __init__(self) -> None:
        self._bytes = dict.fromkeys(CATEGORIES, 0)
        self._messages = dict.fromkeys(CATEGORIES, 0)
        self._counts = dict.fromkeys(COUNTERS, 0)
        self._lock = threading.Lock()

    def record(self, category: str, *payload: np.ndarray | Tensor) -> None:
        """Count one message of ``category`` carrying ``payload``.

        Raises:
            ValueError: ``category`` is not one of :data:`CATEGORIES`.
        """
        if category not in self._bytes:
            raise ValueError(f"unknown ledger category {category!r}; use one of {CATEGORIES}")
        nbytes = _nbytes(payload)
        with self._lock:
            self._bytes[category] += nbytes
            self._messages[category] += 1

    def record_nbytes(self, category: str, nbytes: int) -> None:
        """Count one message of ``category`` whose payload size is already known (encoded rows)."""
        if category not in self._bytes:
            raise ValueError(f"unknown ledger category {category!r}; use one of {CATEGORIES}")
        with self._lock:
            self._bytes[category] += int(nbytes)
            self._messages[category] += 1

    def count(self, counter: str, value: int) -> None:
        """Add ``value`` to a non-byte counter.

        Raises:
            ValueError: ``counter`` is not one of :data:`COUNTERS`.
        """
        if counter not in self._counts:
            raise ValueError(f"unknown ledger counter {counter!r}; use one of {COUNTERS}")
        with self._lock:
            self._counts[counter] += int(value)

    def snapshot(self) -> LedgerSnapshot:
        """A frozen copy of the counters."""
        with self._lock:
            return LedgerSnapshot(
                bytes=dict(self._bytes), messages=dict(self._messages), counts=dict(self._counts)
            )


class PerTypeLedger:
    """One :class:`Ledger` per node type plus one for untyped traffic (the allreduce).

    A heterogeneous worker hands ``of(t)`` to the routed sources of node type ``t`` (feature
    or embedding rows of ``t``, the neighbor lists of relations into ``t``), so every byte is
    counted once; :meth:`snapshot` adds them up and keeps each type's bytes in ``by_type``.
    """

    def __init__(self, node_types: list[str]) -> None:
        self.untyped = Ledger()
        self.typed = {t: Ledger() for t in node_types}

    def of(self, node_type: str) -> Ledger:
        """The ledger of ``node_type``."""
        return self.typed[node_type]

    def record(self, category: str, *payload: np.ndarray | Tensor) -> None:
        """Count an untyped message (``Ledger.record``)."""
        self.untyped.record(category, *payload)

    def snapshot(self) -> LedgerSnapshot:
        """The sum of every ledger, with each type's non-zero bytes under ``by_type``."""
        snaps = {t: led.snapshot() for t, led in self.typed.items()}
        total = sum(snaps.values(), self.untyped.snapshot())
        by_type = {t: {c: v for c, v in s.bytes.items() if v} for t, s in snaps.items()}
        return LedgerSnapshot(total.bytes, total.messages, total.counts, by_type)
