"""A TensorBoard copy of ``metrics.jsonl``: one scalar per number of an epoch's line.

``gnnsys train --tensorboard DIR`` (``Coordinator.Config.tensorboard``) makes the driver's
:class:`~gnnsys.train.control.recorder.Recorder` write every epoch it appends to
``metrics.jsonl`` to TensorBoard's event files in ``DIR`` too, with the epoch as the step.
Only the driver writes, so one run is one TensorBoard run whatever its part count. The tags:

- ``train/loss``, ``train/batch_acc``;
- ``eval/<metric>``: ``val_acc``, ``test_f1``, ``val_mrr``, ... (epochs that were evaluated);
- ``seconds/<phase>``: ``total``, each stage's busy time, ``stall``, ``eval``; and
  ``pipeline/overlap`` (stage time over loop time, per rank, averaged);
- ``bytes/<category>``: training traffic summed over ranks (``feature_response``, ...), and
  ``eval_bytes/<category>`` for evaluation's;
- ``bytes_by_type/<node type>/<category>`` on heterogeneous runs;
- ``cache/hit_rate`` and every cache counter, when the run has a halo cache;
- ``memory/peak_rss_mib``: the largest rank's peak RSS.

TensorBoard files are a view, not a record: ``metrics.jsonl`` stays the run's source of truth.
A run that starts (or resumes) writes a *purge* marker at step 0 and then every line it keeps,
so the directory always shows exactly ``metrics.jsonl`` (a resumed or restarted run does not
show an abandoned epoch twice). The writer is ``torch.utils.tensorboard.SummaryWriter``, which
needs the ``tensorboard`` package (``pip install 'gnnsys[tensorboard]'``).
"""

from __future__ import annotations

import os
from typing import Any

from gnnsys.train.metrics import is_metric_key

__all__ = ["TensorBoardSink", "check_tensorboard", "scalars_of"]

INSTALL_HINT = "pip install 'gnnsys[tensorboard]' (or pip install tensorboard)"


def check_tensorboard(log_dir: str | os.PathLike[str] | None) -> None:
    """Raise ``ValueError`` when ``log_dir`` is given but TensorBoard cannot be written.

    Called where a run's config is checked, so a missing package fails before any training.
    """
    if log_dir is None:
        return
    if not str(log_dir):
        raise ValueError("tensorboard='' ; give a directory for the event files, or None")
    try:
        import tensorboard  # noqa: F401
    except ImportError as err:
        raise ValueError(
            f"tensorboard={str(log_dir)!r} needs the tensorboard package, which is not "
            f"installed: {INSTALL_HINT}"
        ) from err


def scalars_of(line: dict[str, Any]) -> dict[str, float]:
    """The ``tag -> value`` scalars of one ``metrics.jsonl`` object (module docstring)."""
    out: dict[str, float] = {"train/loss": line["loss"], "train/batch_acc": line["batch_train_acc"]}
    for key, value in line.items():
        if is_metric_key(key) and key != "batch_train_acc" and value is not None:
            out[f"eval/{key}"] = value
    for phase, seconds in line["seconds"].items():
        out["pipeline/overlap" if phase == "overlap" else f"seconds/{phase}"] = seconds
    out |= {f"bytes/{k}": v for k, v in line["bytes"].items()}
    out |= {f"eval_bytes/{k}": v for k, v in line["eval"]["bytes"].items()}
    for node_type, by_category in line.get("bytes_by_type", {}).items():
        out |= {f"bytes_by_type/{node_type}/{k}": v for k, v in by_category.items()}
    out |= {f"cache/{k}": v for k, v in line.get("cache", {}).items()}
    if line["peak_rss_bytes"]:
        out["memory/peak_rss_mib"] = max(line["peak_rss_bytes"]) / 2**20
    return {tag: float(value) for tag, value in out.items()}


class TensorBoardSink:
    """Writes ``metrics.jsonl`` lines to TensorBoard event files in ``log_dir``.

    Args:
        log_dir: The event files' directory (created).

    Raises:
        ValueError: The ``tensorboard`` package is missing (with the command that installs it).
    """

    def __init__(self, log_dir: str | os.PathLike[str]) -> None:
        check_tensorboard(log_dir)
        self.log_dir = str(log_dir)
        self._writer: Any = None

    def begin(self, kept: list[dict[str, Any]]) -> None:
        """Start this run's event file: purge every earlier step, then write ``kept`` again."""
        from torch.utils.tensorboard import SummaryWriter

        self.close()
        self._writer = SummaryWriter(self.log_dir, purge_step=0)
        for line in kept:
            self.write(line)

    def write(self, line: dict[str, Any]) -> None:
        """Add one epoch's scalars (step = its epoch) and flush them to disk."""
        assert self._writer is not None, "begin() first"
        for tag, value in scalars_of(line).items():
            self._writer.add_scalar(tag, value, global_step=int(line["epoch"]))
        self._writer.flush()

    def close(self) -> None:
        """Flush and close the event file (idempotent)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
