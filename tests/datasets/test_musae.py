from __future__ import annotations

from pathlib import Path

import numpy as np

from gnnsys.datasets import load


def test_facebook_counts(shared_root: Path) -> None:
    g = load("musae:facebook", root=shared_root)
    assert (g.num_nodes, g.num_edges, g.num_features, g.num_classes) == (22470, 341646, 4714, 4)
    assert g.x is not None and g.x.dtype == np.float32
    assert int(g.x.sum()) == 314583 and set(np.unique(g.x).tolist()) == {0.0, 1.0}
    assert np.bincount(g.y).tolist() == [6495, 6880, 5768, 3327]
    assert not np.any(g.indices == g.dst_of_edges())
    assert (int(g.train_mask.sum()), int(g.val_mask.sum()), int(g.test_mask.sum())) == (
        13482,
        4494,
        4494,
    )
