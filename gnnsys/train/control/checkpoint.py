"""Checked, rotated checkpoints and a run's identity.

**Files.** ``save_checkpoint`` writes ``checkpoint.pt`` atomically (temp file in the same folder,
fsync, then the one it replaces is renamed to ``checkpoint.prev.pt`` and the temp file renamed
into place), so the last two survive. A write that fails (full disk, read-only file system, ...)
removes its temp file, leaves both checkpoints as they were and raises ``DiskError`` naming the
path and the size (``gnnsys.store.diskio``). Each file starts with a line naming the xxh3_128
of the ``torch.save`` bytes that follow: ``torch.load`` alone accepts most bit flips (its zip
reader does not check CRCs), the digest refuses them. Loading uses ``weights_only=True``, so a
checkpoint is plain tensors, dicts, lists and numbers and cannot execute code.
``load_checkpoint`` falls back to the previous file when the newest is corrupt, logs a warning
and returns the notice with the checkpoint.

**Identity.** A run is what its config and its store make it: ``identity_of(config_json,
store)`` flattens the config into dotted fields (``model.hidden``, ``sampler.fanouts``, ...) and
adds the store's fields (``store_identity(manifest)``: dataset, graph fingerprint, a digest of
every file's checksum, partition). ``write_identity`` stores it as ``RUN_DIR/run.json`` before
training (the CLI pre-flight does, before Ray starts); every checkpoint embeds it.
``resume_differences`` compares two identities: data, store, model shape and the part count can
never change on resume; other fields only when the user allows them (``ALWAYS_ALLOWED`` fields,
the epoch count, always may).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import xxhash

from gnnsys.errors import CheckpointError
from gnnsys.store.diskio import atomic_write, disk_error

__all__ = [
    "ALWAYS_ALLOWED",
    "check_resume",
    "NEVER_ALLOWED_PREFIXES",
    "CHECKPOINT_NAME",
    "PREVIOUS_NAME",
    "RUN_NAME",
    "Checkpoint",
    "Difference",
    "RunIdentity",
    "identity_of",
    "load_checkpoint",
    "read_identity",
    "remove_checkpoints",
    "resume_differences",
    "save_checkpoint",
    "store_identity",
    "write_identity",
]

log = logging.getLogger(__name__)

CHECKPOINT_NAME = "checkpoint.pt"
PREVIOUS_NAME = "checkpoint.prev.pt"
RUN_NAME = "run.json"
_FORMAT_VERSION = 2
_MAGIC = b"gnnsys-checkpoint xxh3_128 "
_FRESH = "start a fresh run directory (another --out), or train without --resume"

IGNORED = frozenset(
    {
        "loop.resume",
        "loop.progress",
        "loop.deadline_s",
        "loop.heartbeat_s",
        "loop.startup_deadline_s",
        "loop.tensorboard",
        "cluster.address",
        "cluster.threads",
        "cluster.owner_reads",
        "cluster.device",
        "trainer.prefetch",
        "data.root",
        "data.store",
        "eval.halo_mb",
        "eval.spill_mb",
        "eval.block_mb",
        "eval.message_mb",
    }
)
"""Fields that never matter for resuming: where Ray runs and on which device (checkpoints hold
CPU tensors: a run trained on a GPU resumes on a CPU and the other way round), logging, paths
to the same data, and where an evaluation keeps its memory (a run resumed under another memory
limit changes these; the values are the same, or with ``block_mb`` equal up to float
rounding)."""
IGNORED_PREFIXES = ("failure.", "loop.resources.")
NEVER_ALLOWED_PREFIXES = (
    "run.",
    "store.",
    "data.",
    "model.name",
    "model.args",
    "model.hidden",
    "model.num_layers",
    "cluster.parts",
)
"""Fields a resume can never change: other data or store, another model shape or part count."""
ALWAYS_ALLOWED = frozenset({"loop.epochs"})
"""Fields a resume may change unasked (still reported): training longer is what resume is for."""


@dataclass(frozen=True, slots=True)
class RunIdentity:
    """What makes a run itself: sorted ``(field, JSON value)`` pairs."""

    fields: tuple[tuple[str, str], ...]

    def as_dict(self) -> dict[str, str]:
        """Field -> JSON-encoded value."""
        return dict(self.fields)


@dataclass(frozen=True, slots=True)
class Difference:
    """One field in which a resumed run differs from the run that wrote the checkpoint."""

    field: str
    old: str
    new: str
    allowed: bool
    """The change is safe and was allowed (by the user or ``ALWAYS_ALLOWED``)."""

    def __str__(self) -> str:
        return f"{self.field} {self.old} -> {self.new}"


@dataclass(frozen=True, slots=True, eq=False)
class Checkpoint:
    """Everything needed to continue a run as if it never stopped.

    Attributes:
        epoch: Last completed epoch (0-based).
        model_state: ``state_dict`` of the model (identical on every rank after allreduce).
        optimizer_state: ``state_dict`` of the optimizer (identical on every rank).
        rng_by_rank: Rank -> that worker's RNG states (``{"torch": ByteTensor}``).
        best_val_acc: Best validation accuracy so far (for ``summary.json``).
        identity: The run's identity when it was written (``None``: older checkpoint or API
            use without ``run.json``).
        notice: Set by ``load_checkpoint`` when it fell back to the previous checkpoint.
    """

    epoch: int
    model_state: dict[str, Any]
    optimizer_state: dict[str, Any]
    rng_by_rank: list[dict[str, Any]]
    best_val_acc: float = -1.0
    identity: RunIdentity | None = None
    notice: str | None = None


# ---- identity ----------------------------------------------------------------------------------
def _flatten(obj: Any, prefix: str, out: dict[str, str]) -> None:
    if isinstance(obj, Mapping) and obj:
        for key, value in obj.items():
            _flatten(value, f"{prefix}{key}.", out)
    else:
        out[prefix[:-1]] = json.dumps(obj, sort_keys=True)


def store_identity(manifest: Any) -> dict[str, str]:
    """The store fields of an identity, from a ``gnnsys.store.Manifest``.

    ``store.content`` digests every file's checksum, so a store rewritten with other features
    or labels differs even when its graph (``store.graph``, the CSR fingerprint) is the same.
    """
    sums = sorted((rel, e.xxh3 or e.sha256) for rel, e in manifest.files.items())
    content = hashlib.sha256(json.dumps(sums).encode()).hexdigest()[:16]
    return {
        "store.dataset": manifest.dataset,
        "store.graph": manifest.fingerprint,
        "store.content": content,
        "store.partition": f"{manifest.strategy} seed {manifest.seed}, "
        f"{manifest.num_parts} parts, {manifest.num_hops}-hop halo",
    }


def identity_of(config_json: Mapping[str, Any], store: Mapping[str, str]) -> RunIdentity:
    """The identity of a run of ``config_json`` (``RunConfig.to_json()``) on ``store``.

    Args:
        config_json: The run's config as JSON-ready dicts.
        store: ``store_identity(manifest)`` of the store it trains on.

    Returns:
        The identity; ``model.num_layers`` (the fanout count) is derived, because it is the
        model's depth, and ``run.dataset`` (the store's dataset, else the config's) so two
        runs are always compared on their data even when only one knew its store.
    """
    flat: dict[str, str] = {}
    _flatten(config_json, "", flat)
    if flat.get("data.store", "null") != "null":  # a given store defines the data
        flat = {k: v for k, v in flat.items() if not k.startswith("data.")}
    flat = {
        k: v for k, v in flat.items() if k not in IGNORED and not k.startswith(IGNORED_PREFIXES)
    }
    fanouts = config_json.get("sampler", {}).get("fanouts")
    if fanouts is not None:
        flat["model.num_layers"] = json.dumps(len(fanouts))
    flat |= {k: json.dumps(v) for k, v in store.items()}
    # Always comparable, whether or not either run knew its store yet (a fresh run without
    # --store writes RUN_DIR/store only after the pre-flight).
    dataset = store.get("store.dataset") or config_json.get("data", {}).get("dataset")
    flat["run.dataset"] = json.dumps(dataset)
    return RunIdentity(tuple(sorted(flat.items())))


def stored_identity(fields: Iterable[tuple[str, str]]) -> RunIdentity:
    """An identity read back from a file, its fields under their current names.

    ``gnnsys.run_file.RENAMED``: an older run's ``hetero.model`` is ``node_types.model``.
    """
    from gnnsys.run_file import renamed_field

    return RunIdentity(tuple(sorted((renamed_field(k), v) for k, v in fields)))


def resume_differences(
    old: RunIdentity, new: RunIdentity, allowed: frozenset[str] = frozenset()
) -> list[Difference]:
    """Every field present in both identities whose value differs, marked allowed or not.

    Args:
        old: Identity in the checkpoint.
        new: Identity of the run that would resume it.
        allowed: Fields the user allows to change (dotted names, e.g. ``trainer.lr``); fields
            under ``NEVER_ALLOWED_PREFIXES`` stay refused even if listed.
    """
    a, b = old.as_dict(), new.as_dict()
    out = []
    for key in sorted(a.keys() & b.keys()):
        if a[key] != b[key]:
            ok = (key in allowed or key in ALWAYS_ALLOWED) and not key.startswith(
                NEVER_ALLOWED_PREFIXES
            )
            out.append(Difference(key, a[key], b[key], ok))
    return out


def check_resume(
    run_dir: str | os.PathLike[str], identity: RunIdentity, allowed: frozenset[str]
) -> list[str]:
    """Compare a run to the checkpoint in ``run_dir`` it would resume.

    Returns:
        Notices: a fallback to the previous checkpoint, the allowed changes, a missing
        checkpoint or identity.

    Raises:
        CheckpointError: Every checkpoint is corrupt, or a field differs that is not allowed
            (the message names each field with both values, and the fix).
    """
    out = Path(run_dir)
    ckpt = load_checkpoint(out)
    if ckpt is None:
        return [f"--resume: {out} has no checkpoint yet; starting at epoch 0"]
    notices = [ckpt.notice] if ckpt.notice else []
    if ckpt.identity is None:
        return [*notices, f"{out}: the checkpoint predates run identities; not compared"]
    diffs = resume_differences(ckpt.identity, identity, allowed)
    refused = [d for d in diffs if not d.allowed]
    if refused:
        safe = [d.field for d in refused if not d.field.startswith(NEVER_ALLOWED_PREFIXES)]
        fix = "start a new --out directory"
        if safe:
            fix += (
                f", or if the change is safe pass --allow-change {','.join(safe)} "
                f"(Python: allow_change={safe})"
            )
        raise CheckpointError(
            f"cannot resume {out}: this run differs from the checkpoint's in "
            + "; ".join(map(str, refused))
            + f"; {fix} (data, store, model width and depth and --parts never change on resume)",
            str(out),
        )
    if diffs:
        notices.append("resuming with changes: " + "; ".join(map(str, diffs)))
    return notices


def write_identity(run_dir: str | os.PathLike[str], identity: RunIdentity) -> Path:
    """Write ``run_dir/run.json`` atomically; later checkpoints embed it.

    Raises:
        DiskError: The write failed; no temp file is left and an old ``run.json`` is kept.
    """
    text = json.dumps({"identity": identity.as_dict()}, indent=1, sort_keys=True) + "\n"
    return atomic_write(Path(run_dir) / RUN_NAME, text.encode())


def read_identity(run_dir: str | os.PathLike[str]) -> RunIdentity | None:
    """The identity in ``run_dir/run.json``, or ``None`` when missing or unreadable."""
    try:
        obj = json.loads((Path(run_dir) / RUN_NAME).read_text())
        fields = obj["identity"]
        return stored_identity((str(k), str(v)) for k, v in fields.items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


# ---- files -------------------------------------------------------------------------------------
def save_checkpoint(run_dir: str | os.PathLike[str], ckpt: Checkpoint) -> Path:
    """Write ``run_dir/checkpoint.pt`` atomically, keeping the one it replaces as the previous.

    The identity embedded is ``ckpt.identity``, else the one in ``run_dir/run.json``.

    Raises:
        DiskError: The write failed (the message names the path and the checkpoint's size);
            the temp file is removed and both existing checkpoints are untouched.
    """
    run_dir = Path(run_dir)
    identity = ckpt.identity or read_identity(run_dir)
    payload = {
        "format_version": _FORMAT_VERSION,
        "epoch": ckpt.epoch,
        "model_state": ckpt.model_state,
        "optimizer_state": ckpt.optimizer_state,
        "rng_by_rank": ckpt.rng_by_rank,
        "best_val_acc": ckpt.best_val_acc,
        "identity": None if identity is None else json.dumps(identity.as_dict()),
    }
    buf = io.BytesIO()
    torch.save(payload, buf)  # in memory: the digest goes first; a model state is small
    body = buf.getvalue()
    head = _MAGIC + xxhash.xxh3_128(body).hexdigest().encode() + b"\n"
    final = run_dir / CHECKPOINT_NAME
    # Rotate only once the new file is durable: a failed write leaves both checkpoints as
    # they were; a crash between the two renames leaves only the previous one.
    return atomic_write(final, head + body, before_replace=lambda: _rotate(final))


def _rotate(final: Path) -> None:
    """Rename an intact ``final`` to ``checkpoint.prev.pt`` (a damaged one is overwritten)."""
    if not final.exists():
        return
    if _digest_ok(final):
        os.replace(final, final.parent / PREVIOUS_NAME)
    else:  # never rotate a damaged file over an intact previous one
        log.warning("%s is corrupt; replacing it and keeping %s", final, PREVIOUS_NAME)


def _digest_ok(path: Path) -> bool:
    """Whether ``path`` passes its checksum (a checksum-less format-1 file: whether it loads)."""
    try:
        data = path.read_bytes()
    except OSError:
        return False
    if data.startswith(b"PK"):
        try:
            _read(path)
        except CheckpointError:
            return False
        return True
    head, _, body = data.partition(b"\n")
    return (
        data.startswith(_MAGIC)
        and xxhash.xxh3_128(body).hexdigest().encode() == head[len(_MAGIC) :]
    )


def remove_checkpoints(run_dir: str | os.PathLike[str]) -> None:
    """Delete both checkpoints of ``run_dir`` (a fresh run must never resume an old one).

    Raises:
        DiskError: One cannot be removed (a read-only file system, no permission).
    """
    for name in (CHECKPOINT_NAME, PREVIOUS_NAME):
        path = Path(run_dir) / name
        try:
            path.unlink(missing_ok=True)
        except OSError as err:
            raise disk_error(err, path) from err


def _read(path: Path) -> Checkpoint:
    """Parse one checkpoint file; raises ``CheckpointError`` on any corruption."""
    try:
        data = path.read_bytes()
    except OSError as err:
        raise CheckpointError(f"{path}: cannot read ({err})", str(path)) from err
    if data.startswith(_MAGIC):
        head, _, body = data.partition(b"\n")
        if xxhash.xxh3_128(body).hexdigest().encode() != head[len(_MAGIC) :]:
            raise CheckpointError(f"{path}: checksum mismatch (corrupt or truncated)", str(path))
        version = _FORMAT_VERSION
    elif data.startswith(b"PK"):
        body, version = data, 1  # before checksums: a plain torch.save zip
    else:
        raise CheckpointError(f"{path}: not a gnnsys checkpoint (unknown header)", str(path))
    try:
        payload = torch.load(io.BytesIO(body), weights_only=True, map_location="cpu")
        if not isinstance(payload, dict) or payload.get("format_version") != version:
            raise ValueError(f"format_version {payload.get('format_version')!r}")
        raw = payload.get("identity")
        identity = None if raw is None else stored_identity(json.loads(raw).items())
        return Checkpoint(
            epoch=int(payload["epoch"]),
            model_state=payload["model_state"],
            optimizer_state=payload["optimizer_state"],
            rng_by_rank=list(payload["rng_by_rank"]),
            best_val_acc=float(payload["best_val_acc"]),
            identity=identity,
        )
    except Exception as err:  # noqa: BLE001 -- torch.load of a damaged file raises any type
        # (RuntimeError, struct.error, UnpicklingError, EOFError, ...); all mean "unreadable".
        raise CheckpointError(f"{path}: not a readable checkpoint ({err})", str(path)) from err


def load_checkpoint(run_dir: str | os.PathLike[str]) -> Checkpoint | None:
    """The newest intact checkpoint of ``run_dir``, or ``None`` when there is none.

    A corrupt (or missing) ``checkpoint.pt`` next to an intact ``checkpoint.prev.pt`` is
    reported as a warning and the previous one is returned, with ``notice`` saying so.

    Raises:
        CheckpointError: Every checkpoint present is corrupt; the message names each file.
    """
    run_dir = Path(run_dir)
    newest, previous = run_dir / CHECKPOINT_NAME, run_dir / PREVIOUS_NAME
    problems = []
    for path in (newest, previous):
        if not path.exists():
            continue
        try:
            ckpt = _read(path)
        except CheckpointError as err:
            problems.append(str(err))
            continue
        if path == previous:
            why = problems[0] if problems else f"{newest} is missing"
            notice = f"{why}; resuming from the previous checkpoint (epoch {ckpt.epoch})"
            log.warning("%s", notice)
            return replace(ckpt, notice=notice)
        return ckpt
    if problems:
        raise CheckpointError(
            f"{'; '.join(problems)}; no intact checkpoint left: {_FRESH}", str(run_dir)
        )
    return None
