"""Writing a store's part folders as Ray Data tasks, one task per part.

``ray_parts_writer(work, P, plan)`` is a ``PartsWriter`` for ``write_partitions``: each task maps
the on-disk graph in ``work`` itself (``open_disk_graph``: nothing of the graph travels through
Ray), maps the book (``node_to_part.npy`` and ``node_lid.npy``, already in the staging
directory), and calls ``write_part`` for its part, so the files are those the in-process loop
writes. A task holds O(N) scratch (halo reach, owned gids) plus one block of
edges and one chunk of feature rows; as many run at once as ``part_task_bytes`` fit in the plan.
The results are the manifest entries.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from gnnsys.out_of_core.disk_graph import open_disk_graph
from gnnsys.out_of_core.runtime import Plan, run_tasks
from gnnsys.store.layout import NODE_LID, NODE_TO_PART, FileEntry
from gnnsys.store.manifest import PartEntry
from gnnsys.store.writer import PartsWriter, ProgressFn, write_part
from gnnsys.types import PartitionBook

__all__ = ["part_task_bytes", "ray_parts_writer"]


def part_task_bytes(num_nodes: int) -> int:
    """Bytes one part task holds (an estimate that sets how many run at once).

    O(N) scratch (owned mask and gids, the k-hop reach and its frontiers, the halo) of about 48
    bytes per node, plus blocks of edges and feature rows.
    """
    return 48 * num_nodes + (256 << 20)


def ray_parts_writer(work: Path, num_parts: int, plan: Plan, *, progress: bool) -> PartsWriter:
    """A ``PartsWriter`` writing the ``num_parts`` folders of the graph in ``work`` on Ray Data."""

    def write(
        tmp: Path, book: PartitionBook, num_hops: int, on_part: ProgressFn | None
    ) -> list[tuple[dict[str, FileEntry], PartEntry]]:
        items = [{"part": p} for p in range(num_parts)]
        kwargs = {"work": str(work), "tmp": str(tmp), "num_hops": num_hops, "parts": num_parts}
        rows = run_tasks(
            _write_one,
            items,
            kwargs,
            plan,
            "parts",
            progress,
            on_result=None if on_part is None else (lambda row: on_part(int(row["part"]))),
            task_bytes=part_task_bytes(book.num_nodes),
        )
        return [_decode(row) for row in sorted(rows, key=lambda r: int(r["part"]))]

    return write


def _write_one(
    item: dict[str, Any], *, work: str, tmp: str, num_hops: int, parts: int
) -> dict[str, Any]:
    """Ray task: write one part folder into the staging directory ``tmp``."""
    graph = open_disk_graph(work)
    part_N = np.load(Path(tmp) / NODE_TO_PART, mmap_mode="r", allow_pickle=False)
    lid_N = np.load(Path(tmp) / NODE_LID, mmap_mode="r", allow_pickle=False)
    book = PartitionBook(part_N=part_N, lid_N=lid_N, num_parts=parts)
    files, summary = write_part(Path(tmp), graph, book, int(item["part"]), num_hops)
    return {
        "part": int(item["part"]),
        "files": json.dumps({rel: asdict(entry) for rel, entry in files.items()}),
        "summary": json.dumps(asdict(summary)),
    }


def _decode(row: dict[str, Any]) -> tuple[dict[str, FileEntry], PartEntry]:
    """A task's JSON record (Ray Data rows need one schema for every part) -> entries."""
    files = {
        rel: FileEntry(tuple(e["shape"]), e["dtype"], e["sha256"], e["xxh3"])
        for rel, e in json.loads(row["files"]).items()
    }
    return files, PartEntry(**json.loads(row["summary"]))
