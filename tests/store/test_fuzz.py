"""Seeded store fuzzer: every mutation of a small store ends in a readable PartitionStoreError.

The mutations (``store_mutations.MUTATIONS``) are bit flips in data and headers, truncations,
appended bytes, swapped and deleted files, hand edits of the manifest, and foreign writes that
update every checksum but break the content. Each one must be refused by what training loads
(``read_manifest`` + ``load_book`` + ``load_shard`` of every part) and by ``verify``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from store_mutations import MUTATIONS, FuzzCounts, classify, load_like_train, run_fuzz, small_store


@pytest.fixture(scope="module")
def base_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_store(tmp_path_factory.mktemp("fuzz") / "store")


def test_intact_store_loads(base_store: Path) -> None:
    load_like_train(base_store)


@pytest.mark.slow  # CI: test_every_mutation_kind_is_detected, 8 of each kind
def test_fuzz_200_mutations(base_store: Path, tmp_path: Path) -> None:
    counts = run_fuzz(base_store, tmp_path, 200, seed=0)
    report = "\n".join(counts.accepted + counts.other + counts.unreadable)
    assert not counts.accepted and not counts.other and not counts.unreadable, report
    assert counts.detected == 200


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_every_mutation_kind_is_detected(base_store: Path, tmp_path: Path, name: str) -> None:
    counts = FuzzCounts()
    for i in range(8):
        root = tmp_path / f"m{i}"
        shutil.copytree(base_store, root)
        classify(root, MUTATIONS[name](root, np.random.default_rng(i)), counts)
    assert counts.detected == 8, counts
