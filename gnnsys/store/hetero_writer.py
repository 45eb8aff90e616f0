"""``write_hetero_partitions``: save a (HeteroGraph, Assignment) as a partition directory.

The homogeneous writer's mechanics (``gnnsys.store.writer``): everything goes into a hidden
temporary sibling, each file gets a sha256 and an xxh3_128 from one read, the manifest is
written last, then one rename publishes the directory; a crash never leaves a half-written
store under the target name. Feature rows are gathered in row chunks into memory-mapped
``.npy`` files, so the extra memory is one part's index arrays plus one chunk of rows.
Layout: ``gnnsys.store.manifest``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import replace
from pathlib import Path

import numpy as np

from gnnsys.datasets.hetero import HeteroGraph
from gnnsys.datasets.link_split import TypedLinkSplit
from gnnsys.store.layout import MANIFEST, NODE_TO_PART, FileEntry, shard_file
from gnnsys.store.links import links_of_part
from gnnsys.store.manifest import (
    REL_ARRAYS,
    TYPE_ARRAYS,
    PartCounts,
    RelationEntry,
    StoreManifest,
    TypeEntry,
    check_name,
    rel_file,
    type_file,
)
from gnnsys.store.shard import HeteroShard, build_hetero_shard, data_arrays
from gnnsys.store.writer import ProgressFn, _save, _save_rows, package_version, staged
from gnnsys.types import Assignment

__all__ = ["hetero_fingerprint", "write_hetero_partitions"]

logger = logging.getLogger(__name__)

_HASH_BLOCK = 1 << 24


def hetero_fingerprint(graph: HeteroGraph) -> str:
    """First 16 hex digits of sha256 over the type counts and every relation's CSR."""
    counts = ",".join(f"{t}={graph.num_nodes(t)}" for t in graph.node_types)
    digest = hashlib.sha256(counts.encode())
    for edge_type, rel in graph.relations.items():
        digest.update(f"|{'__'.join(edge_type)}:{rel.indices.dtype.str}".encode())
        for arr in (rel.indptr, rel.indices):
            flat = np.ascontiguousarray(arr)
            for lo in range(0, flat.shape[0], _HASH_BLOCK):
                digest.update(flat[lo : lo + _HASH_BLOCK].tobytes())  # copies one block
    return digest.hexdigest()[:16]


def _write_part(
    tmp: Path, graph: HeteroGraph, shard: HeteroShard
) -> tuple[dict[str, FileEntry], PartCounts]:
    part, files = shard.part, {}
    for node_type, nodes in shard.nodes.items():
        (tmp / type_file(part, node_type, "x")).parent.mkdir(parents=True)
        for name in TYPE_ARRAYS:
            rel = type_file(part, node_type, name)
            files[rel] = _save(tmp, rel, getattr(nodes, name))
        for name, value in data_arrays(graph, node_type).items():
            rel = type_file(part, node_type, name)
            files[rel] = _save_rows(tmp, rel, value, nodes.owned_lid)
    for edge_type, edges in shard.relations.items():
        (tmp / rel_file(part, edge_type, "e_id")).parent.mkdir(parents=True)
        for name in REL_ARRAYS:
            rel = rel_file(part, edge_type, name)
            files[rel] = _save(tmp, rel, getattr(edges, name))
    summary = PartCounts(
        num_owned={t: s.num_owned for t, s in shard.nodes.items()},
        num_halo={t: int(s.halo_lid.shape[0]) for t, s in shard.nodes.items()},
        num_edges={"__".join(et): int(r.indptr[-1]) for et, r in shard.relations.items()},
    )
    return files, summary


def write_hetero_partitions(
    graph: HeteroGraph,
    assignment: Assignment,
    root: str | os.PathLike[str],
    *,
    num_hops: int = 2,
    overwrite: bool = False,
    progress: ProgressFn | None = None,
    links: TypedLinkSplit | None = None,
) -> StoreManifest:
    """Write the heterogeneous partition directory of ``assignment`` at ``root``.

    Args:
        graph: The partitioned graph.
        assignment: Its assignment over global ids (``gnnsys.partitioners.partition_hetero``).
        root: Target directory; must not exist unless ``overwrite``.
        num_hops: ``k`` of each part's k-hop halo (the number of GNN layers).
        overwrite: Replace an existing directory (still atomically: rename, then delete).
        progress: Called with each part id once that part is written.
        links: A link split of one relation (``graph`` is its training graph): each part also
            gets the links whose source it owns (``gnnsys.store.links.LINK_DATA``), and the
            manifest names the relation (``link_edge_type``).

    Returns:
        The manifest written.

    Raises:
        ValueError: The assignment does not cover the graph's ``G`` nodes, ``num_hops < 1``,
            a type or relation name that cannot name a folder, or ``root`` exists and
            ``overwrite`` is false.
    """
    root = Path(root)
    _check_args(graph, assignment, root, num_hops, overwrite)
    directed = graph.to_homogeneous()[0]
    with staged(root) as tmp:
        files = {NODE_TO_PART: _save(tmp, NODE_TO_PART, assignment.part_N)}
        parts = []
        for part in range(assignment.num_parts):
            shard = build_hetero_shard(
                graph,
                assignment.part_N,
                assignment.num_parts,
                part,
                num_hops,
                directed,
                with_data=False,
            )
            part_files, summary = _write_part(tmp, graph, shard)
            files |= part_files
            if links is not None:
                files |= _write_links(tmp, graph, assignment, links, part)
            parts.append(summary)
            if progress is not None:
                progress(part)
        manifest = _manifest(graph, assignment, num_hops, files, tuple(parts))
        if links is not None:
            manifest = replace(manifest, link_edge_type=links.edge_type)
        (tmp / MANIFEST).write_text(json.dumps(manifest.to_json(), indent=1) + "\n")
    logger.info("wrote %d parts of %s to %s", assignment.num_parts, graph.name, root)
    return manifest


def _write_links(
    tmp: Path, graph: HeteroGraph, assignment: Assignment, links: TypedLinkSplit, part: int
) -> dict[str, FileEntry]:
    """Part ``part``'s link arrays: the links whose source node (of the source type) it owns."""
    src = links.edge_type[0]
    offset = graph.node_offsets()[src]
    part_N = assignment.part_N[offset : offset + graph.num_nodes(src)]
    return {
        shard_file(part, key): _save(tmp, shard_file(part, key), arr)
        for key, arr in links_of_part(links, part_N, part).items()
    }


def _check_args(
    graph: HeteroGraph, assignment: Assignment, root: Path, num_hops: int, overwrite: bool
) -> None:
    if assignment.part_N.shape[0] != graph.num_nodes():
        raise ValueError(
            f"assignment covers {assignment.part_N.shape[0]} nodes but {graph.name!r} has "
            f"{graph.num_nodes()} (all types); partition it with partition_hetero"
        )
    if num_hops < 1:
        raise ValueError(f"num_hops={num_hops}; choose num_hops >= 1 (the number of GNN layers)")
    for node_type in graph.node_types:
        check_name(node_type, "node type")
    for edge_type in graph.edge_types:
        check_name(edge_type[1], "relation")
    if root.exists() and not overwrite:
        raise ValueError(f"{root} already exists; choose another directory or overwrite it")


def _manifest(
    graph: HeteroGraph,
    assignment: Assignment,
    num_hops: int,
    files: dict[str, FileEntry],
    parts: tuple[PartCounts, ...],
) -> StoreManifest:
    offsets = graph.node_offsets()
    types = tuple(
        TypeEntry(
            name=t,
            num_nodes=graph.num_nodes(t),
            offset=offsets[t],
            data={k: (v.dtype.str, tuple(v.shape[1:])) for k, v in data_arrays(graph, t).items()},
        )
        for t in graph.node_types
    )
    relations = tuple(
        RelationEntry(edge_type=et, num_edges=r.num_edges, indices_dtype=r.indices.dtype.str)
        for et, r in graph.relations.items()
    )
    return StoreManifest(
        dataset=graph.name,
        fingerprint=hetero_fingerprint(graph),
        num_parts=assignment.num_parts,
        num_hops=num_hops,
        strategy=assignment.method,
        params=dict(assignment.params),
        seed=assignment.seed,
        gnnsys_version=package_version(),
        num_classes=graph.num_classes,
        node_types=types,
        relations=relations,
        parts=parts,
        files=files,
    )
