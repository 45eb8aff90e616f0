"""Failure policy: a pure function from what happened to what to do (STYLE S5).

The coordinator observes a :class:`FailureStatus`, asks :meth:`FailurePolicy.decide`, and then
executes the :class:`FailureDecision`; nothing here touches Ray, so every branch is unit-tested.

* A worker *process* that died (killed, OOM, node lost) is transient: restart the group from the
  last checkpoint while restarts remain.
* A worker that *raised* is a bug or bad input; restarting would raise again, so abort and
  report every rank's traceback.
* A deadline that passed aborts as well: something hangs, and a restart would hang the same way.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["FailureAction", "FailureDecision", "FailureKind", "FailurePolicy", "FailureStatus"]


class FailureKind(enum.Enum):
    """What went wrong in a group of workers."""

    DIED = "died"
    """A worker or shard-owner process exited (killed, crashed, lost its node)."""
    RAISED = "raised"
    """A worker raised an exception; its traceback is in ``FailureStatus.errors_by_rank``."""
    TIMEOUT = "timeout"
    """A call passed its deadline."""


class FailureAction(enum.Enum):
    """What the coordinator does next."""

    RESTART = "restart"
    ABORT = "abort"


@dataclass(frozen=True, slots=True)
class FailureStatus:
    """One observed failure of the actor group.

    Attributes:
        kind: Worst kind among the failed ranks (:meth:`FailurePolicy.worst`).
        errors_by_rank: Rank -> error text with traceback.
        restarts_so_far: Restarts already done in this run.
        has_checkpoint: Whether a checkpoint exists to restart from (else epoch 0).
    """

    kind: FailureKind
    errors_by_rank: dict[int, str]
    restarts_so_far: int
    has_checkpoint: bool


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
    """Restart on process death up to ``max_restarts`` times; abort on anything else."""

    @dataclass(frozen=True, kw_only=True, slots=True)
    class Config:
        """Failure-handling settings."""

        max_restarts: int = 3
        """Group restarts allowed per run after a worker process dies; 0 aborts on the first."""

        def __post_init__(self) -> None:
            if self.max_restarts < 0:
                raise ValueError(f"max_restarts={self.max_restarts}; choose a value >= 0")

    def __init__(self, config: Config) -> None:
        self.config = config

    @staticmethod
    def worst(kinds: Iterable[FailureKind]) -> FailureKind:
        """The failure that explains the others: ``DIED`` > ``RAISED`` > ``TIMEOUT``.

        A dead rank closes its gloo sockets, so its peers raise too; a raising rank leaves its
        peers waiting in a collective until their deadline. Seeing the cause keeps a death
        from being mistaken for a bug (which would abort instead of restart).

        Raises:
            ValueError: No kinds given.
        """
        seen = set(kinds)
        for kind in (FailureKind.DIED, FailureKind.RAISED, FailureKind.TIMEOUT):
            if kind in seen:
                return kind
        raise ValueError("worst() needs at least one failure kind")

    def decide(self, status: FailureStatus) -> FailureDecision:
        """Return the action for ``status`` (pure: no I/O, no clock)."""
        ranks = sorted(status.errors_by_rank)
        if status.kind is FailureKind.RAISED:
            return FailureDecision(FailureAction.ABORT, f"rank(s) {ranks} raised; not retrying")
        if status.kind is FailureKind.TIMEOUT:
            return FailureDecision(
                FailureAction.ABORT, f"rank(s) {ranks} passed the deadline; raise --deadline"
            )
        if status.restarts_so_far >= self.config.max_restarts:
            return FailureDecision(
                FailureAction.ABORT,
                f"rank(s) {ranks} died and {status.restarts_so_far} restart(s) were used "
                f"(max_restarts={self.config.max_restarts})",
            )
        origin = "the last checkpoint" if status.has_checkpoint else "epoch 0"
        return FailureDecision(
            FailureAction.RESTART,
            f"rank(s) {ranks} died; restart {status.restarts_so_far + 1}/"
            f"{self.config.max_restarts} from {origin}",
        )
