"""Stores written before the store modules merged still load, and equal a fresh write.

``format3/`` holds two small stores written on 2026-12-07 by ``gnnsys partition`` at commit
30badc3, before ``store/hetero_layout.py`` and ``store/hetero_shard.py`` became
``store/manifest.py`` and ``store/shard.py``:

- ``one-type``: ``gnnsys partition synthetic:sbm -D num_nodes=48 -D num_features=4 --parts 2
  --method random``;
- ``typed``: ``gnnsys partition synthetic:mag -D scale=0.0003 -D num_features=4
  -D num_classes=4 --parts 2 --method random``.

Each is verified in full (every sha256 and semantic check), every shard is read, and a fresh
write of the same dataset today gives the same integer files byte for byte and the same
float rows within rounding (features are generated on this machine's CPU; they are compared
with a tolerance, never bit for bit against another machine's).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from gnnsys.cli import main
from gnnsys.store import read_shard, read_store_manifest, verify

FORMAT3 = Path(__file__).parent / "format3"
WRITTEN = {
    "one-type": ["synthetic:sbm", "-D", "num_nodes=48", "-D", "num_features=4"],
    "typed": ["synthetic:mag", "-D", "scale=0.0003", "-D", "num_features=4", "-D",
              "num_classes=4"],
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(WRITTEN))
def test_a_store_written_before_the_merge_loads_and_equals_a_fresh_write(
    name: str, tmp_path: Path
) -> None:
    old = FORMAT3 / name
    manifest = verify(old)
    assert read_store_manifest(old).num_parts == manifest.num_parts == 2
    for part in range(2):
        shard = read_shard(old, part)
        assert set(shard.nodes) == {t.name for t in manifest.node_types}
        assert set(shard.relations) == {r.edge_type for r in manifest.relations}
    fresh = tmp_path / name
    argv = ["partition", *WRITTEN[name], "--parts", "2", "--method", "random", "--out"]
    assert main([*argv, str(fresh)]) == 0
    new = verify(fresh)
    assert sorted(new.files) == sorted(manifest.files)
    assert (new.kind, new.fingerprint) == (manifest.kind, manifest.fingerprint)
    for path, entry in manifest.files.items():
        if np.dtype(entry.dtype).kind == "f":
            torch.testing.assert_close(
                torch.from_numpy(np.load(fresh / path, allow_pickle=False)),
                torch.from_numpy(np.load(old / path, allow_pickle=False)),
                rtol=1e-5,
                atol=1e-6,
            )
        else:
            assert new.files[path].sha256 == entry.sha256, path
    old_json = json.loads((old / "manifest.json").read_text())
    assert old_json["format_version"] == 3
