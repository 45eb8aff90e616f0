"""Seeded train/val/test splits for datasets that ship without a public one.

Every function takes a ``numpy.random.Generator`` so the caller decides the seed; the same seed
always gives the same masks. Masks are ``[N]`` bool and pairwise disjoint.
"""

from __future__ import annotations

import numpy as np

__all__ = ["fraction_split", "per_class_split"]


def fraction_split(
    num_nodes: int,
    rng: np.random.Generator,
    train: float,
    val: float,
    test: float,
    *,
    eligible_N: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Disjoint random masks holding the given fractions of the eligible nodes.

    Args:
        num_nodes: ``N``.
        rng: Source of randomness (seed it for reproducible splits).
        train: Fraction of eligible nodes in the train mask; likewise ``val`` and ``test``.
        val: Fraction for validation.
        test: Fraction for test.
        eligible_N: ``[N]`` bool, the nodes that may be drawn (e.g. labeled ones); default all.

    Returns:
        ``(train_mask, val_mask, test_mask)``, each ``[N]`` bool.

    Raises:
        ValueError: A fraction is negative or they sum to more than 1.
    """
    if min(train, val, test) < 0 or train + val + test > 1 + 1e-9:
        raise ValueError(
            f"split fractions train={train}, val={val}, test={test} must be >= 0 and sum to <= 1"
        )
    pool = np.arange(num_nodes) if eligible_N is None else np.flatnonzero(eligible_N)
    perm = pool[rng.permutation(pool.shape[0])]
    total = pool.shape[0]
    cuts = np.cumsum([int(train * total), int(val * total), int(test * total)])
    return _masks_from_ranges(num_nodes, perm, cuts)


def per_class_split(
    y_N: np.ndarray,
    rng: np.random.Generator,
    *,
    train_per_class: int = 20,
    num_val: int = 500,
    num_test: int = 1000,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Planetoid-style split: ``train_per_class`` per class, then ``num_val`` and ``num_test``.

    Val and test are drawn uniformly from the labeled nodes left after train. Unlabeled nodes
    (``y == -1``) are never drawn.

    Args:
        y_N: ``[N]`` int64 class labels, ``-1`` for unlabeled.
        rng: Source of randomness.
        train_per_class: Train nodes per class (fewer if a class is smaller).
        num_val: Validation nodes.
        num_test: Test nodes.

    Returns:
        ``(train_mask, val_mask, test_mask)``, each ``[N]`` bool.

    Raises:
        ValueError: Negative sizes, or val + test exceed the labeled nodes left after train.
    """
    if min(train_per_class, num_val, num_test) < 0:
        raise ValueError(
            f"split sizes train_per_class={train_per_class}, num_val={num_val}, "
            f"num_test={num_test} must be >= 0"
        )
    num_nodes = int(y_N.shape[0])
    perm = rng.permutation(num_nodes)
    perm = perm[y_N[perm] >= 0]
    # Rank of each node among the shuffled nodes of its class; the first k of a class train.
    order = np.argsort(y_N[perm], kind="stable")
    sorted_y = y_N[perm][order]
    first = np.searchsorted(sorted_y, sorted_y, side="left")
    rank = np.empty(perm.shape[0], dtype=np.int64)
    rank[order] = np.arange(perm.shape[0]) - first
    train_gid = perm[rank < train_per_class]
    rest = perm[rank >= train_per_class]
    if num_val + num_test > rest.shape[0]:
        raise ValueError(
            f"num_val={num_val} + num_test={num_test} exceed the {rest.shape[0]} labeled nodes "
            "left after the train draw; lower them"
        )
    ordered = np.concatenate([train_gid, rest])
    cuts = np.cumsum([train_gid.shape[0], num_val, num_test])
    return _masks_from_ranges(num_nodes, ordered, cuts)


def _masks_from_ranges(
    num_nodes: int, ordered: np.ndarray, cuts: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    masks = []
    for lo, hi in zip((0, int(cuts[0]), int(cuts[1])), cuts, strict=True):
        mask = np.zeros(num_nodes, dtype=bool)
        mask[ordered[lo:hi]] = True
        masks.append(mask)
    return masks[0], masks[1], masks[2]
