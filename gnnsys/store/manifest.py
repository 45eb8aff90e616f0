"""The one manifest of every partition directory (``StoreManifest``) and its one-type view.

``gnnsys.store.layout`` has the format's names and paths; a homogeneous store is the one-type
case: ``StoreManifest`` of kind ``homogeneous`` with type ``node`` and relation
``node__to__node``, which ``Manifest`` (``num_nodes``, ``num_edges``, ``PartEntry`` counts) views
as plain fields for the homogeneous writer and readers.

::

    DIR/
    ├── manifest.json                 # StoreManifest: types, relations, widths, counts, every
    │                                 #   file's shape/dtype/sha256/xxh3, its own checksum
    ├── node_to_part.npy              # [G] int32 owner of every global id (offset[t] + lid)
    └── part-<p>/
        ├── nodes/<type>/
        │   ├── owned_lid.npy         # [M_t] int64 owned type-local ids, ascending
        │   ├── halo_lid.npy          # [H_t] int64 k-hop halo nodes of this type, ascending
        │   ├── halo_part.npy         # [H_t] int32 their owners
        │   └── x.npy y.npy train_mask.npy ... attr-<name>.npy   # owned rows, when present
        └── rels/<src>__<rel>__<dst>/
            ├── indptr.npy            # [M_dst + 1] int64 CSR over the owned dst nodes
            ├── indices_lid.npy       # [E_p] int64 type-local src id of each in-edge
            ├── indices_local.npy     # [E_p] int64 src position in owned_lid[src] (< M_src) or
            │                         #   M_src + position in halo_lid[src] (a halo source)
            └── e_id.npy              # [E_p] int64 edge id: position in the relation's CSR

The halo of a part is, per type, every node within ``num_hops`` in-edge hops of its owned nodes
over all relations that another part owns (``halo_part`` names the owner), so every source of
every stored edge is owned or in its type's halo. Each array is checked as in the homogeneous
store (``gnnsys.store.layout``): xxh3_128 on every load, sha256 by ``verify``, the manifest's
own sha256; nothing is pickled. The manifest's ``"kind"`` tells the two kinds apart: the
homogeneous reader refuses a typed store, naming the typed one; the typed readers read a
homogeneous store as its one type ``node`` and relation ``node__to__node``.

Shape legend: ``G`` nodes of all types, ``M_t`` owned nodes of type ``t``, ``H_t`` halo nodes,
``E_p`` a part's in-edges of one relation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from gnnsys.errors import PartitionStoreError
from gnnsys.store.layout import (
    FORMAT,
    FORMAT_VERSION,
    KINDS,
    SHARD_DATA,
    SHARED_FIELDS,
    FileEntry,
    _check_keys,
    _strict_int,
    manifest_checksum,
    rel_file,
    shard_file,
    type_file,
)
from gnnsys.types import ONE_RELATION, ONE_TYPE, EdgeType

__all__ = [
    "REL_ARRAYS",
    "TYPE_ARRAYS",
    "Manifest",
    "PartCounts",
    "PartEntry",
    "StoreManifest",
    "RelationEntry",
    "TypeEntry",
    "check_name",
    "rel_file",
    "type_file",
]
TYPE_ARRAYS = ("owned_lid", "halo_lid", "halo_part")
"""Arrays every node-type folder of a shard holds."""
REL_ARRAYS = ("indptr", "indices_lid", "indices_local", "e_id")
"""Arrays every relation folder of a shard holds."""
_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_FIX = "re-create the directory with `gnnsys partition`"


def check_name(name: str, what: str) -> None:
    """Raise ``ValueError`` unless ``name`` can be a folder name (and part of ``a__b__c``)."""
    if not _NAME.fullmatch(name) or "__" in name:
        raise ValueError(
            f"{what} {name!r} cannot name a store folder; use letters, digits, '_', '.', '-' "
            "without '__'"
        )


@dataclass(frozen=True, slots=True)
class TypeEntry:
    """Manifest entry of one node type: its size, global offset and per-node arrays."""

    name: str
    num_nodes: int
    offset: int
    data: dict[str, tuple[str, tuple[int, ...]]]
    """Array name (``x``, ``y``, masks, ``attr-<name>``) -> (dtype, per-row shape), e.g.
    ``("<f4", (128,))`` for 128-wide float32 features; every part stores each listed array."""


@dataclass(frozen=True, slots=True)
class RelationEntry:
    """Manifest entry of one relation."""

    edge_type: EdgeType
    num_edges: int
    indices_dtype: str
    """dtype of the original ``Relation.indices`` (restored when the graph is assembled)."""


@dataclass(frozen=True, slots=True)
class PartCounts:
    """Per-part counts: owned and halo nodes per type, in-edges per relation."""

    num_owned: dict[str, int]
    num_halo: dict[str, int]
    num_edges: dict[str, int]
    """Keyed by ``"src__rel__dst"``."""


@dataclass(frozen=True, slots=True)
class StoreManifest:
    """Contents of a store's ``manifest.json``, of either kind (the one schema).

    A homogeneous store's is one type ``node`` and one relation ``node__to__node``
    (``gnnsys.store.layout``); its typed readers read it as that one type.
    """

    dataset: str
    fingerprint: str
    num_parts: int
    num_hops: int
    strategy: str
    params: dict[str, Any]
    seed: int
    gnnsys_version: str
    num_classes: int
    node_types: tuple[TypeEntry, ...]
    relations: tuple[RelationEntry, ...]
    parts: tuple[PartCounts, ...]
    files: dict[str, FileEntry] = field(default_factory=dict)
    kind: str = "typed"
    """``"typed"`` (a heterogeneous graph's store) or ``"homogeneous"`` (one type)."""
    link_edge_type: EdgeType | None = None
    """The relation whose links the store holds per part (``part-<p>/link_*.npy``, sources
    owned by the part), or ``None``: written by ``write_partitions(links=...)``."""

    @property
    def num_nodes(self) -> int:
        """``G``, nodes of every type."""
        return sum(t.num_nodes for t in self.node_types)

    @property
    def num_edges(self) -> int:
        """Edges of every relation."""
        return sum(r.num_edges for r in self.relations)

    def node_type(self, name: str) -> TypeEntry:
        """The entry of type ``name``; ``KeyError`` if absent."""
        return next(t for t in self.node_types if t.name == name)

    def to_json(self) -> dict[str, Any]:
        """The exact ``manifest.json`` content, with its checksum."""
        out: dict[str, Any] = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "kind": self.kind,
            **{k: getattr(self, k) for k in _SCALARS},
            "node_types": [
                {
                    "name": t.name,
                    "num_nodes": t.num_nodes,
                    "offset": t.offset,
                    "data": {k: {"dtype": d, "row_shape": list(r)} for k, (d, r) in t.data.items()},
                }
                for t in self.node_types
            ],
            "relations": [
                {
                    "edge_type": list(r.edge_type),
                    "num_edges": r.num_edges,
                    "indices_dtype": r.indices_dtype,
                }
                for r in self.relations
            ],
            "parts": [
                {"num_owned": p.num_owned, "num_halo": p.num_halo, "num_edges": p.num_edges}
                for p in self.parts
            ],
            "files": {path: _file_json(e) for path, e in sorted(self.files.items())},
            **(
                {} if self.link_edge_type is None else {"link_edge_type": list(self.link_edge_type)}
            ),
        }
        out["checksum"] = manifest_checksum(out)
        return out

    @classmethod
    def from_json(cls, obj: Any, path: str) -> StoreManifest:
        """Validate and convert parsed ``manifest.json`` content.

        Raises:
            PartitionStoreError: Not a heterogeneous manifest, unknown version, missing or
                unknown keys, a wrong checksum or malformed fields; names ``path`` and the fix.
        """
        if not isinstance(obj, dict):
            raise PartitionStoreError(f"{path}: manifest is not a JSON object; {_FIX}", path)
        found = (obj.get("format"), obj.get("format_version"))
        if found != (FORMAT, FORMAT_VERSION):
            earlier = found[0] in (None, "gnnsys-hetero") or found[1] in (1, 2)
            what = "an earlier" if earlier else "an unknown"
            raise PartitionStoreError(
                f"{path}: written in {what} store format (format {found[0]!r}, version "
                f"{found[1]!r}); this gnnsys reads format {FORMAT!r} version {FORMAT_VERSION}. "
                f"{_FIX[0].upper() + _FIX[1:]} using this gnnsys version",
                path,
            )
        if obj.get("kind") not in KINDS:
            raise PartitionStoreError(
                f"{path}: kind {obj.get('kind')!r}, expected one of {list(KINDS)}; {_FIX}", path
            )
        _check_keys(
            {k: v for k, v in obj.items() if k != "link_edge_type"}, _KEYS, "manifest", path
        )
        if obj["checksum"] != manifest_checksum(obj):
            raise PartitionStoreError(
                f"{path}: manifest checksum mismatch; the manifest was edited or corrupted "
                f"after it was written. {_FIX}",
                path,
            )
        try:
            manifest = _parse(obj)
        except (TypeError, ValueError, AttributeError, KeyError) as err:
            raise PartitionStoreError(
                f"{path}: malformed manifest field ({err!r}); {_FIX}", path
            ) from err
        if len(manifest.parts) != manifest.num_parts or manifest.num_parts < 1:
            raise PartitionStoreError(
                f"{path}: num_parts={manifest.num_parts} but {len(manifest.parts)} part "
                f"entries; {_FIX}",
                path,
            )
        return manifest


_SCALARS = (*SHARED_FIELDS, "num_classes")
_KEYS = frozenset(
    {
        "format",
        "format_version",
        "kind",
        *_SCALARS,
        "node_types",
        "relations",
        "parts",
        "files",
        "checksum",
    }
)
"""Every key of a ``manifest.json`` (``link_edge_type`` is optional)."""


def _file_json(e: FileEntry) -> dict[str, Any]:
    return {"shape": list(e.shape), "dtype": e.dtype, "sha256": e.sha256, "xxh3": e.xxh3}


def _file_entry(obj: Any, what: str) -> FileEntry:
    if not isinstance(obj, dict) or set(obj) != {"shape", "dtype", "sha256", "xxh3"}:
        raise TypeError(f"{what} must have exactly shape, dtype, sha256, xxh3")
    if not isinstance(obj["shape"], list) or not all(
        isinstance(obj[k], str) for k in ("dtype", "sha256", "xxh3")
    ):
        raise TypeError(f"{what} has a shape that is not a list or a non-string digest")
    shape = tuple(_strict_int(d, f"{what}.shape") for d in obj["shape"])
    return FileEntry(shape, obj["dtype"], obj["sha256"], obj["xxh3"])


def _row_spec(obj: Any, what: str) -> tuple[str, tuple[int, ...]]:
    if not isinstance(obj, dict) or set(obj) != {"dtype", "row_shape"}:
        raise TypeError(f"{what} must have exactly dtype and row_shape")
    if not isinstance(obj["dtype"], str) or not isinstance(obj["row_shape"], list):
        raise TypeError(f"{what} has a non-string dtype or a row_shape that is not a list")
    return obj["dtype"], tuple(_strict_int(d, f"{what}.row_shape") for d in obj["row_shape"])


def _counts(obj: Any, what: str) -> dict[str, int]:
    if not isinstance(obj, dict):
        raise TypeError(f"{what} must be an object")
    return {str(k): _strict_int(v, f"{what}[{k!r}]") for k, v in obj.items()}


def _parse(obj: dict[str, Any]) -> StoreManifest:
    scalars = {k: obj[k] for k in _SCALARS}
    for key in ("num_parts", "num_hops", "seed", "num_classes"):
        scalars[key] = _strict_int(scalars[key], key)
    for key in ("dataset", "fingerprint", "strategy", "gnnsys_version"):
        if not isinstance(scalars[key], str):
            raise TypeError(f"{key} is {scalars[key]!r}, expected a string")
    if not isinstance(scalars["params"], dict):
        raise TypeError("params must be an object")
    types = tuple(
        TypeEntry(
            name=str(t["name"]),
            num_nodes=_strict_int(t["num_nodes"], "num_nodes"),
            offset=_strict_int(t["offset"], "offset"),
            data={str(k): _row_spec(e, f"data[{k!r}]") for k, e in t["data"].items()},
        )
        for t in obj["node_types"]
    )
    relations = tuple(
        RelationEntry(
            edge_type=(str(r["edge_type"][0]), str(r["edge_type"][1]), str(r["edge_type"][2])),
            num_edges=_strict_int(r["num_edges"], "num_edges"),
            indices_dtype=str(r["indices_dtype"]),
        )
        for r in obj["relations"]
    )
    parts = tuple(
        PartCounts(
            _counts(p["num_owned"], "num_owned"),
            _counts(p["num_halo"], "num_halo"),
            _counts(p["num_edges"], "num_edges"),
        )
        for p in obj["parts"]
    )
    files = {str(k): _file_entry(e, f"files[{k!r}]") for k, e in obj["files"].items()}
    link = obj.get("link_edge_type")
    if link is not None and not (isinstance(link, list) and len(link) == 3):
        raise TypeError(f"link_edge_type is {link!r}, expected [src, rel, dst]")
    return StoreManifest(
        **scalars, node_types=types, relations=relations, parts=parts, files=files,
        kind=str(obj["kind"]),
        link_edge_type=None if link is None else (str(link[0]), str(link[1]), str(link[2])),
    )  # fmt: skip


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
    """Classes of ``y`` (0 without labels; ``None``: not checked)."""

    def to_json(self) -> dict[str, Any]:
        """The exact ``manifest.json`` content: the one schema, kind ``homogeneous``."""
        out: dict[str, Any] = self.store_manifest().to_json()
        return out

    def store_manifest(self) -> Any:
        """This manifest as the one schema's record (a ``StoreManifest`` of one type)."""
        data = {}
        for key in SHARD_DATA:  # every part stores each listed array: part 0 names them
            entry = self.files.get(shard_file(0, key))
            if entry is not None:
                data[key] = (entry.dtype, tuple(entry.shape[1:]))
        rel = "__".join(ONE_RELATION)
        return StoreManifest(
            kind="homogeneous",
            **{k: getattr(self, k) for k in SHARED_FIELDS},
            num_classes=0 if self.num_classes is None else self.num_classes,
            node_types=(TypeEntry(ONE_TYPE, self.num_nodes, 0, data),),
            relations=(RelationEntry(ONE_RELATION, self.num_edges, "<i8"),),
            parts=tuple(
                PartCounts({ONE_TYPE: p.num_owned}, {ONE_TYPE: p.num_halo}, {rel: p.num_edges})
                for p in self.parts
            ),
            files=self.files,
        )

    @classmethod
    def from_json(cls, obj: Any, path: str) -> Manifest:
        """Validate and convert parsed ``manifest.json`` content of a homogeneous store.

        Raises:
            PartitionStoreError: Another format or version, a typed store, missing or unknown
                keys, fields of the wrong type or a wrong manifest checksum; the message names
                ``path`` and the fix.
        """
        one = StoreManifest.from_json(obj, path)
        if one.kind != "homogeneous":
            raise PartitionStoreError(
                f"{path}: a heterogeneous partition directory; read it with "
                "gnnsys.store.read_shard (or assemble_hetero)",
                path,
            )
        rel = "__".join(ONE_RELATION)
        if [t.name for t in one.node_types] != [ONE_TYPE] or [
            r.edge_type for r in one.relations
        ] != [ONE_RELATION]:
            raise PartitionStoreError(
                f"{path}: a homogeneous manifest must list one node type {ONE_TYPE!r} and one "
                f"relation {rel!r}; {_FIX}",
                path,
            )
        try:
            parts = tuple(
                PartEntry(p.num_owned[ONE_TYPE], p.num_edges[rel], p.num_halo[ONE_TYPE])
                for p in one.parts
            )
        except KeyError as err:
            raise PartitionStoreError(f"{path}: a part entry lacks {err}; {_FIX}", path) from err
        manifest = cls(
            format_version=FORMAT_VERSION,
            **{k: getattr(one, k) for k in SHARED_FIELDS},
            num_nodes=one.node_types[0].num_nodes,
            num_edges=one.relations[0].num_edges,
            files=one.files,
            parts=parts,
            num_classes=one.num_classes,
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
