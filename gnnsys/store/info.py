"""What a store says of itself without its graph: :class:`StoreInfo`, for a store of either kind.

A homogeneous store is the one-type case: its node type and relation are ``None``, filed in the
store as ``ONE_TYPE`` (``node``) and ``ONE_RELATION`` (``node__to__node``), the names the
``named_*`` views give them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gnnsys.types import ONE_RELATION, ONE_TYPE

__all__ = ["StoreInfo", "part_array", "store_info"]


@dataclass(frozen=True, slots=True)
class StoreInfo:
    """What the driver knows of a store of either kind without holding the graph.

    A homogeneous store is the one-type case: its node type and relation are ``None``.

    Attributes:
        num_nodes: ``N``, nodes of every type.
        num_edges: ``E`` (directed), edges of every relation.
        num_parts: ``P``.
        num_classes: ``C`` of the labelled type: a homogeneous store's ``max(y) + 1`` over every
            part (labels ``-1`` are unlabelled), a typed store's from its manifest.
        feature_dims: Featured node type -> ``F_t`` (``{None: F}``, or ``{}`` without features).
        node_types: Every node type, in store order (``(None,)``: one type).
        edge_types: Every relation, in store order (``(None,)``: one relation).
    """

    num_nodes: int
    num_edges: int
    num_parts: int
    num_classes: int
    feature_dims: dict[str | None, int]
    node_types: tuple[str | None, ...] = (None,)
    edge_types: tuple[tuple[str, str, str] | None, ...] = (None,)

    @property
    def num_features(self) -> int:
        """``F`` of a homogeneous store (0 without features, or for a typed store)."""
        return self.feature_dims.get(None, 0)

    @property
    def typed(self) -> bool:
        """Whether the store names its node types (a heterogeneous graph)."""
        return self.node_types != (None,)

    @property
    def named_types(self) -> list[str]:
        """The node types by the names the store files them under (``[ONE_TYPE]``: one type)."""
        return [ONE_TYPE if t is None else t for t in self.node_types]

    @property
    def named_relations(self) -> list[tuple[str, str, str]]:
        """The relations by their names in the store (``[ONE_RELATION]``: one relation)."""
        return [ONE_RELATION if r is None else r for r in self.edge_types]

    @property
    def named_dims(self) -> dict[str, int]:
        """Featured node types by name -> ``F_t`` (``ONE_TYPE`` for a homogeneous store)."""
        return {ONE_TYPE if t is None else t: f for t, f in self.feature_dims.items()}


def part_array(
    store: Path, part: int, name: str, node_type: str | None = None
) -> np.ndarray | None:
    """One part's ``name`` array, memory-mapped; ``None`` when the store has none.

    ``node_type``: the array of that node type in a typed store.
    """
    from gnnsys.store.layout import shard_file
    from gnnsys.store.manifest import type_file

    rel = shard_file(part, name) if node_type is None else type_file(part, node_type, name)
    path = store / rel
    if not path.exists():
        return None
    arr: np.ndarray = np.load(path, mmap_mode="r", allow_pickle=False)
    return arr


def store_info(store: str | Path) -> StoreInfo:
    """Sizes of a store of either kind, from its manifest (and a homogeneous store's labels).

    Reads no structure and no features.
    """
    from gnnsys.store import is_hetero_store, read_manifest, read_store_manifest

    root = Path(store)
    if is_hetero_store(root):
        typed = read_store_manifest(root)
        return StoreInfo(
            num_nodes=typed.num_nodes,
            num_edges=typed.num_edges,
            num_parts=typed.num_parts,
            num_classes=typed.num_classes,
            feature_dims={
                t.name: int(t.data["x"][1][0]) for t in typed.node_types if "x" in t.data
            },
            node_types=tuple(t.name for t in typed.node_types),
            edge_types=tuple(r.edge_type for r in typed.relations),
        )
    manifest = read_manifest(root)
    x0 = part_array(root, 0, "x")
    num_classes = 0
    for part in range(manifest.num_parts):
        y = part_array(root, part, "y")
        if y is not None and y.size:
            num_classes = max(num_classes, int(y.shape[1]) if y.ndim == 2 else int(y.max()) + 1)
    return StoreInfo(
        num_nodes=manifest.num_nodes,
        num_edges=manifest.num_edges,
        num_parts=manifest.num_parts,
        num_classes=num_classes,
        feature_dims={} if x0 is None else {None: int(x0.shape[1])},
    )
