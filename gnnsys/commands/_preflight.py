"""Pre-flight of ``gnnsys train``: every check that can fail, before Ray or a write.

Order: numbers (NaN, inf, negatives, ratios), the run directory, the data (a given or reused
store is loaded and verified in full; a dataset's files are read), then the run's identity
against the checkpoint it would resume. Every failure is one ``ValueError`` (or a subclass:
``PartitionStoreError`` is not one, so it is passed through as is) naming the flag or file, the
value and the fix. Only when everything passed is ``RUN_DIR/run.json`` written.

The checks the store and checkpoint make here are the same the driver makes again later; the
store's per-process caches (``gnnsys.store.integrity``) make the second pass free.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("gnnsys.commands.train")

_POSITIVE_INT = ("parts", "hidden", "batch_size", "epochs", "num_nodes", "threads")
_NON_NEGATIVE_INT = ("max_restarts", "seed")  # --prefetch: Trainer.Config checks it
_POSITIVE_FLOAT = ("lr", "deadline", "heartbeat_timeout", "startup_deadline")
_ALIASES = {
    "epochs": "loop.epochs",
    "lr": "trainer.lr",
    "batch-size": "trainer.batch_size",
    "batch_size": "trainer.batch_size",
    "fanouts": "sampler.fanouts",
    "seed": "trainer.seed",
    "codec": "codec.name",
    "dropout": "model.dropout",
    "weight-decay": "trainer.weight_decay",
    "weight_decay": "trainer.weight_decay",
    "batch-schedule": "trainer.schedule",
}
"""Short names ``--allow-change`` accepts for common fields."""


@dataclass(frozen=True, slots=True)
class Preflight:
    """What the pre-flight found.

    The run directory, lines to show the user, and the fields ``--allow-change`` lets differ
    on resume (passed on to ``train(allow_change=)``, which checks them again).
    """

    out: Path
    notices: tuple[str, ...] = ()
    allowed: frozenset[str] = frozenset()


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def check_numbers(args: argparse.Namespace) -> None:
    """Refuse NaN, inf, zero or negative values of every numeric flag that was given.

    Raises:
        ValueError: Naming the flag, the value and the allowed range.
    """
    for name in _POSITIVE_INT:
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise ValueError(f"{_flag(name)} {value}: must be an integer >= 1")
    for name in _NON_NEGATIVE_INT:
        value = getattr(args, name, None)
        if value is not None and value < 0:
            raise ValueError(f"{_flag(name)} {value}: must be an integer >= 0")
    for name in _POSITIVE_FLOAT:
        value = getattr(args, name, None)
        if value is not None and not (math.isfinite(value) and value > 0):
            raise ValueError(f"{_flag(name)} {value}: must be a finite number > 0, e.g. 0.01")
    # --cache-ratio / --cache-mb are validated once, by gnnsys.cache.CacheConfig.


def check_cache(args: argparse.Namespace, config: Any) -> list[str]:
    """Refuse a cache budget without a cache policy; explain a ratio above 1.

    Returns:
        Notices to show (e.g. what ``--cache-ratio 2`` means).

    Raises:
        ValueError: A budget was given but the policy is ``none`` (it would have no effect).
    """
    given = args.cache_ratio is not None or args.cache_mb is not None
    if given and config.cache.policy == "none":
        flag = "--cache-mb" if args.cache_mb is not None else "--cache-ratio"
        raise ValueError(
            f"{flag} has no effect with --cache-policy none; add --cache-policy degree, "
            "presample or adaptive"
        )
    ratio = config.cache.ratio
    if config.cache.mb is None and ratio > 1:
        return [
            f"--cache-ratio {ratio:g} > 1: the cache may hold {ratio:g}x the bytes of the "
            "worker's own features (useful when the halo is larger than the part); rows beyond "
            "the halo are never cached"
        ]
    return []


def check_out(out: Path) -> None:
    """``out`` must be a writable directory, or creatable in a writable existing parent.

    Tries it (a temporary entry, removed at once) rather than trusting ``os.access``, which
    says yes to root even on a read-only file system.

    Raises:
        ValueError: ``out`` is a file, or it (or its nearest existing parent) is not writable.
    """
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out}: is a file, not a directory; pass a directory path")
    probe = out
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise ValueError(f"--out {out}: {probe} is a file, so the directory cannot be created")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".gnnsys-probe-", dir=probe))
    except OSError as err:
        what = "is not writable" if probe == out else f"cannot be created in {probe}"
        raise ValueError(
            f"--out {out}: {what} ({err.strerror}); choose a directory you can write to"
        ) from err


def check_store(path: Path, parts: int, *, link: bool = False) -> Any:
    """Load and verify every shard of ``path``; it must have ``parts`` parts, x, y, train_mask.

    A link-prediction run (``link``) needs x and every part's link files instead of y and
    train_mask. A heterogeneous store is verified in full (``verify``).

    Returns:
        The store's ``Manifest``.

    Raises:
        PartitionStoreError: The store is missing, corrupt or inconsistent.
        ValueError: Another part count, or a part without features, labels or train mask.
    """
    from gnnsys.store import is_hetero_store, load_partition, read_manifest, verify
    from gnnsys.store.layout import shard_file

    if is_hetero_store(path):  # every checksum; its links are checked against the task later
        return _part_count(path, verify(path), parts)
    manifest = _part_count(path, read_manifest(path), parts)
    from gnnsys.store.links import LINK_DATA, load_links

    need = ("x", *LINK_DATA) if link else ("x", "y", "train_mask")
    for part in range(manifest.num_parts):
        missing = [k for k in need if shard_file(part, k) not in manifest.files]
        if missing:
            what = (
                "features and a link split (--task link without --store writes one)"
                if link
                else "features, labels and a train mask: partition a dataset that has them"
            )
            raise ValueError(
                f"store {path}: part {part} has no {', '.join(missing)}; training needs {what}"
            )
    load_partition(path)  # every checksum, semantic and cross-shard check, before Ray starts
    for part in range(manifest.num_parts) if link else ():
        load_links(path, part)
    return manifest


def _part_count(path: Path, manifest: Any, parts: int) -> Any:
    """``manifest`` of the store at ``path``, which must have ``parts`` parts."""
    if manifest.num_parts != parts:
        raise ValueError(
            f"store {path} has {manifest.num_parts} parts but --parts={parts}; pass --parts "
            f"{manifest.num_parts} or re-partition"
        )
    return manifest


def probe_dataset(data: Any) -> None:
    """Read the dataset's files now (a corrupt file fails here, not after Ray started).

    Synthetic graphs have no files (their parameters are checked against the generator's
    signature); ``ogb`` files are large, so only their folder is checked.

    Raises:
        ValueError: Unknown dataset; ``DatasetFileError`` for unreadable files.
        DatasetNotFoundError: Files are missing.
    """
    from gnnsys.datasets import DATASETS, is_heterogeneous, load
    from gnnsys.datasets.base import find_dir

    if is_heterogeneous(data.dataset, data.root):  # decided from its files: found and typed
        return
    family, _, variant = data.dataset.partition(":")
    if family not in DATASETS or not variant:
        load(data.dataset)  # raises the registry's own message
    if family == "ogb":
        find_dir(data.root, variant.replace("-", "_"), data.dataset)
    elif family == "synthetic":  # nothing to read; generating can take a while, so bind only
        import inspect

        from gnnsys.datasets.synthetic import GENERATORS

        if variant not in GENERATORS:
            load(data.dataset)  # raises the family's own message
        try:
            inspect.signature(GENERATORS[variant]).bind(**dict(data.dataset_params))
        except TypeError as err:
            raise ValueError(f"dataset {data.dataset!r}: {err}; see `gnnsys datasets`") from err
    else:
        load(data.dataset, root=data.root, **dict(data.dataset_params))


def parse_allowed(text: str | None, fields: set[str]) -> frozenset[str]:
    """``--allow-change`` as dotted field names (short aliases resolved).

    Raises:
        ValueError: A name that is not a field of the run's identity.
    """
    if not text:
        return frozenset()
    out = set()
    for raw in text.split(","):
        name = _ALIASES.get(raw.strip(), raw.strip())
        if name not in fields:
            raise ValueError(
                f"--allow-change {raw.strip()!r}: not a field of this run; use dotted names "
                f"such as trainer.lr, loop.epochs, sampler.fanouts (or {sorted(_ALIASES)})"
            )
        out.add(name)
    return frozenset(out)


def run_preflight(args: argparse.Namespace, config: Any, out: Path) -> Preflight:
    """Every check of ``gnnsys train`` in order, then ``RUN_DIR/run.json``.

    Raises:
        ValueError: The first problem found (see the module docstring).
        PartitionStoreError: A corrupt store.
    """
    from gnnsys.train.control.checkpoint import (
        check_resume,
        identity_of,
        store_identity,
        write_identity,
    )

    notices = check_cache(args, config)
    check_out(out)
    data, parts = config.data, config.cluster.parts
    manifest = None
    link = config.link is not None
    if data.store is not None:
        manifest = check_store(Path(data.store), parts, link=link)
    elif config.loop.resume and (out / "store" / "manifest.json").exists():
        manifest = _check_reused(out / "store", data.dataset, parts, link)
    if manifest is None:
        probe_dataset(data)
    identity = identity_of(config.to_json(), {} if manifest is None else store_identity(manifest))
    allowed = parse_allowed(getattr(args, "allow_change", None), set(identity.as_dict()))
    if config.loop.resume:
        notices += check_resume(out, identity, allowed)
    write_identity(out, identity)
    return Preflight(out=out, notices=tuple(notices), allowed=allowed)


def _check_reused(store: Path, dataset: str, parts: int, link: bool = False) -> Any:
    """The run directory's own store, which ``--resume`` reuses when its part count matches."""
    from gnnsys.store import read_store_manifest

    manifest = read_store_manifest(store)
    if manifest.num_parts != parts:
        return None  # prepare_store writes a new one; the identity check then compares data.*
    if manifest.dataset != dataset:
        raise ValueError(
            f"--resume: {store} holds {manifest.dataset!r} but this run asks for {dataset!r}; "
            f"resume with dataset {manifest.dataset!r}, or start a new --out directory"
        )
    return check_store(store, parts, link=link)
