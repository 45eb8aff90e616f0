"""The node runtime's traffic on the one-type cases: integers that hold on any machine.

``tests/train/test_rank_one_type.py`` showed, run by run, that the typed runtime trains a
homogeneous store exactly as the node runtime (``NodeRank``) did. Issue 23 deleted the node
runtime; before it went, ``one_type_golden.json`` was written from the last commit that still
had it, fb668de. That record held losses, metrics and weight digests too, bit for bit, and so
one CPU's float summation order (BLAS kernels, vector width): it failed on every other
machine. Those are now checked against a reference computed in the same run
(``replay_reference``). What stays recorded are the integers of each case's history — bytes
and messages per stage, batch and item counts, cache counters, evaluation traffic — which
depend on sampled ids and routing alone.

The link case's traffic was rewritten once, from this runtime, when ``Trainer`` took
``DistNeighborLoader``'s batch order (``gnnsys.distributed.batches``, issue 46): its 22 steps
per epoch hold other links than the node runtime's per-rank permutation gave them. The node
cases run one step per epoch, so their record still is the node runtime's.

:func:`integers` is the filter, applied both to the record (once, when its floats were
dropped) and to each run before they are compared.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).with_name("one_type_golden.json")


def integers(value: Any) -> Any:
    """``value`` (a run's history, JSON-like) without its floats, at any depth."""
    if isinstance(value, dict):
        return {k: integers(v) for k, v in value.items() if not isinstance(v, float)}
    if isinstance(value, list):
        return [integers(v) for v in value if not isinstance(v, float)]
    return value
