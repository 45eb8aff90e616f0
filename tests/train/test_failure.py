from __future__ import annotations

import pytest

from gnnsys.train.control.failure import FailureAction, FailureKind, FailurePolicy, FailureStatus


@pytest.mark.parametrize(
    ("kind", "restarts", "max_restarts", "expected"),
    [
        (FailureKind.DIED, 0, 3, FailureAction.RESTART),
        (FailureKind.DIED, 2, 3, FailureAction.RESTART),
        (FailureKind.DIED, 3, 3, FailureAction.ABORT),
        (FailureKind.DIED, 0, 0, FailureAction.ABORT),
        (FailureKind.RAISED, 0, 3, FailureAction.ABORT),
        (FailureKind.TIMEOUT, 0, 3, FailureAction.ABORT),
    ],
)
def test_decide(
    kind: FailureKind, restarts: int, max_restarts: int, expected: FailureAction
) -> None:
    policy = FailurePolicy(FailurePolicy.Config(max_restarts=max_restarts))
    status = FailureStatus(kind, {1: "Traceback ..."}, restarts, has_checkpoint=True)
    decision = policy.decide(status)
    assert decision.action is expected
    assert "[1]" in decision.reason


def test_restart_reason_names_origin() -> None:
    policy = FailurePolicy(FailurePolicy.Config())
    status = FailureStatus(FailureKind.DIED, {0: "x"}, 0, has_checkpoint=False)
    assert "epoch 0" in policy.decide(status).reason


def test_config_rejects_negative() -> None:
    with pytest.raises(ValueError, match="max_restarts=-1"):
        FailurePolicy.Config(max_restarts=-1)
