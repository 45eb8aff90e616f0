"""Feature transforms before partitioning: ``row`` equals PyG's ``NormalizeFeatures``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnsys.datasets.transforms import FEATURE_NORMS, normalize_rows, per_type_feature_norm
from gnnsys.store.source import DataConfig
from gnnsys.types import Graph


def test_row_norm_equals_pyg(tiny_graph: Graph) -> None:
    from torch_geometric.data import Data
    from torch_geometric.transforms import NormalizeFeatures

    assert tiny_graph.x is not None
    x = np.abs(tiny_graph.x)
    x[3] = 0.0  # an all-zero row stays zero
    graph = Graph(tiny_graph.indptr, tiny_graph.indices, tiny_graph.num_nodes, x=x)
    want = NormalizeFeatures()(Data(x=torch.from_numpy(x.copy()))).x.numpy()
    got = normalize_rows(graph).x
    assert got is not None and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert FEATURE_NORMS["none"](graph) is graph


def test_data_config_checks_the_norm() -> None:
    with pytest.raises(ValueError, match="feature_norm='l1'; choose one of"):
        DataConfig(feature_norm="l1")
    with pytest.raises(ValueError, match="a given store keeps the features"):
        DataConfig(store="runs/x/store", feature_norm="row")
    assert DataConfig(feature_norm="row").feature_norm == "row"


def test_typed_norm_normalises_each_featured_type() -> None:
    from gnnsys.datasets.mag import synthetic_mag

    mag = synthetic_mag(scale=0.002, seed=0)
    normed = per_type_feature_norm(mag, "row")
    for t, nodes in mag.nodes.items():
        if nodes.x is None:
            assert normed.nodes[t].x is None
            continue
        one_type = Graph(np.zeros(nodes.num_nodes + 1, np.int64), np.zeros(0, np.int32),
                         nodes.num_nodes, x=nodes.x)  # fmt: skip
        np.testing.assert_array_equal(normed.nodes[t].x, normalize_rows(one_type).x)
    assert per_type_feature_norm(mag, "none") is mag
    with pytest.raises(ValueError, match="feature_norm='l1'"):
        per_type_feature_norm(mag, "l1")
