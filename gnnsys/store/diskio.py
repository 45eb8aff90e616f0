"""Writes that fail cleanly: a file-system ``OSError`` becomes one ``DiskError`` naming the fix.

Every writer of a run directory goes through here: the partition store (``writer.py``), the
checkpoints and ``run.json``, ``metrics.jsonl`` and ``summary.json``. Each leaves nothing
half-written behind when the disk fills, the file system is read-only, permission is denied or
the directory vanishes:

- :func:`atomic_write` writes a temporary sibling, fsyncs it and renames it over the target, so
  the target is either the old file or the new one; on failure the temporary file is removed.
- :func:`append_whole` appends in one ``write`` loop and truncates back to the old size when any
  part of it fails, so a line-oriented file only ever holds whole lines.
- :func:`check_free` refuses a write that cannot fit before any byte is written.

:func:`disk_error` turns the ``OSError`` into the :class:`~gnnsys.errors.DiskError` these raise.
"""

from __future__ import annotations

import contextlib
import errno as errno_codes
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from gnnsys.errors import DiskError

__all__ = ["append_whole", "atomic_write", "check_free", "disk_error", "free_bytes", "mount_of"]

_FIX = "choose another --out"


def _size(num_bytes: int) -> str:
    """``num_bytes`` for a message: bytes below 1 KiB, KiB below 1 MiB, else MiB."""
    if num_bytes < 1024:
        return f"{num_bytes} bytes"
    if num_bytes < 1 << 20:
        return f"{num_bytes / 1024:.1f} KiB"
    return f"{num_bytes / 2**20:.1f} MiB"


def _existing(path: Path) -> Path:
    """``path`` or its nearest existing ancestor."""
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def mount_of(path: str | os.PathLike[str]) -> Path:
    """The mount point of the file system holding ``path`` (or its nearest existing ancestor)."""
    probe = _existing(Path(path))
    while not os.path.ismount(probe) and probe != probe.parent:
        probe = probe.parent
    return probe


def _umask() -> int:
    """This process's umask, read without changing it (``os.umask`` would, for every thread)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def free_bytes(path: str | os.PathLike[str]) -> int | None:
    """Bytes an unprivileged user may still write where ``path`` is (``None``: unknown)."""
    try:
        return shutil.disk_usage(_existing(Path(path))).free
    except OSError:
        return None


def disk_error(
    err: OSError, path: str | os.PathLike[str], *, needed: int | None = None
) -> DiskError:
    """The ``DiskError`` of ``err``, raised while writing ``path``, naming the path and the fix.

    Call it after the partial output is removed, so the free space it reports is what is left.

    Args:
        err: The failed call's error (its ``errno`` picks the message).
        path: What was being written (the file, or the directory being filled).
        needed: Bytes the write needed, when known (shown with the free space on a full disk).

    Returns:
        The error to raise (``raise disk_error(err, path) from err``); ``err`` itself when it is
        already a ``DiskError``.
    """
    if isinstance(err, DiskError):
        return err
    path = Path(path)
    code = err.errno or 0
    mount = mount_of(path)
    free = free_bytes(path)
    if code in (errno_codes.ENOSPC, errno_codes.EDQUOT):
        what = "no space left on device" if code == errno_codes.ENOSPC else "disk quota exceeded"
        sizes = [f"needs ~{_size(needed)}"] if needed else []
        sizes += [] if free is None else [f"{_size(free)} free on {mount}"]
        detail = f" ({', '.join(sizes)})" if sizes else ""
        free_what = f"free space on {mount}"
        if needed and free is not None and needed > free:
            free_what = f"free at least {_size(needed - free)} more on {mount}"
        message = f"{what} writing {path}{detail}; {free_what} or {_FIX}"
    elif code == errno_codes.EROFS:
        message = (
            f"read-only file system: cannot write {path} ({mount} is mounted read-only); "
            f"{_FIX} on a writable file system"
        )
    elif code in (errno_codes.EACCES, errno_codes.EPERM):
        message = (
            f"permission denied writing {path}; make {path.parent} writable for this user or {_FIX}"
        )
    elif code == errno_codes.ENOENT:
        message = (
            f"{path.parent} vanished while writing {path} (deleted or unmounted meanwhile); "
            f"recreate it or {_FIX}"
        )
    else:
        name = errno_codes.errorcode.get(code, str(code))
        message = (
            f"cannot write {path}: {err.strerror or err} ({name}); check the file system at "
            f"{mount} or {_FIX}"
        )
    return DiskError(message, str(path), code, needed, free)


def check_free(path: str | os.PathLike[str], needed: int) -> None:
    """Refuse to start writing ``needed`` bytes at ``path`` when the file system has less free.

    Raises:
        DiskError: ``errno`` ``ENOSPC``; the message names both sizes and the fix.
    """
    free = free_bytes(path)
    if free is not None and free < needed:
        full = OSError(errno_codes.ENOSPC, os.strerror(errno_codes.ENOSPC))
        raise disk_error(full, path, needed=needed)


def atomic_write(
    path: str | os.PathLike[str],
    data: bytes,
    *,
    before_replace: Callable[[], None] | None = None,
) -> Path:
    """Write ``data`` to ``path`` atomically: a temporary sibling, fsync, then ``os.replace``.

    The file gets the mode a plain ``open(path, "w")`` would give it (``0666`` less the umask).

    Args:
        path: The target; its directory is created when missing.
        data: The whole content.
        before_replace: Called once the temporary file is durable, just before the rename
            (e.g. to rotate the file being replaced); its ``OSError`` fails the write too.

    Returns:
        ``path``.

    Raises:
        DiskError: Any ``OSError`` on the way; the temporary file is removed and ``path`` is
            as it was (unless ``before_replace`` changed it).
    """
    path = Path(path)
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".tmp", dir=path.parent)
        os.fchmod(fd, 0o666 & ~_umask())  # the mode open(path, "w") gives, not mkstemp's 0600
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())  # durable before the rename makes it the file
        if before_replace is not None:
            before_replace()
        os.replace(tmp, path)
    except BaseException as err:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise disk_error(err, path, needed=len(data)) from err
        raise
    return path


def append_whole(path: str | os.PathLike[str], data: bytes) -> None:
    """Append ``data`` to ``path`` whole or not at all (created when missing).

    A write that fails part way (a full disk accepts part of it, then refuses the rest) is
    truncated back to the file's old size, so a file of lines never ends in half a line.

    Raises:
        DiskError: Opening or writing failed; ``path`` holds what it held before.
    """
    path = Path(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as err:
        raise disk_error(err, path, needed=len(data)) from err
    try:
        size = os.fstat(fd).st_size
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(fd, view) :]  # a short write is followed by the error
        except OSError as err:
            with contextlib.suppress(OSError):  # shrinking a file needs no space
                os.ftruncate(fd, size)
            raise disk_error(err, path, needed=len(data)) from err
    finally:
        os.close(fd)
