"""Counter-based neighbor draws: which in-edge offsets a destination node takes, reproducibly.

Every random number is a hash of a counter, never the state of a generator, so the draw for a
destination depends only on ``(seed, hop, dst gid, fanout, replace)`` and its degree ``d``; the
caller maps offsets ``r`` in ``[0, d)`` to edges through that node's in-edge list in global CSR
order. Any process (the whole-graph source, a shard owner, a Ray actor) draws the same edges.

Algorithm, per destination with degree ``d`` and fanout ``k`` (``H[i]`` = hash of counter ``i``):

* ``k == -1`` or ``d <= k`` without replacement: every offset ``0 .. d-1``.
* with replacement (``d > 0``): ``r_i = H[i] mod d`` for ``i < k``.
* without replacement, ``d > k``: Robert Floyd's algorithm, ``k`` steps whatever ``d`` is::

      S = []
      for i in 0 .. k-1:
          j = d - k + i
          t = H[i] mod (j + 1)
          S.append(j if t in S else t)

  It is vectorized over destinations: the ``[M, k]`` hash matrix and the bounds are computed in
  one shot; the loop runs ``k`` times over all rows at once, each step an ``O(M * i)`` membership
  test. Cost is ``O(M * k^2)`` and independent of the degree, so hub nodes (R-MAT has degrees in
  the tens of thousands) cost the same as any other node.

The hash is splitmix64's finalizer in numpy ``uint64`` (wrap-around multiplication and logical
shifts are defined there; torch has neither for 64-bit unsigned). ``H mod n`` is computed as
Lemire's multiply-shift of the top 32 bits (``(H >> 32) * n >> 32``): bias below ``n / 2**32``.

Shape legend: ``M`` destinations, ``k`` fanout, ``E`` drawn edges.
"""

from __future__ import annotations

import numpy as np

__all__ = ["batch_seed", "draw_key", "draw_positions", "ragged_range", "splitmix64"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MUL1 = np.uint64(0xBF58476D1CE4E5B9)
_MUL2 = np.uint64(0x94D049BB133111EB)
_MASK64 = (1 << 64) - 1


def splitmix64(x: np.ndarray) -> np.ndarray:
    """Splitmix64 finalizer of ``x`` (uint64, any shape); overwrites and returns ``x``."""
    # One scratch array for the shifts instead of a fresh temporary per step: the temporaries
    # were most of the cost (allocation and page faults on arrays of a few MB).
    tmp = np.empty_like(x)
    x ^= np.right_shift(x, np.uint64(30), out=tmp)
    x *= _MUL1
    x ^= np.right_shift(x, np.uint64(27), out=tmp)
    x *= _MUL2
    x ^= np.right_shift(x, np.uint64(31), out=tmp)
    return x


def _splitmix_int(x: int) -> int:
    """Scalar splitmix64 finalizer on a Python int (same function as ``splitmix64``)."""
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & _MASK64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def _mix_int(*values: int) -> int:
    """Hash a tuple of Python ints into one 64-bit int (a splitmix64 chain)."""
    acc = 0x243F6A8885A308D3  # pi's hex digits: any fixed start
    for value in values:
        acc = _splitmix_int((acc + (value & _MASK64) + 0x9E3779B97F4A7C15) & _MASK64)
    return acc


def batch_seed(base_seed: int, epoch: int, batch_index: int) -> int:
    """The sampling seed of one batch: a deterministic mix of the run seed, epoch and batch.

    The loader and the distributed runtime both call this, so they draw identical batches.

    Args:
        base_seed: Run seed.
        epoch: Epoch index (``>= 0``).
        batch_index: Batch index inside the epoch (``>= 0``).

    Returns:
        A seed in ``[0, 2**63)``.
    """
    return _mix_int(base_seed, epoch, batch_index) >> 1


def draw_key(seed: int, hop: int, fanout: int, replace: bool) -> int:
    """The 64-bit key that, with a dst gid, fixes every random number of one draw."""
    return _mix_int(seed, hop, fanout, int(replace))


def _hashes(gid_M: np.ndarray, key: int, k: int) -> np.ndarray:
    """``[k, M]`` uint64 hashes of ``(key, gid, i)`` for ``i < k`` (counter-major layout)."""
    h_M = gid_M.astype(np.uint64) * _GOLDEN
    h_M += np.uint64(key)
    splitmix64(h_M)
    counter_k = (np.arange(1, k + 1, dtype=np.uint64) * _GOLDEN)[:, None]
    return splitmix64(np.add(h_M[None, :], counter_k))


def _below(hash_kM: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """Uniform ints in ``[0, bound)`` from the hashes' top 32 bits (Lemire's multiply-shift).

    A multiply instead of a 64-bit division; bias below ``bound / 2**32`` (1e-5 at degree 4e4).
    ``bound`` (uint64, broadcast against ``hash_kM``) must be below ``2**32``, which CSR degrees
    are in practice. Overwrites ``hash_kM`` and returns it viewed as int64 (values < ``bound``).
    """
    hash_kM >>= np.uint64(32)
    hash_kM *= bound
    hash_kM >>= np.uint64(32)
    out: np.ndarray = hash_kM.view(np.int64)
    return out


def _floyd(gid_M: np.ndarray, deg_M: np.ndarray, k: int, key: int) -> np.ndarray:
    """``[k, M]`` distinct offsets in ``[0, deg)`` for rows with ``deg > k`` (Floyd's algorithm).

    Rows with ``deg <= k`` come out as garbage (the caller overwrites them): running them
    through the same vectorized steps is cheaper than gathering the other rows out and back.
    """
    # j_i = d - k + i; draw t_i uniform in [0, j_i]. Bounds wrap for rows with d <= k: harmless.
    top_M = deg_M - k
    bound_kM = np.add((top_M + 1).astype(np.uint64)[None, :], _steps(k)[:, None])
    out_kM = _below(_hashes(gid_M, key, k), bound_kM)
    # Row i is final once step i ran. Membership tests column by column: k^2/2 contiguous
    # compares of length M (numpy's any(axis=1) over a short axis is several times slower).
    seen_M = np.empty(gid_M.shape[0], dtype=bool)
    hit_M = np.empty_like(seen_M)
    for i in range(1, k):
        t_M = out_kM[i]
        np.equal(out_kM[0], t_M, out=seen_M)
        for prev in range(1, i):
            seen_M |= np.equal(out_kM[prev], t_M, out=hit_M)
        hit = np.flatnonzero(seen_M)  # few rows: t_i was taken, take j_i (never taken yet)
        t_M[hit] = top_M[hit] + i
    return out_kM


def _steps(k: int) -> np.ndarray:
    return np.arange(k, dtype=np.uint64)


def ragged_range(start_M: np.ndarray, count_M: np.ndarray) -> np.ndarray:
    """``cat([arange(s, s + c) for s, c in zip(start_M, count_M)])`` without a Python loop."""
    total = int(count_M.sum())
    shift_M = start_M - (np.cumsum(count_M) - count_M)
    out: np.ndarray = np.repeat(shift_M, count_M)
    out += np.arange(total, dtype=np.int64)
    return out


def _grouped(pos_kM: np.ndarray, count_M: np.ndarray) -> np.ndarray:
    """The first ``count[m]`` entries of every column ``m``, grouped by destination (``[E]``)."""
    k = pos_kM.shape[0]
    if not (count_M < k).any():
        return np.ascontiguousarray(pos_kM.T).reshape(-1)
    # Transposed views of a mask built with M as the inner axis: one strided pass that
    # transposes and compacts at once (2x faster than a transpose copy, then a mask).
    keep_kM = np.less(np.arange(k)[:, None], count_M[None, :])
    out: np.ndarray = pos_kM.T[keep_kM.T]
    return out


def draw_positions(
    gid_M: np.ndarray,
    start_M: np.ndarray,
    deg_M: np.ndarray,
    fanout: int,
    *,
    key: int,
    replace: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """CSR positions of the drawn in-edges, grouped by destination in request order.

    Pure numpy (single-threaded, releases the GIL inside every array op), so several threads
    can draw disjoint chunks of a request at once; the draw of a row depends only on its own
    ``(gid, deg)``, so chunking never changes the result.

    Args:
        gid_M: ``[M]`` int64 destination gids (they seed the hashes).
        start_M: ``[M]`` int64 position of each destination's first in-edge.
        deg_M: ``[M]`` int64 in-degrees.
        fanout: ``k > 0``, or ``-1`` for every in-edge.
        key: ``draw_key(seed, hop, fanout, replace)``.
        replace: Draw with replacement.

    Returns:
        ``(count_M, pos_E)`` int64: edges drawn per destination and their CSR positions
        (``start + offset``, offset in ``[0, deg)``).
    """
    if fanout == -1:
        return deg_M, ragged_range(start_M, deg_M)
    k = fanout
    if replace:
        count_M = np.where(deg_M > 0, k, 0)
        # Rows with deg 0 draw offset 0 (bound 0) and are dropped by count 0.
        off_kM = _below(_hashes(gid_M, key, k), deg_M.astype(np.uint64)[None, :])
    else:
        count_M = np.minimum(deg_M, k)
        off_kM = _floyd(gid_M, deg_M, k, key)
        short_M = deg_M <= k
        if short_M.any():  # take every in-edge: offsets 0 .. deg-1
            np.copyto(off_kM, np.arange(k, dtype=np.int64)[:, None], where=short_M[None, :])
    off_kM += start_M[None, :]
    return count_M, _grouped(off_kM, count_M)
