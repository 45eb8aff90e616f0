"""The ``WorkerGroup`` protocol: what the coordinator asks of the ``P`` ranks, whoever runs them.

Two executors implement it: ``RayWorkerGroup`` (``control/ray_group.py``: one trainer and one
shard-owner actor per part, a gloo group) and ``LocalWorkerGroup`` (``control/local_group.py``:
ranks as threads of this process, owners as plain objects). The coordinator drives either the
same way, so the epoch loop, checkpoints and metric lines exist once.

Every call either returns one record per rank, in rank order, or raises :class:`GroupFailure`
with what each failed rank reported; which failure counts as the worst is the failure policy's
decision (``FailurePolicy.worst``), not the executor's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from gnnsys.outputs import OutputRequest, PartFile
from gnnsys.train.control.checkpoint import Checkpoint
from gnnsys.train.control.failure import Blame, FailureKind, blame
from gnnsys.train.eval.evaluate import RankEval
from gnnsys.train.worker import RankState, WorkerEpochReport

__all__ = ["EVAL_LAYER_LOG", "GroupFactory", "GroupFailure", "WorkerGroup"]

EVAL_LAYER_LOG = "evaluation: layer %d/%d done after %.0fs"
"""What a group logs after each evaluation layer (a layer of a large graph takes minutes)."""


class GroupFailure(Exception):  # noqa: N818 (a control-flow signal carrying a record)
    """Raised by a :class:`WorkerGroup` call when ranks failed.

    Args:
        kinds_by_rank: Rank -> what happened to its trainer.
        errors_by_rank: Rank -> error text with traceback.
        owner_kinds: Part -> what happened to its shard owner (only owners that died or
            stopped answering; a trainer that failed because of one is then a victim).
        progress_by_rank: Batches each rank had finished (tells the laggard of a stall).
        detail: How the failure was noticed (``"no heartbeat for 10.2 s"``), for the message.
    """

    def __init__(
        self,
        kinds_by_rank: dict[int, FailureKind],
        errors_by_rank: dict[int, str],
        *,
        owner_kinds: dict[int, FailureKind] | None = None,
        progress_by_rank: dict[int, int] | None = None,
        detail: str = "",
    ) -> None:
        super().__init__(kinds_by_rank, errors_by_rank)
        self.kinds_by_rank, self.errors_by_rank = kinds_by_rank, errors_by_rank
        self.owner_kinds = dict(owner_kinds or {})
        self.progress_by_rank = dict(progress_by_rank or {})
        self.detail = detail

    @classmethod
    def of(cls, kind: FailureKind, errors_by_rank: dict[int, str]) -> GroupFailure:
        """A failure where every listed rank failed the same way."""
        return cls(dict.fromkeys(errors_by_rank, kind), errors_by_rank)

    def blame(self) -> Blame:
        """Causes and victims of this failure (:func:`gnnsys.train.control.failure.blame`)."""
        return blame(
            self.kinds_by_rank,
            self.errors_by_rank,
            owner_kinds=self.owner_kinds,
            progress_by_rank=self.progress_by_rank,
        )


class WorkerGroup(Protocol):
    """``P`` ranks that train, evaluate and report; see the module docstring."""

    def start(self) -> int:
        """Create the ranks and join them up; returns the batches every rank runs per epoch."""
        ...

    def load(self, ckpt: Checkpoint) -> None:
        """Restore a checkpoint on every rank (each its own RNG state)."""
        ...

    def run_epoch(
        self, epoch: int, num_batches: int, on_progress: Callable[[int], None]
    ) -> list[WorkerEpochReport]:
        """Train one epoch; ``on_progress(batches done)`` while it runs."""
        ...

    def evaluate(self, splits: tuple[str, ...], *, with_logits: bool = False) -> list[RankEval]:
        """Sharded exact evaluation of the current weights (one layer on every rank at a time)."""
        ...

    def infer(
        self, request: OutputRequest, on_step: Callable[[int], None] = lambda _: None
    ) -> list[PartFile]:
        """Run the evaluation's layers up to ``request.layer``, then write every rank's part.

        Each rank writes its owned nodes' rows of table ``request.layer`` (``gnnsys.outputs``);
        ``on_step(steps done)`` after each layer and after the writing (a progress bar).
        """
        ...

    def collect(self) -> list[RankState]:
        """Every rank's model, optimizer and RNG state."""
        ...

    def stop(self) -> None:
        """End every rank now; safe to call twice and after a failure."""
        ...


GroupFactory = Callable[[int], WorkerGroup]
"""Makes a fresh group for restart attempt ``n`` (0 for the first)."""
