"""The link-prediction files of a partition store: each part's own positive and held-out links.

A store written with a ``LinkSplit`` (``write_partitions(..., links=split)``) holds the training
graph (held-out links removed) and, per part ``p``, the links whose *source* node ``p`` owns::

    part-<p>/link_train.npy     # [2, E_p] int64 train links (each undirected link once)
    part-<p>/link_val.npy       # [2, K_p] int64 validation links
    part-<p>/link_val_neg.npy   # [K_p, Q] int64 fixed negative destinations of each
    part-<p>/link_test.npy      # [2, K_p] int64 test links
    part-<p>/link_test_neg.npy  # [K_p, Q] int64

They are plain ``.npy`` files listed in the manifest with their checksums, like every other
file, so ``verify``, the load-time checksum and the run identity (``store.content``) cover
them. :func:`load_links` also checks their semantics: ids in ``[0, N)``, sources owned by the
part, one negative row per held-out link.

Shape legend: ``E_p`` train links of part ``p``, ``K_p`` held-out links, ``Q`` negatives.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gnnsys.datasets.link_split import LinkSplit, RelationLinkSplit
from gnnsys.errors import PartitionStoreError
from gnnsys.store.layout import NODE_TO_PART, shard_file
from gnnsys.store.reader import load_array, read_manifest
from gnnsys.types import ONE_RELATION

__all__ = [
    "LINK_DATA",
    "ShardLinks",
    "has_links",
    "link_edge_type",
    "links_of_part",
    "load_links",
    "load_relation_links",
]

LINK_DATA = ("link_train", "link_val", "link_val_neg", "link_test", "link_test_neg")
"""Per-part link arrays of a link-prediction store."""

_FIX = "re-create the store with `gnnsys train --task link` (or write_partitions(links=...))"


@dataclass(frozen=True, slots=True, eq=False)
class ShardLinks:
    """One part's links (sources owned by the part).

    Attributes:
        train_2E: ``[2, E_p]`` train links.
        val_2K: ``[2, K_p]`` validation links.
        val_neg_KQ: ``[K_p, Q]`` negatives of each validation link.
        test_2K: ``[2, K_p]`` test links.
        test_neg_KQ: ``[K_p, Q]`` negatives of each test link.
    """

    train_2E: np.ndarray
    val_2K: np.ndarray
    val_neg_KQ: np.ndarray
    test_2K: np.ndarray
    test_neg_KQ: np.ndarray

    def held_out(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        """``(links_2K, neg_KQ)`` of ``split`` (``val`` or ``test``)."""
        if split not in ("val", "test"):
            raise ValueError(f"split={split!r}; held-out links exist for 'val' and 'test'")
        pair: tuple[np.ndarray, np.ndarray] = (
            getattr(self, f"{split}_2K"),
            getattr(self, f"{split}_neg_KQ"),
        )
        return pair


def links_of_part(
    split: LinkSplit | RelationLinkSplit, part_N: np.ndarray, part: int
) -> dict[str, np.ndarray]:
    """The arrays of :data:`LINK_DATA` for ``part``: links whose source ``part`` owns."""

    def own(links_2K: np.ndarray) -> np.ndarray:
        return np.flatnonzero(part_N[links_2K[0]] == part)

    train, val, test = own(split.train_2E), own(split.val_2K), own(split.test_2K)
    return {
        "link_train": split.train_2E[:, train],
        "link_val": split.val_2K[:, val],
        "link_val_neg": split.val_neg_KQ[val],
        "link_test": split.test_2K[:, test],
        "link_test_neg": split.test_neg_KQ[test],
    }


def has_links(root: str | os.PathLike[str]) -> bool:
    """Whether the store at ``root`` was written with a link split (part 0 has its files)."""
    return _holds_links(read_manifest(root).files)


def _holds_links(files: Mapping[str, Any]) -> bool:
    """Whether a manifest's ``files`` list part 0's link arrays."""
    return all(shard_file(0, k) in files for k in LINK_DATA)


def load_links(root: str | os.PathLike[str], part: int, *, verify: bool = True) -> ShardLinks:
    """Part ``part``'s links, checksummed (as every store file) and checked.

    Raises:
        PartitionStoreError: The store has no link files, or they are corrupt or inconsistent.
    """
    root = Path(root)
    manifest = read_manifest(root)
    missing = [k for k in LINK_DATA if shard_file(part, k) not in manifest.files]
    if missing:
        raise PartitionStoreError(
            f"{root}: part {part} has no {', '.join(missing)}; the store was not written for "
            f"link prediction. {_FIX}",
            str(root),
        )
    return _load_part(root, manifest, part, verify, (0, manifest.num_nodes, manifest.num_nodes))


def load_relation_links(
    root: str | os.PathLike[str], part: int, *, verify: bool = True
) -> tuple[tuple[str, str, str], ShardLinks]:
    """A store's target relation and part ``part``'s links of it, for a store of either kind.

    Ids are type-local: sources of the relation's source type, destinations and negatives of
    its destination type. A homogeneous store's links are of its one relation
    (``ONE_RELATION``). Checksummed and checked as :func:`load_links` does.

    Raises:
        PartitionStoreError: The store holds no links, or they are corrupt or inconsistent.
    """
    from gnnsys.store.reader import read_store_manifest

    root = Path(root)
    manifest = read_store_manifest(root)
    edge_type = _link_edge_type(manifest)
    if edge_type is None:
        raise PartitionStoreError(
            f"{root}: the store holds no links; re-create it with `gnnsys train --task link "
            "--target-edge SRC__REL__DST`",
            str(root),
        )
    src, dst = manifest.node_type(edge_type[0]), manifest.node_type(edge_type[2])
    ids = (src.offset, src.num_nodes, dst.num_nodes)
    return edge_type, _load_part(root, manifest, part, verify, ids)


def link_edge_type(root: str | os.PathLike[str]) -> tuple[str, str, str] | None:
    """The relation a store's link split is of (either kind of store), or ``None`` without one."""
    from gnnsys.store.reader import read_store_manifest

    return _link_edge_type(read_store_manifest(Path(root)))


def _link_edge_type(manifest: Any) -> tuple[str, str, str] | None:
    """The relation a manifest's links are of (``None``: no links).

    A store whose manifest names no ``link_edge_type`` but holds link files is of one relation
    (a homogeneous store's manifest does not name it).
    """
    edge_type = manifest.link_edge_type
    if edge_type is None:
        return ONE_RELATION if _holds_links(manifest.files) else None
    return (edge_type[0], edge_type[1], edge_type[2])


def _load_part(
    root: Path, manifest: Any, part: int, verify: bool, ids: tuple[int, int, int]
) -> ShardLinks:
    """Part ``part``'s link arrays, checked when ``verify``.

    ``ids``: the sources' first global id (their slice of ``node_to_part``), the number of
    sources and the number of destinations (a homogeneous store: ``(0, N, N)``).
    """
    arrays = {
        k: load_array(root, manifest, shard_file(part, k), mmap=False, verify=verify)
        for k in LINK_DATA
    }
    if verify:
        offset, num_src, num_dst = ids
        part_N = load_array(root, manifest, NODE_TO_PART, verify=True)
        _check(root, part, arrays, part_N[offset : offset + num_src], num_src, num_dst)
    return ShardLinks(*(np.asarray(arrays[k], dtype=np.int64) for k in LINK_DATA))


def _check(
    root: Path,
    part: int,
    arrays: dict[str, np.ndarray],
    part_N: np.ndarray,
    num_src: int,
    num_dst: int,
) -> None:
    """Ids in range, sources owned by ``part``, one negative row per held-out link."""
    for key, arr in arrays.items():
        path = root / shard_file(part, key)
        wrong_shape = arr.ndim != 2 or (not key.endswith("_neg") and arr.shape[0] != 2)
        if arr.dtype != np.int64 or wrong_shape:
            raise PartitionStoreError(
                f"{path}: {arr.dtype} {arr.shape} is not a link array; {_FIX}"
            )
        for ids, bound in _bounds(key, arr, num_src, num_dst):
            if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= bound):
                raise PartitionStoreError(f"{path}: node ids outside [0, {bound}); {_FIX}")
        if not key.endswith("_neg") and arr.size and np.any(part_N[arr[0]] != part):
            raise PartitionStoreError(f"{path}: a link's source is not owned by part {part}")
    for split in ("val", "test"):
        if arrays[f"link_{split}_neg"].shape[0] != arrays[f"link_{split}"].shape[1]:
            path = root / shard_file(part, f"link_{split}_neg")
            raise PartitionStoreError(f"{path}: not one negative row per {split} link; {_FIX}")


def _bounds(key: str, arr: np.ndarray, num_src: int, num_dst: int) -> list[tuple[np.ndarray, int]]:
    """The id arrays of a link array and their bounds (negatives are destinations)."""
    if key.endswith("_neg"):
        return [(arr, num_dst)]
    return [(arr[0], num_src), (arr[1], num_dst)]
