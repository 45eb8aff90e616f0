"""Failure policy: pure functions from what happened to who is to blame and what to do (STYLE S5).

The coordinator observes a :class:`FailureStatus`, asks :meth:`FailurePolicy.decide`, and then
executes the :class:`FailureDecision`; nothing here touches Ray, so every branch is unit-tested.

* A worker *process* that died (killed, OOM, node lost) is transient: restart the group from the
  last checkpoint while restarts remain.
* A process that stopped answering its heartbeat (frozen by SIGSTOP, swapped out, stuck in a
  system call, or dead during start-up) is treated like a dead one: the group kills it and
  restarts, within the same ``max_restarts``.
* A worker that *raised* is a bug or bad input; restarting would raise again, so abort and
  report every rank's traceback.
* A stall (every process answers but no batch finishes for ``--deadline``) aborts as well:
  something hangs in the code, and a restart would hang the same way.

**Blame** (:func:`blame`). One failure makes its peers fail too: a dead or frozen rank leaves
the others raising from gloo or waiting in the allreduce; a dead shard owner makes every trainer
that calls it fail. The ranks whose failure follows from another's are *victims*, named as such
and never as the cause. The cause is, in order: the processes that died or stopped answering
(trainers or owners, as the group's liveness census found them); else the ranks that raised an
error of their own (not a failed collective); else, in a stall, the ranks that finished the
fewest batches (the others wait for them in the allreduce).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = [
    "Blame",
    "FailureAction",
    "FailureDecision",
    "FailureKind",
    "FailurePolicy",
    "FailureStatus",
    "blame",
    "is_collective_error",
]


class FailureKind(enum.Enum):
    """What went wrong in a group of workers."""

    DIED = "died"
    """A worker or shard-owner process exited (killed, crashed, lost its node)."""
    UNRESPONSIVE = "unresponsive"
    """A process stopped answering its heartbeat (frozen, or dead before it answered once)."""
    RAISED = "raised"
    """A worker raised an exception; its traceback is in ``FailureStatus.errors_by_rank``."""
    TIMEOUT = "timeout"
    """Every process answered, but no batch finished (or a call did not return) in time."""


_SEVERITY = (FailureKind.DIED, FailureKind.UNRESPONSIVE, FailureKind.RAISED, FailureKind.TIMEOUT)
_PROCESS_GONE = (FailureKind.DIED, FailureKind.UNRESPONSIVE)

_COLLECTIVE_MARKS = (
    "gloo",
    "Gloo",
    "Connection closed by peer",
    "Connection reset by peer",
    "Broken pipe",
    "BrokenBarrierError",
    "ProcessGroup",
    "rendezvous",
)


def is_collective_error(text: str) -> bool:
    """Whether an error text is a failed collective (a symptom of a peer's failure)."""
    return any(mark in text for mark in _COLLECTIVE_MARKS)


class FailureAction(enum.Enum):
    """What the coordinator does next."""

    RESTART = "restart"
    ABORT = "abort"


@dataclass(frozen=True, slots=True)
class Blame:
    """Output of :func:`blame`: who caused a failure and who only suffered from it.

    Attributes:
        kind: The causes' worst kind (:meth:`FailurePolicy.worst`).
        causes: Labels of the causes, e.g. ``("rank 1",)`` or ``("owner of part 0",)``.
        cause_ranks: Trainer ranks among the causes.
        victims: Trainer ranks that failed only because of a cause.
    """

    kind: FailureKind
    causes: tuple[str, ...]
    cause_ranks: tuple[int, ...] = ()
    victims: tuple[int, ...] = ()


def blame(
    kinds_by_rank: Mapping[int, FailureKind],
    errors_by_rank: Mapping[int, str],
    *,
    owner_kinds: Mapping[int, FailureKind] | None = None,
    progress_by_rank: Mapping[int, int] | None = None,
) -> Blame:
    """Split the failed members into causes and victims (see the module docstring; pure).

    Args:
        kinds_by_rank: Trainer rank -> how it failed.
        errors_by_rank: Trainer rank -> its error text.
        owner_kinds: Part -> how its shard owner failed (dead or unresponsive owners only).
        progress_by_rank: Batches each rank finished (tells the laggard of a stall).

    Raises:
        ValueError: Nothing failed.
    """
    owners = dict(owner_kinds or {})
    gone = sorted(r for r, k in kinds_by_rank.items() if k in _PROCESS_GONE)
    if gone or owners:
        kinds = [kinds_by_rank[r] for r in gone] + list(owners.values())
        labels = tuple(f"rank {r}" for r in gone) + tuple(f"owner of part {p}" for p in owners)
        victims = tuple(sorted(r for r in kinds_by_rank if r not in gone))
        return Blame(FailurePolicy.worst(kinds), labels, tuple(gone), victims)
    raised = sorted(r for r, k in kinds_by_rank.items() if k is FailureKind.RAISED)
    if raised:
        own = [r for r in raised if not is_collective_error(errors_by_rank.get(r, ""))]
        causes = own or raised
        victims = tuple(sorted(r for r in kinds_by_rank if r not in causes))
        return Blame(FailureKind.RAISED, _labels(causes), tuple(causes), victims)
    stalled = sorted(kinds_by_rank)
    if not stalled:
        raise ValueError("blame() needs at least one failed rank or owner")
    if progress_by_rank:
        least = min(progress_by_rank.get(r, 0) for r in stalled)
        laggards = [r for r in stalled if progress_by_rank.get(r, 0) == least]
        if len(laggards) < len(stalled):
            victims = tuple(r for r in stalled if r not in laggards)
            return Blame(FailureKind.TIMEOUT, _labels(laggards), tuple(laggards), victims)
    return Blame(FailureKind.TIMEOUT, _labels(stalled), tuple(stalled))


def _labels(ranks: Iterable[int]) -> tuple[str, ...]:
    return tuple(f"rank {r}" for r in ranks)


@dataclass(frozen=True, slots=True)
class FailureStatus:
    """One observed failure of the actor group.

    Attributes:
        kind: Worst kind among the causes (:func:`blame`).
        errors_by_rank: Rank -> error text with traceback.
        restarts_so_far: Restarts already done in this run.
        has_checkpoint: Whether a checkpoint exists to restart from (else epoch 0).
        causes: Labels of the causes (default: every rank of ``errors_by_rank``).
        victims: Ranks that failed only because of a cause.
        detail: How it was noticed, e.g. ``"no heartbeat for 10.3 s"`` (may be empty).
    """

    kind: FailureKind
    errors_by_rank: dict[int, str]
    restarts_so_far: int
    has_checkpoint: bool
    causes: tuple[str, ...] = ()
    victims: tuple[int, ...] = ()
    detail: str = field(default="")

    def who(self) -> str:
        """The causes as one phrase: ``rank 1``, ``rank(s) [0, 1]`` or ``owner of part 2``."""
        if self.causes:
            return " and ".join(self.causes)
        return f"rank(s) {sorted(self.errors_by_rank)}"


@dataclass(frozen=True, slots=True)
class FailureDecision:
    """Output of :meth:`FailurePolicy.decide`.

    Attributes:
        action: Restart from the last checkpoint, or abort.
        reason: One line for the log and the error message.
    """

    action: FailureAction
    reason: str


class FailurePolicy:
    """Restart on process death or silence up to ``max_restarts`` times; abort otherwise."""

    @dataclass(frozen=True, kw_only=True, slots=True)
    class Config:
        """Failure-handling settings."""

        max_restarts: int = 3
        """Group restarts allowed per run after a worker process dies or stops answering; 0
        aborts on the first."""

        def __post_init__(self) -> None:
            if self.max_restarts < 0:
                raise ValueError(f"max_restarts={self.max_restarts}; choose a value >= 0")

    def __init__(self, config: Config) -> None:
        self.config = config

    @staticmethod
    def worst(kinds: Iterable[FailureKind]) -> FailureKind:
        """The failure that explains the others (the most severe of ``kinds``).

        Order: ``DIED`` > ``UNRESPONSIVE`` > ``RAISED`` > ``TIMEOUT``. A dead rank closes its
        gloo sockets, so its peers raise too; a raising rank leaves its
        peers waiting in a collective until their deadline. Seeing the cause keeps a death
        from being mistaken for a bug (which would abort instead of restart).

        Raises:
            ValueError: No kinds given.
        """
        seen = set(kinds)
        for kind in _SEVERITY:
            if kind in seen:
                return kind
        raise ValueError("worst() needs at least one failure kind")

    def decide(self, status: FailureStatus) -> FailureDecision:
        """Return the action for ``status`` (pure: no I/O, no clock)."""
        who = status.who()
        victims = _victims(status.victims)
        detail = f" ({status.detail})" if status.detail else ""
        if status.kind is FailureKind.RAISED:
            return FailureDecision(FailureAction.ABORT, f"{who} raised{victims}; not retrying")
        if status.kind is FailureKind.TIMEOUT:
            return FailureDecision(
                FailureAction.ABORT,
                f"{who} made no progress within the deadline{detail}{victims}; "
                "not retrying: raise --deadline if it is only slow",
            )
        what = "died" if status.kind is FailureKind.DIED else "stopped answering"
        if status.restarts_so_far >= self.config.max_restarts:
            return FailureDecision(
                FailureAction.ABORT,
                f"{who} {what}{detail}{victims} and {status.restarts_so_far} restart(s) were "
                f"used (max_restarts={self.config.max_restarts})",
            )
        origin = "the last checkpoint" if status.has_checkpoint else "epoch 0"
        return FailureDecision(
            FailureAction.RESTART,
            f"{who} {what}{detail}{victims}; restart {status.restarts_so_far + 1}/"
            f"{self.config.max_restarts} from {origin}",
        )


def _victims(ranks: tuple[int, ...]) -> str:
    if not ranks:
        return ""
    return f"; rank(s) {list(ranks)} failed only because of it"
