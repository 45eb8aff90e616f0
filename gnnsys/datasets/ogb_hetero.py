"""``ogb:ogbn-mag`` (and any OGB heterogeneous node dataset) from OGB's raw layout. No download.

Expected tree (OGB's ``read_csv_heterograph_raw`` and ``read_nodesplitidx_split_hetero``;
``<root>/<name with _>/``, e.g. ``<root>/ogbn_mag/``)::

    raw/num-node-dict.csv.gz                     # header: node types; one row: their counts
    raw/relations/<src>___<rel>___<dst>/edge.csv.gz   # "src,dst" per line, type-local ids
    raw/node-feat/<type>/node-feat.csv.gz        # optional: F floats per line
    raw/node-feat/<type>/node_year.csv.gz        # optional: one int per line -> attrs["year"]
    raw/node-label/<type>/node-label.csv.gz      # optional: one label per line (NaN -> -1)
    split/<split type>/<type>/{train,valid,test}.csv.gz   # type-local ids, one per line

OGB's own reader also reads ``triplet-type-list.csv.gz`` and ``num-edge-list.csv.gz``; the
relation folders carry the same information, so they are not required here. Node types are
ordered as OGB orders them (sorted), which fixes the global id space; relations likewise.
Edges are kept as the files list them (ogbn-mag's ``cites`` is directed); ``reverse=True`` adds
reverse relations as PyG's ``ToUndirected()`` does.

Shape legend: ``N_t`` nodes of type ``t``, ``E`` edges of one relation, ``F`` features.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from gnnsys.datasets.base import find_dir, require_file
from gnnsys.datasets.ogb import HOW_TO_GET, SPLIT_FILES, _read_csv_gz, _split_dir
from gnnsys.types import EdgeType
from gnnsys.types.relations import HeteroGraph, NodeSet, Relation, relation_from_coo

__all__ = ["load_ogb_hetero"]


def _num_nodes(raw: Path, dataset: str) -> dict[str, int]:
    path = require_file(raw / "num-node-dict.csv.gz", dataset, HOW_TO_GET)
    with gzip.open(path, "rt") as f:
        header = f.readline().strip().split(",")
        counts = f.readline().strip().split(",")
    if len(header) != len(counts) or not header[0]:
        raise ValueError(f"{path}: expected a header of node types and one row of counts")
    return {t: int(float(n)) for t, n in sorted(zip(header, counts, strict=True))}


def _relations(raw: Path, num_nodes: dict[str, int], dataset: str) -> dict[EdgeType, Relation]:
    folders = sorted(p for p in (raw / "relations").glob("*___*___*") if p.is_dir())
    if not folders:
        raise ValueError(f"{raw / 'relations'} holds no <src>___<rel>___<dst> folders")
    relations: dict[EdgeType, Relation] = {}
    for folder in folders:
        src, rel, dst = folder.name.split("___")
        if src not in num_nodes or dst not in num_nodes:
            raise ValueError(f"{folder.name}: node type not in num-node-dict ({list(num_nodes)})")
        pairs = _read_csv_gz(require_file(folder / "edge.csv.gz", dataset, HOW_TO_GET), np.int64, 2)
        if pairs.size and pairs.shape[1] != 2:
            raise ValueError(f"{folder / 'edge.csv.gz'} has {pairs.shape[1]} columns; expected 2")
        pairs = pairs.reshape(-1, 2)
        relations[(src, rel, dst)] = relation_from_coo(
            pairs[:, 0], pairs[:, 1], num_nodes[src], num_nodes[dst], dedup=False
        )
    return relations


def _node_set(raw: Path, node_type: str, num: int, split: Path | None, dataset: str) -> NodeSet:
    def rows(path: Path, array: np.ndarray) -> np.ndarray:
        if array.shape[0] != num:
            raise ValueError(f"{path} has {array.shape[0]} rows; expected {num} ({node_type})")
        return array

    feat = raw / "node-feat" / node_type / "node-feat.csv.gz"
    x = rows(feat, _read_csv_gz(feat, np.float32, 2)) if feat.is_file() else None
    attrs = {}
    year = raw / "node-feat" / node_type / "node_year.csv.gz"
    if year.is_file():
        attrs["year"] = rows(year, _read_csv_gz(year, np.int64, 2)[:, 0].copy())
    label = raw / "node-label" / node_type / "node-label.csv.gz"
    y = None
    if label.is_file():
        raw_y = rows(label, _read_csv_gz(label, np.float64, 2))[:, 0]
        y = np.where(np.isnan(raw_y), -1, np.nan_to_num(raw_y)).astype(np.int64)
    masks: dict[str, np.ndarray] = {}
    if split is not None and (split / node_type).is_dir():
        for key, filename in SPLIT_FILES.items():
            path = require_file(split / node_type / filename, dataset, HOW_TO_GET)
            mask = np.zeros(num, dtype=bool)
            mask[_read_csv_gz(path, np.int64, 1)] = True
            masks[f"{key}_mask"] = mask
    return NodeSet(num_nodes=num, x=x, y=y, attrs=attrs, **masks)


def load_ogb_hetero(
    variant: str,
    root: Path | None = None,
    *,
    reverse: bool = False,
    split_type: str | None = None,
) -> HeteroGraph:
    """Load ``ogb:<variant>`` (e.g. ``ogb:ogbn-mag``) from ``<root>/<variant with _>/``.

    Args:
        variant: OGB dataset name, ``ogbn-mag`` or ``ogbn_mag``.
        root: Data root holding the dataset folder.
        reverse: Add reverse relations (PyG's ``ToUndirected()``).
        split_type: Folder under ``split/`` when there are several (ogbn-mag has ``time``).

    Returns:
        The ``HeteroGraph`` (float32 features, int64 labels, masks on the split's types).

    Raises:
        DatasetNotFoundError: The folder or a required file is missing.
        ValueError: Malformed files.
    """
    name = f"ogb:{variant}"
    folder = find_dir(root, variant.replace("-", "_"), name)
    raw = folder / "raw"
    num_nodes = _num_nodes(raw, name)
    relations = _relations(raw, num_nodes, name)
    split = _split_dir(folder, split_type, name)
    nodes = {t: _node_set(raw, t, n, split, name) for t, n in num_nodes.items()}
    graph = HeteroGraph(nodes=nodes, relations=relations, name=name)
    return graph.with_reverse() if reverse else graph
