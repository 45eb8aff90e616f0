"""On-disk layout of a partition directory (``FORMAT_VERSION`` 3): names, paths, checksums.

One format for every graph: a homogeneous graph is one node type and one relation.

::

    DIR/
    ├── manifest.json          # kind, sizes, strategy, provenance, num_classes, node types and
    │                          #   relations, per-part counts, for every file below its shape,
    │                          #   dtype, sha256 and xxh3_128, and the manifest's own checksum
    ├── node_to_part.npy       # [N] int32 owner part of every gid
    ├── node_lid.npy           # [N] int64 lid of every gid inside its owner (homogeneous
    │                          #   stores; optional: the reader derives it when absent)
    └── part-<p>/              # one folder per part p in [0, P)
        ├── nodes/<type>/      # a homogeneous store's one type is ``node``
        │   ├── owned_lid.npy  # [M] int64 owned ids, ascending (lid = position)
        │   ├── halo_lid.npy   # [H] int64 k-hop in-neighbors owned elsewhere, ascending
        │   ├── halo_part.npy  # [H] int32 owner of each halo node
        │   └── x.npy y.npy train_mask.npy val_mask.npy test_mask.npy   # owned rows, if present
        ├── rels/<src>__<rel>__<dst>/   # a homogeneous store's one relation is node__to__node
        │   ├── indptr.npy        # [M_dst + 1] int64 CSR over the owned nodes' in-edges
        │   ├── indices_lid.npy   # [E_p] int64 source id of each in-edge, in CSR order
        │   ├── indices_local.npy # [E_p] int64 source lid (owned) or M + halo position (halo)
        │   └── e_id.npy          # [E_p] int64 edge id (position in the relation's CSR)
        └── link_*.npy         # a link store's links of the part (``gnnsys.store.links``)

Ids are a type's own (type-local); in a homogeneous store the one type starts at 0, so its ids
are the gids. The homogeneous code names the arrays as ``PartitionShard`` does (``owned_gid``,
``indices_gid``, ...); :func:`shard_file` maps those names into the layout above. The manifest's
``"kind"`` (``homogeneous`` or ``typed``) says which runtime a store is for; every reader of a
typed store also reads a homogeneous one as its one type (``gnnsys.store.reader``).

Every array is a plain ``.npy`` (read with ``np.load(mmap_mode="r", allow_pickle=False)``);
nothing is pickled. Every file carries an ``xxh3`` (xxh3_128 of the whole file, checked by
every load) and a sha256 (checked by ``verify``); the manifest's ``checksum`` is the sha256 of
its canonical JSON without that key, so a hand-edited or bit-flipped manifest is refused. A
reader refuses a manifest whose format, version or keys it does not know, naming the fix:
directories of earlier formats (homogeneous 1 and 2, heterogeneous ``gnnsys-hetero`` 1) are
re-created with ``gnnsys partition``. The manifest's record, ``StoreManifest``, and its one-type
view ``Manifest`` live in ``gnnsys.store.manifest``, which reads this module (never the other way).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from gnnsys.errors import PartitionStoreError
from gnnsys.types import ONE_RELATION, ONE_TYPE

FORMAT = "gnnsys"
"""The manifest's ``"format"``."""
FORMAT_VERSION = 3
"""The one version this reader accepts (both kinds)."""
KINDS = ("homogeneous", "typed")
"""The manifest's ``"kind"``: which runtime the store is for."""
MANIFEST = "manifest.json"
NODE_TO_PART = "node_to_part.npy"
NODE_LID = "node_lid.npy"
"""The partition book's ``lid_N``, so every process maps one copy instead of deriving its own
(a stable sort of ``N`` ids: ~40 bytes per node at its peak, 12 per node kept, in each trainer
and owner). Optional: a store without it derives ``lid_N`` from ``node_to_part.npy``."""

SHARD_ARRAYS = (
    "owned_gid",
    "indptr",
    "indices_gid",
    "indices_local",
    "e_id",
    "halo_gid",
    "halo_part",
)
"""Arrays every shard folder holds."""

SHARD_DATA = ("x", "y", "train_mask", "val_mask", "test_mask")
"""Per-node arrays a shard holds when the graph has them (owned rows only)."""

_FIX = "re-create the directory with `gnnsys partition`"
SHARED_FIELDS = (
    "dataset",
    "fingerprint",
    "num_parts",
    "num_hops",
    "strategy",
    "params",
    "seed",
    "gnnsys_version",
)
"""The plain fields of a manifest, the same in a homogeneous ``Manifest`` and the one schema's
record (``gnnsys.store.manifest.StoreManifest``)."""

_TYPE_NAMES = {
    "owned_gid": "owned_lid",
    "halo_gid": "halo_lid",
    "halo_part": "halo_part",
    **{k: k for k in SHARD_DATA},
}
_RELATION_NAMES = {
    "indptr": "indptr",
    "indices_gid": "indices_lid",
    "indices_local": "indices_local",
    "e_id": "e_id",
}


def part_dir(part: int) -> str:
    """Folder name of part ``part`` relative to the partition directory."""
    return f"part-{part}"


def type_file(part: int, node_type: str, name: str) -> str:
    """Relative path of a node type's array, e.g. ``part-0/nodes/paper/x.npy``."""
    return f"{part_dir(part)}/nodes/{node_type}/{name}.npy"


def rel_file(part: int, edge_type: tuple[str, str, str], name: str) -> str:
    """Relative path of a relation's array, e.g. ``part-0/rels/paper__cites__paper/e_id.npy``."""
    return f"{part_dir(part)}/rels/{'__'.join(edge_type)}/{name}.npy"


def shard_file(part: int, name: str) -> str:
    """Relative path of a homogeneous shard's array ``name`` (a ``PartitionShard`` field name).

    The one type's and the one relation's arrays map into the layout's ``nodes/node/`` and
    ``rels/node__to__node/`` folders (``owned_gid`` is ``owned_lid.npy``, ``indices_gid`` is
    ``indices_lid.npy``, ...); any other name (the link arrays) is ``part-<p>/<name>.npy``.
    """
    if name in _TYPE_NAMES:
        return type_file(part, ONE_TYPE, _TYPE_NAMES[name])
    if name in _RELATION_NAMES:
        return rel_file(part, ONE_RELATION, _RELATION_NAMES[name])
    return f"{part_dir(part)}/{name}.npy"


@dataclass(frozen=True, slots=True)
class FileEntry:
    """Manifest entry of one ``.npy`` file."""

    shape: tuple[int, ...]
    dtype: str
    """``numpy.dtype.str``, e.g. ``<i8``."""
    sha256: str
    xxh3: str | None = None
    """xxh3_128 hex digest of the whole file (every format-3 manifest has one)."""


def manifest_checksum(obj: dict[str, Any]) -> str:
    """sha256 of ``obj`` without its ``checksum`` key, as sorted, compact JSON."""
    body = {k: v for k, v in obj.items() if k != "checksum"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _strict_int(value: Any, what: str) -> int:
    """``value`` as an int; refuses bools, floats and strings (``int("3")`` would pass)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} is {value!r}, expected an integer")
    return value


def _check_keys(obj: Any, expected: frozenset[str], what: str, path: str) -> None:
    if not isinstance(obj, dict):
        raise PartitionStoreError(f"{path}: {what} is not a JSON object; {_FIX}", path)
    missing, unknown = expected - obj.keys(), obj.keys() - expected
    if missing or unknown:
        raise PartitionStoreError(
            f"{path}: {what} has missing keys {sorted(missing)} and unknown keys "
            f"{sorted(unknown)}; it was written by another format or edited by hand. "
            "Re-create the directory with `gnnsys partition`",
            path,
        )
