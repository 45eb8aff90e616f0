"""A graph by name: a registry dataset, or an ``.npz`` file holding a CSR."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["load_graph"]


def load_graph(name: str, root: str | None, params: dict[str, Any]) -> Any:
    """Load a registry dataset, or an ``.npz`` CSR file when ``name`` is an existing path."""
    from gnnsys.types import Graph

    path = Path(name)
    if path.suffix == ".npz" and path.is_file():
        from gnnsys.datasets.base import open_npz, reading

        with reading(str(path)), open_npz(path) as z:
            if "indptr" not in z.files or "indices" not in z.files:
                raise ValueError(f"{path} lacks indptr/indices; save a CSR with np.savez")
            keys = ("x", "y", "train_mask", "val_mask", "test_mask")
            fields = {k: z[k] for k in keys if k in z.files}
            indptr = z["indptr"].astype(np.int64)
            indices = z["indices"]
            if indices.dtype == np.int64 and indptr.shape[0] - 1 < 2**31:
                indices = indices.astype(np.int32)
        return Graph(
            indptr=indptr, indices=indices, num_nodes=indptr.shape[0] - 1, name=path.stem, **fields
        )
    from gnnsys.datasets import load

    return load(name, root=root, **params)
