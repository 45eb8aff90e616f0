"""Sampled remote fetches: how many sampled nodes another part owns, over one epoch.

``gnnsys bench partition`` scores each partition by it (``remote_fetches_per_epoch``): every
part batches its own train seeds, samples them and counts the sampled nodes it does not own.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["simulate_remote_fetches"]


def simulate_remote_fetches(
    engine: Any,
    owner_of: dict[str, np.ndarray],
    train_of: dict[str, np.ndarray | None],
    num_parts: int,
    batch_size: int,
    seed: int,
) -> dict[str, int]:
    """Remote sampled nodes per type, over one epoch of every part's train-seed batches.

    Args:
        engine: The sampler's ``FanoutEngine`` (``NeighborSampler(...).engine`` for a graph,
            ``RelationalSampler(...).engine`` for a typed one).
        owner_of: Node type -> ``[N_t]`` part of every node.
        train_of: Node type -> ``[N_t]`` train mask; ``None``: the type has no seeds.
        num_parts: ``P``.
        batch_size: Seeds per batch.
        seed: Seed of the seed order and of the draws.
    """
    from gnnsys.sampler import batch_seed

    rng = np.random.default_rng(seed)
    total = dict.fromkeys(owner_of, 0)
    for input_type, owner in owner_of.items():
        train = train_of[input_type]
        if train is None:
            continue
        for part in range(num_parts):
            seeds = rng.permutation(np.flatnonzero((owner == part) & train)).astype(np.int64)
            for b, lo in enumerate(range(0, seeds.shape[0], batch_size)):
                key = batch_seed(seed, 0, part * 1_000_003 + b)
                sub = engine.run({input_type: seeds[lo : lo + batch_size]}, key)
                for t, n_id in sub.n_id.items():
                    total[t] += int(np.count_nonzero(owner_of[t][n_id.numpy()] != part))
    return total
