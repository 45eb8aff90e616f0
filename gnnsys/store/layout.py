"""On-disk layout of a partition directory and its manifest schema (``FORMAT_VERSION`` 1).

::

    DIR/
    ├── manifest.json          # Manifest: sizes, strategy, provenance, and for every file
    │                          #   below its shape, dtype and sha256
    ├── node_to_part.npy       # [N] int32 owner part of every gid
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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gnnsys.errors import PartitionStoreError

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
NODE_TO_PART = "node_to_part.npy"

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

_MANIFEST_KEYS = frozenset(
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
_FILE_KEYS = frozenset({"shape", "dtype", "sha256"})
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

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable dict (the exact ``manifest.json`` content)."""
        out = {k: getattr(self, k) for k in sorted(_MANIFEST_KEYS)}
        out["files"] = {
            path: {"shape": list(e.shape), "dtype": e.dtype, "sha256": e.sha256}
            for path, e in sorted(self.files.items())
        }
        out["parts"] = [
            {"num_owned": p.num_owned, "num_edges": p.num_edges, "num_halo": p.num_halo}
            for p in self.parts
        ]
        return out

    @classmethod
    def from_json(cls, obj: Any, path: str) -> Manifest:
        """Validate and convert parsed ``manifest.json`` content.

        Raises:
            PartitionStoreError: Unknown ``format_version``, missing or unknown keys, or
                fields of the wrong type; the message names ``path`` and the fix.
        """
        fix = "re-create the directory with `gnnsys partition`"
        if not isinstance(obj, dict):
            raise PartitionStoreError(f"{path}: manifest is not a JSON object; {fix}", path)
        version = obj.get("format_version")
        if version != FORMAT_VERSION:
            raise PartitionStoreError(
                f"{path}: unknown format_version {version!r} (this gnnsys reads "
                f"{FORMAT_VERSION}); {fix} using this gnnsys version",
                path,
            )
        _check_keys(obj, _MANIFEST_KEYS, "manifest", path)
        try:
            files = {}
            for rel, entry in obj["files"].items():
                _check_keys(entry, _FILE_KEYS, f"files[{rel!r}]", path)
                files[rel] = FileEntry(
                    tuple(int(d) for d in entry["shape"]), str(entry["dtype"]), str(entry["sha256"])
                )
            parts = []
            for i, entry in enumerate(obj["parts"]):
                _check_keys(entry, _PART_KEYS, f"parts[{i}]", path)
                parts.append(PartEntry(**{k: int(entry[k]) for k in _PART_KEYS}))
            scalars = {k: obj[k] for k in _MANIFEST_KEYS - {"files", "parts"}}
            for key in ("num_nodes", "num_edges", "num_parts", "num_hops", "seed"):
                scalars[key] = int(scalars[key])
            manifest = cls(**scalars, files=files, parts=tuple(parts))
        except (TypeError, ValueError, AttributeError) as err:
            raise PartitionStoreError(
                f"{path}: malformed manifest field ({err}); {fix}", path
            ) from err
        if len(manifest.parts) != manifest.num_parts or manifest.num_parts < 1:
            raise PartitionStoreError(
                f"{path}: num_parts={manifest.num_parts} but {len(manifest.parts)} part "
                f"entries; {fix}",
                path,
            )
        return manifest


def _check_keys(obj: Any, expected: frozenset[str], what: str, path: str) -> None:
    if not isinstance(obj, dict):
        raise PartitionStoreError(f"{path}: {what} is not a JSON object; re-create it", path)
    missing, unknown = expected - obj.keys(), obj.keys() - expected
    if missing or unknown:
        raise PartitionStoreError(
            f"{path}: {what} has missing keys {sorted(missing)} and unknown keys "
            f"{sorted(unknown)}; it was written by another format or edited by hand. "
            "Re-create the directory with `gnnsys partition`",
            path,
        )
