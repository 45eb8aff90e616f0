"""Stage 3, the on-disk partition store: ``(Graph, Assignment) <-> partition directory``.

``write_partitions`` writes it atomically; ``load_shard`` / ``load_book`` / ``read_manifest``
read it (memory-mapped, each array checked before use), ``load_partition`` all of it plus the
cross-shard edge-id check; ``verify`` recomputes every checksum; ``load_books`` gives the book of
every node type, of either kind. Layout: ``gnnsys.store.layout``.
Heterogeneous graphs: ``write_hetero_partitions`` / ``read_hetero_shard`` / ``verify_hetero`` /
``assemble_hetero``, in the same format (a homogeneous store is its one-type case, which the
typed readers read too; the manifest record: ``gnnsys.store.hetero_layout``).
"""

from __future__ import annotations

from gnnsys.store.hetero_layout import HeteroManifest
from gnnsys.store.hetero_reader import (
    assemble_hetero,
    is_hetero_store,
    load_books,
    read_hetero_manifest,
    read_hetero_shard,
    read_store_manifest,
    verify_hetero,
)
from gnnsys.store.hetero_shard import HeteroShard
from gnnsys.store.hetero_writer import write_hetero_partitions
from gnnsys.store.layout import FORMAT_VERSION, FileEntry, Manifest, PartEntry
from gnnsys.store.links import ShardLinks, has_links, load_links
from gnnsys.store.reader import load_book, load_partition, load_shard, read_manifest, verify
from gnnsys.store.shard import build_shard
from gnnsys.store.writer import graph_fingerprint, write_partitions

__all__ = [
    "FORMAT_VERSION",
    "FileEntry",
    "HeteroManifest",
    "HeteroShard",
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
    "read_hetero_manifest",
    "read_hetero_shard",
    "read_store_manifest",
    "read_manifest",
    "verify",
    "verify_hetero",
    "write_hetero_partitions",
    "write_partitions",
]
