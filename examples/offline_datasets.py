"""Offline stand-ins for the dataset lines of PyG's examples (no download, no ``ogb`` package).

``scripts/pyg_examples.sh`` rewrites only the dataset line of PyG's ``examples/ogbn_train.py``
and ``examples/graph_sage_unsup.py`` (plus the loader import) to use these:

* ``planetoid_root(name)``: a ``Planetoid`` root whose ``raw/`` folder holds the offline copies
  from ``$GNNSYS_DATASETS/planetoid`` (default ``/work/shared/datasets``), so
  ``Planetoid(planetoid_root('Cora'), 'Cora')`` processes them instead of downloading.
* ``PygNodePropPredDataset(name, root)``: what ``ogb.nodeproppred.PygNodePropPredDataset`` gives
  ``ogbn_train.py`` (``dataset[0]``, ``num_features``, ``num_classes``, ``get_idx_split()``),
  backed by Cora and its public Planetoid split whatever ``name`` says: it stands in for the
  OGB graph on a machine that has neither the data nor the ``ogb`` package.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

__all__ = ["PygNodePropPredDataset", "planetoid_root"]


def planetoid_root(name: str) -> str:
    """A temporary ``Planetoid`` root holding the offline raw files of ``name`` (e.g. Cora)."""
    source = Path(os.environ.get("GNNSYS_DATASETS", "/work/shared/datasets")) / "planetoid"
    files = sorted(source.glob(f"ind.{name.lower()}.*"))
    if not files:
        raise FileNotFoundError(f"no offline Planetoid files ind.{name.lower()}.* in {source}")
    root = Path(tempfile.mkdtemp(prefix="gnnsys_planetoid_"))
    (root / name / "raw").mkdir(parents=True)  # Planetoid(root, name) reads root/name/raw
    for path in files:
        shutil.copy(path, root / name / "raw" / path.name)
    return str(root)


class PygNodePropPredDataset:
    """Cora shaped like an OGB node-property dataset (see the module docstring).

    Args:
        name: The OGB name the example asks for (reported, not loaded).
        root: Ignored (the offline copy is read instead).
    """

    def __init__(self, name: str, root: str = "") -> None:
        from torch_geometric.datasets import Planetoid

        print(f"offline stand-in: {name!r} is served by Planetoid Cora (public split)")
        self._dataset = Planetoid(planetoid_root("Cora"), "Cora")
        self.name = name

    def __getitem__(self, index: int) -> Any:
        """The graph (``y`` as ``[N, 1]``, as OGB stores it)."""
        data = self._dataset[index]
        data.y = data.y.view(-1, 1)
        return data

    def __len__(self) -> int:
        """One graph."""
        return 1

    @property
    def num_features(self) -> int:
        """Input feature dimension."""
        return int(self._dataset.num_features)

    @property
    def num_classes(self) -> int:
        """Number of classes."""
        return int(self._dataset.num_classes)

    def get_idx_split(self) -> dict[str, torch.Tensor]:
        """``{'train', 'valid', 'test'}`` node indices of the public Planetoid split."""
        data = self._dataset[0]
        return {
            "train": data.train_mask.nonzero().view(-1),
            "valid": data.val_mask.nonzero().view(-1),
            "test": data.test_mask.nonzero().view(-1),
        }
