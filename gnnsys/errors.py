"""Exception hierarchy for gnnsys.

Every class here pickles with its arguments intact (``__reduce__``), so an error raised inside a
Ray actor reaches the driver as the same type with the same fields.
"""

from __future__ import annotations

from typing import Any


class GnnsysError(Exception):
    """Base class of every error gnnsys raises on purpose."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), self.args)


class DatasetNotFoundError(GnnsysError, FileNotFoundError):
    """A dataset's files are missing; the message says where gnnsys looked and how to get them."""


class DatasetFileError(GnnsysError, ValueError):
    """A dataset file exists but cannot be read: truncated, corrupt, empty or another format."""


class PartitionStoreError(GnnsysError):
    """A partition directory is missing, corrupt or of an unknown format.

    Args:
        message: What is wrong, naming the file and the fix.
        path: The offending file or directory.
    """

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message, path)
        self.message = message
        self.path = path

    def __str__(self) -> str:
        return self.message


class CheckpointError(GnnsysError, ValueError):
    """A run directory's checkpoints are corrupt, or a resume would change the run.

    Args:
        message: What is wrong, naming the file or the differing fields, and the fix.
        path: The offending file or run directory.
    """

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message, path)
        self.message = message
        self.path = path

    def __str__(self) -> str:
        return self.message


class RemoteCallTimeoutError(GnnsysError, TimeoutError):
    """A remote call (to a shard owner or a worker) did not answer within its deadline."""


class WorkerFailedError(GnnsysError):
    """One or more training workers failed.

    Args:
        errors_by_rank: Rank -> the worker's error text (with its traceback).
        reason: The failure policy's one line: who caused it, who only suffered from it.
        victims: Ranks that failed only because of another rank or owner (labelled so).
    """

    def __init__(
        self, errors_by_rank: dict[int, str], reason: str = "", victims: tuple[int, ...] = ()
    ) -> None:
        super().__init__(errors_by_rank, reason, tuple(victims))
        self.errors_by_rank = dict(errors_by_rank)
        self.reason = reason
        self.victims = tuple(victims)

    def __str__(self) -> str:
        parts = [
            f"rank {r}{' (victim)' if r in self.victims else ''}: {msg}"
            for r, msg in sorted(self.errors_by_rank.items())
        ]
        head = f"{self.reason}\n" if self.reason else ""
        return f"{head}{len(parts)} worker(s) failed\n" + "\n".join(parts)


class DiskError(GnnsysError, OSError):
    """Writing a file failed for a reason of the file system: full, read-only, no permission.

    Also an ``OSError`` with the original ``errno`` (``ENOSPC``, ``EDQUOT``, ``EROFS``,
    ``EACCES``, ``ENOENT``, ...), so callers that catch ``OSError`` still do. Whatever was being
    written has been removed before this is raised; ``gnnsys.store.diskio.disk_error`` builds one
    from an ``OSError``.

    Args:
        message: What failed, naming the path, the sizes when known, and the fix.
        path: The file or directory that could not be written.
        errno: The ``errno`` of the failed call (``ENOSPC`` for a failed free-space check).
        needed_bytes: Bytes the write needed, when known.
        free_bytes: Bytes free on the file system afterwards, when known.
    """

    def __init__(
        self,
        message: str,
        path: str = "",
        errno: int = 0,
        needed_bytes: int | None = None,
        free_bytes: int | None = None,
    ) -> None:
        super().__init__(errno, message, path)  # OSError's fields: errno, strerror, filename
        self.message = message
        self.path = path
        self.needed_bytes = needed_bytes
        self.free_bytes = free_bytes

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:
        # OSError keeps only (errno, strerror) in ``args``; pickle every constructor argument.
        fields = (self.message, self.path, self.errno, self.needed_bytes, self.free_bytes)
        return (type(self), fields)


class ProcessDiedError(GnnsysError, RuntimeError):
    """A child process gnnsys started died without raising (killed by a signal, or it exited).

    Args:
        message: Which process, the signal or exit code, what it was writing and the fix.
        path: What the process was writing (its partial output has been removed).
        exitcode: The child's exit code (``-N``: killed by signal ``N``; ``None``: unknown).
    """

    def __init__(self, message: str, path: str = "", exitcode: int | None = None) -> None:
        super().__init__(message, path, exitcode)
        self.message = message
        self.path = path
        self.exitcode = exitcode

    def __str__(self) -> str:
        return self.message
