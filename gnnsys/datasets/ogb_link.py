"""``ogb:ogbl-<name>``: an OGB link-property dataset already on disk, in OGB's raw layout.

Expected tree (``<root>/<name>/``, ``-`` read as ``_`` as OGB names folders)::

    <root>/ogbl_collab/
    ├── raw/edge.csv.gz            # "src,dst" per line, no header (the graph; required)
    ├── raw/num-node-list.csv.gz   # one line: N (optional; else inferred)
    ├── raw/node-feat.csv.gz       # N lines of F floats (required: the encoder needs features)
    └── split/<type>/{train,valid,test}.pt

The split files are ``torch.save`` dicts of tensors, read with ``torch.load(weights_only=True)``
only (they cannot run code). Two OGB layouts are understood:

* ``ogbl-collab`` / ``ogbl-ppa`` / ``ogbl-ddi``: ``{"edge": [K, 2]}`` per split, with
  ``"edge_neg": [K', 2]`` in valid and test;
* ``ogbl-citation2``: ``{"source_node": [K], "target_node": [K]}``, with
  ``"target_node_neg": [K, Q]`` in valid and test.

gnnsys ranks every held-out link against negatives of its own (``citation2``'s protocol). The
citation2 layout gives them; for the ``edge_neg`` layout, whose negatives are one set shared by
all links (OGB ranks each positive against the whole set), gnnsys draws ``num_neg`` seeded
negative destinations per link instead and logs that the figures are not OGB's shared-negative
Hits@K. Message passing uses the training links only (``train.pt``, symmetrised, loops
dropped); OGB's optional use of validation links at test time is not done.

Shape legend: ``N`` nodes, ``E`` train links, ``K`` held-out links, ``Q`` negatives per link.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from gnnsys.datasets.base import find_dir, require_file
from gnnsys.datasets.link_split import LinkSplit, LinkSplitConfig, training_graph
from gnnsys.datasets.ogb import _num_nodes, _read_csv_gz, _split_dir
from gnnsys.errors import DatasetFileError
from gnnsys.types import Graph

__all__ = ["load_ogb_link"]

log = logging.getLogger(__name__)

HOW_TO_GET = (
    "Download it once with the ogb package (e.g. LinkPropPredDataset('ogbl-collab', root=DIR)) "
    "or from http://snap.stanford.edu/ogb/data/linkproppred/, unzip it, and pass DIR as --root."
)
SPLIT_FILES = {"train": "train.pt", "val": "valid.pt", "test": "test.pt"}


def _read_split(path: Path) -> dict[str, np.ndarray]:
    """One ``split/<type>/<name>.pt`` as int64 arrays (``torch.load(weights_only=True)``)."""
    import torch

    try:
        obj: Any = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as err:  # noqa: BLE001 -- a damaged or foreign file raises any type
        raise DatasetFileError(
            f"{path}: not a readable OGB split file ({type(err).__name__}: {err}); it must be "
            "a torch.save dict of tensors. Replace it with an intact copy"
        ) from err
    if not isinstance(obj, dict):
        raise DatasetFileError(f"{path}: holds a {type(obj).__name__}, expected a dict")
    out = {}
    for key, value in obj.items():
        if key in ("edge", "edge_neg", "source_node", "target_node", "target_node_neg"):
            out[key] = np.asarray(torch.as_tensor(value).numpy(), dtype=np.int64)
    return out


def _links(split: dict[str, np.ndarray], path: Path) -> np.ndarray:
    """``[2, K]`` links of one split file, either layout."""
    if "edge" in split:
        edge = split["edge"]
        if edge.ndim != 2 or edge.shape[1] != 2:
            raise DatasetFileError(f"{path}: 'edge' has shape {edge.shape}; expected [K, 2]")
        return np.ascontiguousarray(edge.T)
    if "source_node" in split and "target_node" in split:
        return np.stack([split["source_node"].reshape(-1), split["target_node"].reshape(-1)])
    raise DatasetFileError(
        f"{path}: has keys {sorted(split)}; expected 'edge' or 'source_node'/'target_node'"
    )


def _negatives(
    split: dict[str, np.ndarray], links_2K: np.ndarray, rng: np.random.Generator, n: int, q: int
) -> np.ndarray:
    """``[K, Q]`` negatives: the file's own per-link ones, else seeded uniform draws."""
    if "target_node_neg" in split:
        neg = split["target_node_neg"]
        return np.ascontiguousarray(neg.reshape(links_2K.shape[1], -1))
    return rng.integers(0, n, size=(links_2K.shape[1], q), dtype=np.int64)


def load_ogb_link(variant: str, root: Path | None, config: LinkSplitConfig) -> LinkSplit:
    """Load ``ogb:<variant>`` (e.g. ``ogb:ogbl-collab``) as a :class:`LinkSplit`.

    Args:
        variant: OGB dataset name, ``ogbl-collab`` or ``ogbl_collab``.
        root: Data root holding the dataset folder.
        config: ``num_neg`` and ``seed`` of drawn negatives (the fractions are OGB's own).

    Raises:
        DatasetNotFoundError: The folder or a required file is missing.
        DatasetFileError: A split file is unreadable or of an unknown layout.
    """
    name = f"ogb:{variant}"
    folder = find_dir(root, variant.replace("-", "_"), name)
    raw = folder / "raw"
    edges = _read_csv_gz(require_file(raw / "edge.csv.gz", name, HOW_TO_GET), np.int64, 2)
    num_nodes = _num_nodes(raw, np.ascontiguousarray(edges.T))
    x = _read_csv_gz(require_file(raw / "node-feat.csv.gz", name, HOW_TO_GET), np.float32, 2)
    if x.shape[0] != num_nodes:
        raise DatasetFileError(f"{raw / 'node-feat.csv.gz'} has {x.shape[0]} rows, not {num_nodes}")
    split_dir = _split_dir(folder, None, name)
    if split_dir is None:
        raise DatasetFileError(f"{folder}: no split/ folder; a link dataset needs one")
    paths = {k: require_file(split_dir / f, name, HOW_TO_GET) for k, f in SPLIT_FILES.items()}
    files = {k: _read_split(p) for k, p in paths.items()}
    links = {k: _links(files[k], paths[k]) for k in files}
    if "target_node_neg" not in files["val"]:
        log.warning(
            "%s: shared negatives (edge_neg) are replaced by %d seeded negatives per link; "
            "the figures are not OGB's shared-negative Hits@K",
            name,
            config.num_neg,
        )
    rng = np.random.default_rng(config.seed)
    base = Graph(
        indptr=np.zeros(num_nodes + 1, dtype=np.int64),
        indices=np.zeros(0, dtype=np.int64),
        num_nodes=num_nodes,
        x=x,
        name=name,
    )
    pairs = np.unique(np.sort(links["train"], axis=0), axis=1)
    pairs = pairs[:, pairs[0] != pairs[1]]
    return LinkSplit(
        graph=training_graph(base, pairs),
        train_2E=np.ascontiguousarray(pairs),
        val_2K=links["val"],
        val_neg_KQ=_negatives(files["val"], links["val"], rng, num_nodes, config.num_neg),
        test_2K=links["test"],
        test_neg_KQ=_negatives(files["test"], links["test"], rng, num_nodes, config.num_neg),
    )
