from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnsys.train.remote.ledger import CATEGORIES, Ledger, LedgerSnapshot


def test_counts_payload_bytes_and_messages() -> None:
    ledger = Ledger()
    ledger.record("feature_request", np.arange(5, dtype=np.int64))
    ledger.record("feature_response", torch.zeros(5, 3))
    ledger.record("structure_response", np.zeros(2, np.int64), np.zeros(7, np.int64))
    snap = ledger.snapshot()
    assert snap.bytes["feature_request"] == 40
    assert snap.bytes["feature_response"] == 60
    assert snap.bytes["structure_response"] == 72
    assert snap.messages["structure_response"] == 1
    assert snap.total_bytes == 172
    assert set(snap.bytes) == set(CATEGORIES)


def test_snapshot_arithmetic() -> None:
    ledger = Ledger()
    before = ledger.snapshot()
    ledger.record("allreduce", torch.zeros(10))
    delta = ledger.snapshot() - before
    assert delta.bytes["allreduce"] == 40
    assert (delta + delta).messages["allreduce"] == 2
    assert LedgerSnapshot().total_bytes == 0


def test_unknown_category() -> None:
    with pytest.raises(ValueError, match="unknown ledger category 'bogus'"):
        Ledger().record("bogus")
