"""On-disk layout of a partition directory and its manifest schema (``FORMAT_VERSION`` 2).

::

    DIR/
    ├── manifest.json          # Manifest: sizes, strategy, provenance, num_classes, for every
    │                          #   file below its shape, dtype, sha256 and xxh3_128, and the
    │                          #   manifest's own checksum (sha256 of its canonical JSON)
    ├── node_to_part.npy       # [N] int32 owner part of every gid
    ├── node_lid.npy           # [N] int64 lid of every gid inside its owner (optional: a
    │                          #   store written before 0.1.0 lacks it; the reader derives it)
    └── part-<p>/              # one folder per part p in [0, P)
        ├── owned_gid.npy      # [M] int64 owned gids, ascending (lid = position)
        ├── indptr.npy         # [M + 1] int64 CSR over the owned nodes' in-edges
        ├── indices_gid.npy    # [E_p] int64 source gid of each in-edge, global CSR order
        ├── indices_local.npy  # [E_p] int64 source lid (owned) or M + halo position (halo)
        ├── e_id.npy           # [E_p] int64 global edge id (position in the global CSR)
        ├── halo_gid.npy       # [H] int64 k-hop in-neighbors owned elsewhere, ascending
        ├── halo_part.npy      # [H] int32 owner of each halo node
        └── x.npy y.npy train_mask.npy val_mask.npy test_mask.npy   # owned rows, if present

Every array is a plain ``.npy`` (read with ``np.load(mmap_mode="r", allow_pickle=False)``);
nothing is pickled. A reader rejects a manifest whose ``format_version`` or keys it does not
know, so a future format can never be misread silently.

Version 2 adds, per file, ``xxh3`` (xxh3_128 of the whole file, ~10x faster than sha256, checked
by every load), ``num_classes`` (labels are checked against it on load) and ``checksum``, the
sha256 of the manifest's canonical JSON without that key, so a hand-edited or bit-flipped
manifest is refused. Version 1 directories still load: their files are checked with sha256.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from gnnsys.errors import PartitionStoreError

FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
"""Versions this reader accepts; version 1 lacks per-file xxh3, num_classes and checksum."""
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

_MANIFEST_KEYS_V1 = frozenset(
    {
        "format_version",
        "dataset",
        "fingerprint",
        "num_nodes",
        "num_edges",
        "num_parts",
        "num_hops",
        "strategy",
        "params",
        "seed",
        "gnnsys_version",
        "files",
        "parts",
    }
)
_MANIFEST_KEYS = _MANIFEST_KEYS_V1 | {"num_classes", "checksum"}
_FILE_KEYS_V1 = frozenset({"shape", "dtype", "sha256"})
_FILE_KEYS = _FILE_KEYS_V1 | {"xxh3"}
_FIX = "re-create the directory with `gnnsys partition`"
_PART_KEYS = frozenset({"num_owned", "num_edges", "num_halo"})


def part_dir(part: int) -> str:
    """Folder name of part ``part`` relative to the partition directory."""
    return f"part-{part}"


def shard_file(part: int, name: str) -> str:
    """Relative path of array ``name`` of part ``part``, e.g. ``part-0/indptr.npy``."""
    return f"{part_dir(part)}/{name}.npy"


@dataclass(frozen=True, slots=True)
class FileEntry:
    """Manifest entry of one ``.npy`` file."""

    shape: tuple[int, ...]
    dtype: str
    """``numpy.dtype.str``, e.g. ``<i8``."""
    sha256: str
    xxh3: str | None = None
    """xxh3_128 hex digest of the whole file (``None`` in a format-1 manifest)."""


@dataclass(frozen=True, slots=True)
class PartEntry:
    """Manifest summary of one part."""

    num_owned: int
    num_edges: int
    num_halo: int


@dataclass(frozen=True, slots=True)
class Manifest:
    """Contents of ``manifest.json``: what was partitioned, how, and every file's checksum."""

    format_version: int
    dataset: str
    fingerprint: str
    """sha256 prefix of the graph's CSR: ties a store to the exact graph it came from."""
    num_nodes: int
    num_edges: int
    num_parts: int
    num_hops: int
    strategy: str
    params: dict[str, Any]
    seed: int
    gnnsys_version: str
    files: dict[str, FileEntry] = field(default_factory=dict)
    """Relative path -> entry, for every file except ``manifest.json`` itself."""
    parts: tuple[PartEntry, ...] = ()
    num_classes: int | None = None
    """Classes of ``y`` (0 without labels); ``None`` in a format-1 manifest (not checked)."""

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable dict (the exact ``manifest.json`` content, format 2)."""
        keys = _MANIFEST_KEYS_V1 | {"num_classes"}
        out: dict[str, Any] = {k: getattr(self, k) for k in sorted(keys)}
        out["format_version"] = FORMAT_VERSION
        out["num_classes"] = 0 if self.num_classes is None else self.num_classes
        out["files"] = {
            path: {"shape": list(e.shape), "dtype": e.dtype, "sha256": e.sha256, "xxh3": e.xxh3}
            for path, e in sorted(self.files.items())
        }
        out["parts"] = [
            {"num_owned": p.num_owned, "num_edges": p.num_edges, "num_halo": p.num_halo}
            for p in self.parts
        ]
        out["checksum"] = manifest_checksum(out)
        return out

    @classmethod
    def from_json(cls, obj: Any, path: str) -> Manifest:
        """Validate and convert parsed ``manifest.json`` content.

        Raises:
            PartitionStoreError: Unknown ``format_version``, missing or unknown keys, fields
                of the wrong type or a wrong manifest checksum; the message names ``path``
                and the fix.
        """
        if not isinstance(obj, dict):
            raise PartitionStoreError(f"{path}: manifest is not a JSON object; {_FIX}", path)
        if obj.get("format") == "gnnsys-hetero":
            raise PartitionStoreError(
                f"{path}: a heterogeneous partition directory; read it with "
                "gnnsys.store.read_hetero_shard (or assemble_hetero)",
                path,
            )
        version = obj.get("format_version")
        if version not in READABLE_VERSIONS or isinstance(version, bool):
            raise PartitionStoreError(
                f"{path}: unknown format_version {version!r} (this gnnsys reads "
                f"{', '.join(map(str, READABLE_VERSIONS))}); {_FIX} using this gnnsys version",
                path,
            )
        v1 = version == 1
        _check_keys(obj, _MANIFEST_KEYS_V1 if v1 else _MANIFEST_KEYS, "manifest", path)
        if not v1 and obj["checksum"] != manifest_checksum(obj):
            raise PartitionStoreError(
                f"{path}: manifest checksum mismatch; the manifest was edited or corrupted "
                f"after it was written. {_FIX}",
                path,
            )
        try:
            manifest = _parse(cls, obj, v1, path)
        except (TypeError, ValueError, AttributeError, KeyError) as err:
            raise PartitionStoreError(
                f"{path}: malformed manifest field ({err}); {_FIX}", path
            ) from err
        if len(manifest.parts) != manifest.num_parts or manifest.num_parts < 1:
            raise PartitionStoreError(
                f"{path}: num_parts={manifest.num_parts} but {len(manifest.parts)} part "
                f"entries; {_FIX}",
                path,
            )
        owned, edges = (
            sum(getattr(p, k) for p in manifest.parts) for k in ("num_owned", "num_edges")
        )
        if (owned, edges) != (manifest.num_nodes, manifest.num_edges):
            raise PartitionStoreError(
                f"{path}: parts own {owned} nodes and {edges} in-edges but the manifest has "
                f"num_nodes={manifest.num_nodes}, num_edges={manifest.num_edges}; {_FIX}",
                path,
            )
        return manifest


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


def _parse(cls: type[Manifest], obj: dict[str, Any], v1: bool, path: str) -> Manifest:
    files = {}
    if not isinstance(obj["files"], dict) or not isinstance(obj["parts"], list):
        raise TypeError("files must be an object and parts a list")
    for rel, entry in obj["files"].items():
        _check_keys(entry, _FILE_KEYS_V1 if v1 else _FILE_KEYS, f"files[{rel!r}]", path)
        if not isinstance(entry["shape"], list) or not all(
            isinstance(s, str) for s in (entry["dtype"], entry["sha256"], entry.get("xxh3", ""))
        ):
            raise TypeError(f"files[{rel!r}] has a shape that is not a list or a non-string")
        shape = tuple(_strict_int(d, f"files[{rel!r}].shape") for d in entry["shape"])
        files[rel] = FileEntry(shape, entry["dtype"], entry["sha256"], entry.get("xxh3"))
    parts = []
    for i, entry in enumerate(obj["parts"]):
        _check_keys(entry, _PART_KEYS, f"parts[{i}]", path)
        parts.append(PartEntry(**{k: _strict_int(entry[k], f"parts[{i}].{k}") for k in _PART_KEYS}))
    scalars = {k: obj[k] for k in _MANIFEST_KEYS_V1 - {"files", "parts"}}
    for key in ("num_nodes", "num_edges", "num_parts", "num_hops", "seed"):
        scalars[key] = _strict_int(scalars[key], key)
    for key in ("dataset", "fingerprint", "strategy", "gnnsys_version"):
        if not isinstance(scalars[key], str):
            raise TypeError(f"{key} is {scalars[key]!r}, expected a string")
    if not isinstance(scalars["params"], dict):
        raise TypeError(f"params is {scalars['params']!r}, expected an object")
    num_classes = None if v1 else _strict_int(obj["num_classes"], "num_classes")
    return cls(**scalars, files=files, parts=tuple(parts), num_classes=num_classes)


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
