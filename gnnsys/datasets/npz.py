"""``npz:cora|citeseer|cora_ml``: gnn-benchmark / PPNP ``.npz`` archives of CSR matrices.

Files: ``<root>/gnn_benchmark_npz/{cora,citeseer}.npz`` (shchur/gnn-benchmark; keys ``adj_data``,
``adj_indices``, ``adj_indptr``, ``adj_shape``, the same under ``attr_``, and ``labels``) and
``<root>/ppnp_npz/cora_ml.npz`` (klicperajo/ppnp; the same arrays under ``adj_matrix.`` and
``attr_matrix.``). ``cora_ml.npz`` also holds object scalars (``metadata`` ...) that would need
``allow_pickle=True``; the loader reads only the numeric members, each with
``allow_pickle=False``, so nothing in the archive is ever unpickled.

The stored adjacency is directed (one entry per citation); the loader symmetrizes it and drops
self-loops. These archives carry no split: the loader draws a seeded Planetoid-style one,
``train_per_class`` (20) labeled nodes of each class for train, then ``num_val`` (500) and
``num_test`` (1000) uniformly from the remaining nodes; ``seed`` (0) fixes it.

Shape legend: ``N`` nodes, ``F`` features, ``E`` edges.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gnnsys.datasets.base import csr_to_coo, csr_to_dense, find_dir, open_npz, require_file
from gnnsys.datasets.splits import per_class_split
from gnnsys.types import Graph

__all__ = ["load_npz"]

# variant -> (sub-directory, file, key prefix of the adjacency, key prefix of the attributes)
FILES: dict[str, tuple[str, str, str, str]] = {
    "cora": ("gnn_benchmark_npz", "cora.npz", "adj_", "attr_"),
    "citeseer": ("gnn_benchmark_npz", "citeseer.npz", "adj_", "attr_"),
    "cora_ml": ("ppnp_npz", "cora_ml.npz", "adj_matrix.", "attr_matrix."),
}
HOW_TO_GET = (
    "Get cora.npz/citeseer.npz from https://github.com/shchur/gnn-benchmark (data/npz/) and "
    "cora_ml.npz from https://github.com/klicperajo/ppnp (ppnp/data/)."
)


def _read(path: Path, prefix: str, names: tuple[str, ...]) -> list[np.ndarray]:
    """Arrays ``prefix + name`` from the archive; ``allow_pickle=False`` refuses object arrays."""
    with open_npz(path) as archive:
        missing = [prefix + n for n in names if prefix + n not in archive.files]
        if missing:
            raise ValueError(f"{path} lacks the arrays {missing}; is it a gnn-benchmark .npz?")
        return [archive[prefix + n] for n in names]


def load_npz(
    variant: str,
    root: Path | None = None,
    *,
    seed: int = 0,
    train_per_class: int = 20,
    num_val: int = 500,
    num_test: int = 1000,
) -> Graph:
    """Load ``npz:<variant>`` with a seeded per-class split.

    Args:
        variant: ``cora``, ``citeseer`` or ``cora_ml``.
        root: Data root; see :func:`gnnsys.datasets.base.find_dir`.
        seed: Seed of the split.
        train_per_class: Train nodes per class.
        num_val: Validation nodes.
        num_test: Test nodes.

    Returns:
        A symmetric, self-loop-free graph with float32 features and int64 labels.

    Raises:
        ValueError: Unknown variant or a malformed archive.
        DatasetNotFoundError: The file is missing.
    """
    if variant not in FILES:
        raise ValueError(f"unknown npz dataset {variant!r}; choose one of {sorted(FILES)}")
    subdir, filename, adj, attr = FILES[variant]
    name = f"npz:{variant}"
    path = require_file(find_dir(root, subdir, name) / filename, name, HOW_TO_GET)
    csr = ("data", "indices", "indptr", "shape")
    a_data, a_indices, a_indptr, a_shape = _read(path, adj, csr)
    f_data, f_indices, f_indptr, f_shape = _read(path, attr, csr)
    (labels,) = _read(path, "", ("labels",))
    num_nodes = int(a_shape[0])
    del a_data  # the pattern is the graph; stored weights are all 1
    x = csr_to_dense(f_data, f_indices, f_indptr, (int(f_shape[0]), int(f_shape[1])))
    y = labels.astype(np.int64)
    masks = per_class_split(
        y,
        np.random.default_rng(seed),
        train_per_class=train_per_class,
        num_val=num_val,
        num_test=num_test,
    )
    return Graph.from_edge_index(
        csr_to_coo(a_indptr, a_indices),
        num_nodes,
        symmetric=True,
        self_loops=False,
        x=x,
        y=y,
        train_mask=masks[0],
        val_mask=masks[1],
        test_mask=masks[2],
        name=name,
    )
