"""Where the training data comes from: an existing partition store, or one written now.

``gnnsys train`` without ``--store`` loads the dataset, partitions it and writes the store under
the run directory before any actor starts, so every worker reads the same memory-mapped files.
"""

from __future__ import annotations

import logging
from pathlib import Path

from gnnsys.store.source import DataConfig

__all__ = ["prepare_store"]

log = logging.getLogger(__name__)


def prepare_store(
    spec: DataConfig, *, num_parts: int, num_hops: int, seed: int, run_dir: Path, reuse: bool
) -> Path:
    """Return a store with ``num_parts`` parts, writing ``run_dir/store`` if none is given.

    Args:
        spec: Data settings.
        num_parts: ``P``; a given store must have exactly this many parts.
        num_hops: Halo depth written into a new store (the model's layer count).
        seed: Partitioner seed.
        run_dir: Run directory (the new store goes to ``run_dir/store``).
        reuse: Keep an existing ``run_dir/store`` with ``num_parts`` parts (used by ``--resume``).

    Raises:
        ValueError: The given store has a different number of parts.
    """
    from gnnsys.store import read_manifest

    if spec.store is not None:
        manifest = read_manifest(spec.store)
        if manifest.num_parts != num_parts:
            raise ValueError(
                f"store {spec.store} has {manifest.num_parts} parts but --parts={num_parts}; "
                f"pass --parts {manifest.num_parts} or re-partition"
            )
        return Path(spec.store)
    target = run_dir / "store"
    if reuse and (target / "manifest.json").exists():
        if read_manifest(target).num_parts == num_parts:
            log.info("reusing the partition store %s", target)
            return target
    return _write_store(spec, num_parts, num_hops, seed, target)


def _write_store(spec: DataConfig, num_parts: int, num_hops: int, seed: int, target: Path) -> Path:
    from gnnsys.datasets import load
    from gnnsys.partitioners import partition
    from gnnsys.store import write_partitions

    graph = load(spec.dataset, root=spec.root, **dict(spec.dataset_params))
    log.info(
        "partitioning %s (%d nodes, %d edges) into %d parts with %s",
        graph.name,
        graph.num_nodes,
        graph.num_edges,
        num_parts,
        spec.partitioner,
    )
    assignment = partition(graph, spec.partitioner, num_parts, seed=seed)
    write_partitions(graph, assignment, target, num_hops=num_hops, overwrite=True)
    return target
