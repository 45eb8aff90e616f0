"""``planetoid:cora|citeseer|pubmed`` from the raw Planetoid files, with the public split.

Files (``<root>/planetoid/ind.<name>.<ext>``, kimiyoung/planetoid): ``x``/``tx``/``allx`` are
Python 2 pickles of ``scipy.sparse.csr_matrix`` features, ``y``/``ty``/``ally`` pickled one-hot
``numpy.ndarray`` labels, ``graph`` a pickled ``collections.defaultdict(list)`` adjacency and
``test.index`` a text file of node ids.

Pickles can run arbitrary code on load, so they go through :class:`RestrictedUnpickler`, which
resolves only an explicit allow-list of numpy and scipy.sparse names (plus ``defaultdict`` and
``list`` for ``graph``). A ``csr_matrix`` is rebuilt as a plain :class:`PickledCsr` record, so
scipy need not be installed.

Assembly (as tkipf/gcn and PyG do it): node ``i < len(allx)`` gets ``allx[i]``/``ally[i]``, node
``test_index[i]`` gets ``tx[i]``/``ty[i]``. Nodes in neither (CiteSeer's 15) get zero features and
``y = -1``. Public split: train = ``range(len(y))``, val = the next 500, test = ``test_index``.
PubMed in ``shared/datasets`` lacks ``ind.pubmed.allx``: the loader then keeps the ``x`` rows and
the ``tx`` rows, zeros elsewhere, and logs a warning.

Shape legend: ``N`` nodes, ``F`` features, ``C`` classes.
"""

from __future__ import annotations

import collections
import io
import logging
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gnnsys.datasets.base import csr_to_dense, find_dir, require_file
from gnnsys.types import Graph

__all__ = ["PickledCsr", "RestrictedUnpickler", "load_planetoid"]

log = logging.getLogger(__name__)

VARIANTS = ("cora", "citeseer", "pubmed")
NUM_VAL = 500
HOW_TO_GET = (
    "Copy the ind.<name>.* files of https://github.com/kimiyoung/planetoid (data/) into "
    "<root>/planetoid/."
)


@dataclass(slots=True)
class PickledCsr:
    """What a pickled ``scipy.sparse.csr_matrix`` holds; built by the restricted unpickler.

    Attributes:
        data: ``[nnz]`` values. ``indices``: ``[nnz]`` column ids. ``indptr``: ``[R + 1]``.
        shape: ``(R, F)``.
    """

    data: np.ndarray
    indices: np.ndarray
    indptr: np.ndarray
    shape: tuple[int, int]

    def __setstate__(self, state: Any) -> None:
        """Take the matrix arrays from scipy's pickled ``__dict__`` and ignore the rest."""
        if not isinstance(state, dict) or not {"data", "indices", "indptr", "_shape"} <= set(state):
            raise pickle.UnpicklingError("csr_matrix state lacks data/indices/indptr/_shape")
        for key in ("data", "indices", "indptr"):
            if not isinstance(state[key], np.ndarray):
                raise pickle.UnpicklingError(f"csr_matrix.{key} is not a numpy array")
        self.data, self.indices, self.indptr = state["data"], state["indices"], state["indptr"]
        self.shape = (int(state["_shape"][0]), int(state["_shape"][1]))

    def to_dense(self) -> np.ndarray:
        """``[R, F]`` float32 dense matrix."""
        return csr_to_dense(self.data, self.indices, self.indptr, self.shape)


def _numpy_core(name: str) -> Any:
    """``numpy._core.multiarray.<name>`` (``numpy.core`` in the pickles is its old alias)."""
    try:
        from numpy._core import multiarray
    except ImportError:  # numpy < 2
        from numpy.core import multiarray  # type: ignore[no-redef]
    return getattr(multiarray, name)


_ALLOWED: dict[tuple[str, str], Any] = {
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("numpy.core.multiarray", "_reconstruct"): None,  # resolved lazily by _numpy_core
    ("numpy._core.multiarray", "_reconstruct"): None,
    ("numpy.core.multiarray", "scalar"): None,
    ("numpy._core.multiarray", "scalar"): None,
    ("scipy.sparse.csr", "csr_matrix"): PickledCsr,
    ("scipy.sparse._csr", "csr_matrix"): PickledCsr,
    ("scipy.sparse", "csr_matrix"): PickledCsr,
    ("collections", "defaultdict"): collections.defaultdict,
    ("__builtin__", "list"): list,  # the default factory of ``graph`` (Python 2 name)
    ("builtins", "list"): list,
}


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickler that resolves only the names Planetoid files need; anything else raises.

    Allowed: ``numpy.ndarray``, ``numpy.dtype``, numpy's ``_reconstruct``/``scalar``,
    ``scipy.sparse`` ``csr_matrix`` (rebuilt as :class:`PickledCsr`), ``collections.defaultdict``
    and ``list``. Pickle builds a ``csr_matrix`` with ``PickledCsr.__new__`` and fills it with
    :meth:`PickledCsr.__setstate__`, so no scipy code runs. Python 2 pickles need
    ``encoding="latin1"``, the default here.
    """

    def __init__(self, file: io.BufferedIOBase, *, encoding: str = "latin1") -> None:
        super().__init__(file, encoding=encoding)

    def find_class(self, module: str, name: str) -> Any:
        """Resolve ``module.name`` if allowed, else raise ``pickle.UnpicklingError``."""
        if (module, name) not in _ALLOWED:
            raise pickle.UnpicklingError(
                f"refusing to load {module}.{name}: Planetoid pickles may only reference "
                "numpy arrays, scipy.sparse csr_matrix and collections.defaultdict"
            )
        target = _ALLOWED[(module, name)]
        return _numpy_core(name) if target is None else target


def restricted_load(path: Path) -> Any:
    """Unpickle ``path`` with :class:`RestrictedUnpickler`."""
    with path.open("rb") as f:
        return RestrictedUnpickler(f).load()


def _one_hot_labels(onehot: Any, path: Path) -> np.ndarray:
    if not isinstance(onehot, np.ndarray) or onehot.ndim != 2:
        raise ValueError(f"{path} holds {type(onehot).__name__}, expected a 2-D one-hot array")
    labels: np.ndarray = onehot.argmax(axis=1).astype(np.int64)
    labels[onehot.sum(axis=1) == 0] = -1
    return labels


def _features(obj: Any, path: Path) -> np.ndarray:
    if not isinstance(obj, PickledCsr):
        raise ValueError(f"{path} holds {type(obj).__name__}, expected a csr_matrix")
    return obj.to_dense()


def _edges(graph: Any, path: Path) -> tuple[np.ndarray, int]:
    """COO ``[2, E]`` from the adjacency dict (vectorized over its lists) and ``N``."""
    if not isinstance(graph, dict):
        raise ValueError(f"{path} holds {type(graph).__name__}, expected a dict of lists")
    keys = np.fromiter(graph.keys(), dtype=np.int64, count=len(graph))
    lengths = np.fromiter(map(len, graph.values()), dtype=np.int64, count=len(graph))
    dst = np.fromiter(
        (v for nbrs in graph.values() for v in nbrs), dtype=np.int64, count=int(lengths.sum())
    )
    num_nodes = max(len(graph), int(keys.max()) + 1, int(dst.max(initial=-1)) + 1)
    return np.stack([np.repeat(keys, lengths), dst]), num_nodes


def load_planetoid(variant: str, root: Path | None = None, **params: Any) -> Graph:
    """Load ``planetoid:<variant>`` with the public split.

    Args:
        variant: ``cora``, ``citeseer`` or ``pubmed``.
        root: Data root holding ``planetoid/``; see :func:`gnnsys.datasets.base.find_dir`.
        **params: None accepted.

    Returns:
        A symmetric, self-loop-free graph with float32 features and int64 labels (-1 unlabeled).

    Raises:
        ValueError: Unknown variant or unexpected parameters.
        DatasetNotFoundError: The files are missing.
        pickle.UnpicklingError: A file references a name outside the allow-list.
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown planetoid dataset {variant!r}; choose one of {VARIANTS}")
    if params:
        raise ValueError(f"planetoid takes no parameters, got {sorted(params)}")
    name = f"planetoid:{variant}"
    folder = find_dir(root, "planetoid", name)

    def part(ext: str) -> Any:
        return restricted_load(require_file(folder / f"ind.{variant}.{ext}", name, HOW_TO_GET))

    edge_index, num_nodes = _edges(part("graph"), folder / f"ind.{variant}.graph")
    test_path = require_file(folder / f"ind.{variant}.test.index", name, HOW_TO_GET)
    test_gid = np.loadtxt(test_path, dtype=np.int64, ndmin=1)
    x_train = _features(part("x"), folder / f"ind.{variant}.x")
    y_train = _one_hot_labels(part("y"), folder / f"ind.{variant}.y")
    x_test = _features(part("tx"), folder / f"ind.{variant}.tx")
    ty = part("ty")
    y_test = _one_hot_labels(ty, folder / f"ind.{variant}.ty")
    y_all = _one_hot_labels(part("ally"), folder / f"ind.{variant}.ally")
    num_classes = int(ty.shape[1])

    x = np.zeros((num_nodes, x_test.shape[1]), dtype=np.float32)
    y = np.full(num_nodes, -1, dtype=np.int64)
    allx_path = folder / f"ind.{variant}.allx"
    if allx_path.is_file():
        x_all = _features(restricted_load(allx_path), allx_path)
        x[: x_all.shape[0]] = x_all
    else:
        x[: x_train.shape[0]] = x_train
        log.warning(
            "%s: %s is missing, so only %d of %d nodes have features (the %d train rows and "
            "the %d test rows); the other rows are zero. Use it for structure, or with "
            "substitute features, not for feature-based accuracy.",
            name, allx_path, x_train.shape[0] + x_test.shape[0], num_nodes,
            x_train.shape[0], x_test.shape[0],
        )  # fmt: skip
    y[: y_all.shape[0]] = y_all
    x[test_gid] = x_test
    y[test_gid] = y_test
    return _assemble(name, edge_index, num_nodes, x, y, y_train.shape[0], test_gid, num_classes)


def _assemble(
    name: str,
    edge_index: np.ndarray,
    num_nodes: int,
    x: np.ndarray,
    y: np.ndarray,
    num_train: int,
    test_gid: np.ndarray,
    num_classes: int,
) -> Graph:
    train_mask = np.zeros(num_nodes, dtype=bool)
    train_mask[:num_train] = True
    val_mask = np.zeros(num_nodes, dtype=bool)
    val_mask[num_train : num_train + NUM_VAL] = True
    test_mask = np.zeros(num_nodes, dtype=bool)
    test_mask[test_gid] = True
    return Graph.from_edge_index(
        edge_index,
        num_nodes,
        symmetric=True,
        self_loops=False,
        x=x,
        y=y,
        train_mask=train_mask,
        val_mask=val_mask,
        test_mask=test_mask,
        name=name,
        num_classes_hint=num_classes,
    )
