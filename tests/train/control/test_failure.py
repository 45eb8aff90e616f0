from __future__ import annotations

import pytest

from gnnsys.errors import WorkerFailedError
from gnnsys.train.control.failure import (
    FailureAction,
    FailureKind,
    FailurePolicy,
    FailureStatus,
    blame,
)


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


# ---- blame: causes and victims ---------------------------------------------------------------
DIED, GONE, RAISED, TIMEOUT = (
    FailureKind.DIED,
    FailureKind.UNRESPONSIVE,
    FailureKind.RAISED,
    FailureKind.TIMEOUT,
)
GLOO = "RuntimeError: [gloo/transport/tcp/pair.cc:534] Connection closed by peer"


def test_dead_rank_is_the_cause_and_its_peers_victims() -> None:
    found = blame({0: RAISED, 1: DIED, 2: RAISED}, {0: GLOO, 1: "actor died", 2: GLOO})
    assert (found.kind, found.causes, found.cause_ranks, found.victims) == (
        DIED,
        ("rank 1",),
        (1,),
        (0, 2),
    )


def test_frozen_rank_is_the_cause_even_without_peer_errors() -> None:
    found = blame({1: GONE}, {1: "no heartbeat for 10.1 s"})
    assert (found.kind, found.causes, found.victims) == (GONE, ("rank 1",), ())


def test_dead_owner_is_the_cause_of_every_failing_rank() -> None:
    found = blame({0: RAISED, 1: RAISED}, {0: "x", 1: "y"}, owner_kinds={1: DIED})
    assert (found.kind, found.causes, found.cause_ranks, found.victims) == (
        DIED,
        ("owner of part 1",),
        (),
        (0, 1),
    )


def test_rank_with_its_own_error_is_the_cause_of_collective_failures() -> None:
    found = blame({0: RAISED, 1: RAISED}, {0: GLOO, 1: "ValueError: bad batch"})
    assert (found.kind, found.causes, found.victims) == (RAISED, ("rank 1",), (0,))


def test_only_collective_errors_name_every_rank() -> None:
    found = blame({0: RAISED, 1: RAISED}, {0: GLOO, 1: GLOO})
    assert found.causes == ("rank 0", "rank 1") and found.victims == ()


def test_stall_names_the_laggard() -> None:
    found = blame({0: TIMEOUT, 1: TIMEOUT, 2: TIMEOUT}, {}, progress_by_rank={0: 7, 1: 3, 2: 7})
    assert (found.kind, found.causes, found.victims) == (TIMEOUT, ("rank 1",), (0, 2))
    even = blame({0: TIMEOUT, 1: TIMEOUT}, {}, progress_by_rank={0: 3, 1: 3})
    assert even.causes == ("rank 0", "rank 1")


def test_blame_needs_a_failure() -> None:
    with pytest.raises(ValueError, match="at least one"):
        blame({}, {})


@pytest.mark.parametrize(
    ("kind", "restarts", "action", "words"),
    [
        (GONE, 0, FailureAction.RESTART, "rank 1 stopped answering (no heartbeat for 10.1 s)"),
        (GONE, 3, FailureAction.ABORT, "max_restarts=3"),
        (DIED, 0, FailureAction.RESTART, "rank 1 died"),
        (RAISED, 0, FailureAction.ABORT, "rank 1 raised"),
        (TIMEOUT, 0, FailureAction.ABORT, "rank 1 made no progress"),
    ],
)
def test_reason_names_cause_and_victims(
    kind: FailureKind, restarts: int, action: FailureAction, words: str
) -> None:
    status = FailureStatus(
        kind,
        {0: GLOO, 1: "x"},
        restarts,
        has_checkpoint=True,
        causes=("rank 1",),
        victims=(0,),
        detail="no heartbeat for 10.1 s",
    )
    decision = FailurePolicy(FailurePolicy.Config(max_restarts=3)).decide(status)
    assert decision.action is action
    assert words in decision.reason
    assert "rank(s) [0] failed only because of it" in decision.reason
    assert "[0, 1]" not in decision.reason


def test_worker_failed_error_labels_victims_and_pickles() -> None:
    import pickle

    err = WorkerFailedError({0: GLOO, 1: "boom"}, "rank 1 raised; not retrying", (0,))
    text = str(pickle.loads(pickle.dumps(err)))
    assert text.splitlines()[0] == "rank 1 raised; not retrying"
    assert "rank 0 (victim): " in text and "rank 1: boom" in text
