"""Stage 3, the on-disk partition store: ``(Graph, Assignment) <-> partition directory``.

``write_partitions`` writes it atomically; ``load_shard`` / ``load_book`` / ``read_manifest``
read it (memory-mapped, each array checked before use), ``load_partition`` all of it plus the
cross-shard edge-id check; ``verify`` recomputes every checksum. Layout: ``gnnsys.store.layout``.
"""

from __future__ import annotations

from gnnsys.store.layout import FORMAT_VERSION, FileEntry, Manifest, PartEntry
from gnnsys.store.links import ShardLinks, has_links, load_links
from gnnsys.store.reader import load_book, load_partition, load_shard, read_manifest, verify
from gnnsys.store.shard import build_shard
from gnnsys.store.writer import graph_fingerprint, write_partitions

__all__ = [
    "FORMAT_VERSION",
    "FileEntry",
    "Manifest",
    "PartEntry",
    "ShardLinks",
    "build_shard",
    "graph_fingerprint",
    "has_links",
    "load_book",
    "load_links",
    "load_partition",
    "load_shard",
    "read_manifest",
    "verify",
    "write_partitions",
]
