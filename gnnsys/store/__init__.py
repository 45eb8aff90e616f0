"""Stage 3, the on-disk partition store: ``(Graph, Assignment) <-> partition directory``.

One format and one reader for both kinds (``gnnsys.store.reader``): ``read_shard`` loads a
part's ``Shard`` (per node type and relation; a homogeneous store is its one type),
memory-mapped, each array checked before use; ``verify`` recomputes every checksum and checks
everything; ``load_books`` gives the book of every node type; ``assemble_hetero`` the whole graph.
A homogeneous store also reads as ``load_shard`` (the one-type ``PartitionShard`` view),
``load_book``, ``read_manifest`` and ``load_partition`` (all of it, plus the cross-shard edge-id
check). One writer, ``write_partitions``: a ``Graph`` streamed in bounded memory, or a
``HeteroGraph``.
Layout: ``gnnsys.store.layout``; the manifest record: ``gnnsys.store.manifest``.
"""

from __future__ import annotations

from gnnsys.store.layout import FORMAT_VERSION, FileEntry
from gnnsys.store.links import ShardLinks, has_links, load_links
from gnnsys.store.manifest import Manifest, PartEntry, StoreManifest
from gnnsys.store.reader import (
    assemble_hetero,
    is_hetero_store,
    load_book,
    load_books,
    load_partition,
    load_shard,
    read_manifest,
    read_shard,
    read_store_manifest,
    verify,
)
from gnnsys.store.shard import Shard, build_shard
from gnnsys.store.writer import graph_fingerprint, write_partitions

__all__ = [
    "FORMAT_VERSION",
    "FileEntry",
    "StoreManifest",
    "Shard",
    "Manifest",
    "PartEntry",
    "ShardLinks",
    "assemble_hetero",
    "build_shard",
    "graph_fingerprint",
    "has_links",
    "is_hetero_store",
    "load_book",
    "load_books",
    "load_links",
    "load_partition",
    "load_shard",
    "read_store_manifest",
    "read_manifest",
    "read_shard",
    "verify",
    "write_partitions",
]
