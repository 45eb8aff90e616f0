"""``synthetic:rmat``: a seeded R-MAT power-law graph with planted communities, built in chunks.

Generator (the recipe of ``shared/baselines/make_rmat.py``, plus communities). Node space is
``2**scale`` raw ids, ``scale = k + L``: the top ``k = ceil(log2 C)`` bits name a community slot,
the low ``L`` bits a node inside it. Each undirected edge descends ``scale`` levels; at every level
it picks a quadrant with probabilities ``a, b, c, d = 0.57, 0.19, 0.19, 0.05`` (src bit = quadrant
row, dst bit = quadrant column)::

    for level in range(scale):            # most significant bit first
        r = uniform()                     # a | b | c | d
        src = 2 * src + (r >= a + b)
        dst = 2 * dst + ((r >= a) ^ (r >= a + b) ^ (r >= a + b + c))

Planting: with probability ``homophily`` the edge's dst takes the src's community bits. Since
``P(src bit = 0) = a + b = a + c = P(dst bit = 0)``, this leaves every node's expected degree
unchanged and only moves edges inside communities (edge homophily ~ ``h + (1 - h) * 0.62**k``).
Raw ids map to nodes through seeded permutations (community slot ``s`` owns a random set of about
``N / 2**k`` nodes; low bits go through a permutation of ``2**L`` folded onto that set), which
breaks R-MAT's id/degree correlation and allows any ``N``. Labels: ``y = slot % C``. Features:
``feature_signal * mu[y] + N(0, I)``, float32, like ``synthetic:sbm``, so a GNN must use the
neighbourhood to do well.

Memory: edges are drawn in chunks of ``chunk_edges`` pairs (int32 ids), then placed into CSR by
a chunked counting sort and deduplicated per block of rows, in place. Peak is about the drawn
pairs (8 B each) + the directed indices (4 B each) + ~100 MB of temporaries, all freed before the
features are written block by block into ``x``. With features (default ``F = 100``) the build
peaks below 2x the final arrays; with ``num_features=0`` the edge build alone is ~3x its small
result (``benchmarks/datasets.py`` measures both). The result is symmetric, without self-loops
or duplicates, so the final directed edge count is somewhat below ``num_edges`` (drawn).

Determinism: the same arguments give identical arrays (chunk ``i`` draws from the seed sequence
``[seed, 1, i]``), on any machine.

Shape legend: ``N`` nodes, ``E`` directed edges, ``F`` features, ``C`` classes, ``S`` slots.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from gnnsys.datasets.splits import fraction_split
from gnnsys.types import Graph

if TYPE_CHECKING:
    from gnnsys.datasets.parquet_write import ProgressFn, TableWriter, Ticker

__all__ = ["rmat", "write_rmat_parquet"]

log = logging.getLogger(__name__)

_FEATURE_ROWS = 1 << 16  # rows of x drawn per step: bounds the float32 temporaries
_DEDUP_EDGES = 1 << 21  # edges per row block in the dedup pass (~50 MB of int64 temporaries)
_BIT_BLOCK = 1 << 15  # pairs per block of the bit loop: keeps its arrays in the CPU cache
_PLACE_PAIRS = 1 << 19  # pairs placed per sort in the counting-sort pass (~50 MB temporaries)
_GROUP = 3  # R-MAT levels drawn per table lookup (4**3 = 64 outcomes)
_TABLE_BITS = 20  # inverse-CDF table of 2**20 entries (1 MiB): probabilities exact to 1e-6
_FOLD_BITS = 2  # raw ids per node ~ 2**_FOLD_BITS: fewer isolated nodes, same heavy tail


def rmat(
    num_nodes: int = 1 << 20,
    avg_degree: float = 20.0,
    num_edges: int | None = None,
    num_classes: int = 8,
    homophily: float = 0.7,
    num_features: int = 100,
    feature_signal: float = 0.15,
    abc: tuple[float, float, float] = (0.57, 0.19, 0.19),
    train: float = 0.1,
    val: float = 0.05,
    test: float = 0.1,
    seed: int = 0,
    chunk_edges: int = 1 << 21,
) -> Graph:
    """Build the R-MAT graph described in the module docstring.

    Args:
        num_nodes: ``N``.
        avg_degree: Directed edges drawn per node, used when ``num_edges`` is None.
        num_edges: Directed edges drawn (twice the undirected draws), before self-loops and
            duplicates are removed; default ``num_nodes * avg_degree``.
        num_classes: ``C`` planted communities / label classes.
        homophily: Probability an edge is forced inside its source's community, in ``[0, 1]``.
        num_features: ``F`` (0 for no features).
        feature_signal: Scale of the class mean in the features.
        abc: R-MAT quadrant probabilities ``a, b, c`` (``d = 1 - a - b - c``).
        train: Fraction of nodes in the train mask; likewise ``val`` and ``test``.
        val: Validation fraction.
        test: Test fraction.
        seed: Seed of everything.
        chunk_edges: Undirected pairs drawn per chunk (memory/speed trade-off only; the output
            depends on it, so keep the default for comparable graphs).

    Returns:
        A symmetric, self-loop-free graph with int32 indices.

    Raises:
        ValueError: On an out-of-range parameter, naming it.
    """
    _check_params(num_nodes, num_classes, homophily, abc, chunk_edges, num_features)
    drawn = _num_drawn(num_nodes, avg_degree, num_edges)
    rng = np.random.default_rng([seed, 0])
    ids = _IdMap.build(num_nodes, num_classes, rng)
    y = ids.slot_N % num_classes
    pairs = _draw_pairs(ids, drawn // 2, homophily, abc, seed, chunk_edges)
    del ids  # frees the raw-id table (64 MiB at products size) before the CSR build
    indptr, indices = _pairs_to_csr(pairs, num_nodes)
    log.debug("rmat: %d nodes, %d directed edges (%d drawn)", num_nodes, indices.shape[0], drawn)
    x = _features(y, num_classes, num_features, feature_signal, rng, seed)
    masks = fraction_split(num_nodes, rng, train, val, test)
    return Graph(
        indptr=indptr,
        indices=indices,
        num_nodes=num_nodes,
        x=x,
        y=y,
        train_mask=masks[0],
        val_mask=masks[1],
        test_mask=masks[2],
        name="synthetic:rmat",
        num_classes_hint=num_classes,
    )


def write_rmat_parquet(
    out: str | os.PathLike[str],
    *,
    num_nodes: int = 1 << 20,
    avg_degree: float = 20.0,
    num_edges: int | None = None,
    num_classes: int = 8,
    homophily: float = 0.7,
    num_features: int = 100,
    feature_signal: float = 0.15,
    abc: tuple[float, float, float] = (0.57, 0.19, 0.19),
    train: float = 0.1,
    val: float = 0.05,
    test: float = 0.1,
    seed: int = 0,
    chunk_edges: int = 1 << 21,
    rows_per_group: int = 1 << 20,
    rows_per_file: int = 1 << 24,
    overwrite: bool = False,
    progress: ProgressFn | None = None,
) -> Path:
    """Write the graph ``rmat(...)`` builds as a Parquet graph directory, chunk by chunk.

    ``load("parquet:OUT")`` gives exactly ``rmat``'s arrays for the same arguments, but the
    graph is never held: each drawn chunk of undirected pairs becomes edge rows in both
    directions (duplicates included; the reader's CSR drops them, as ``rmat``'s does), then
    nodes are written in id order with features drawn block by block. Peak memory is the id map
    and labels (about 40 B per node), one chunk of pairs (16 B per pair, both directions) and
    one row group, so 2**24 nodes fit in a small process.

    Args:
        out: The directory to create (atomically; see ``write_parquet``).
        num_nodes: See :func:`rmat`, like every graph parameter up to ``chunk_edges``.
        avg_degree: See :func:`rmat`.
        num_edges: See :func:`rmat`.
        num_classes: See :func:`rmat`.
        homophily: See :func:`rmat`.
        num_features: See :func:`rmat`.
        feature_signal: See :func:`rmat`.
        abc: See :func:`rmat`.
        train: See :func:`rmat`.
        val: See :func:`rmat`.
        test: See :func:`rmat`.
        seed: See :func:`rmat`.
        chunk_edges: See :func:`rmat` (the graph depends on it).
        rows_per_group: Rows per row group (node groups stay under 64 MiB).
        rows_per_file: Rows per file.
        overwrite: Replace an existing Parquet graph directory at ``out``.
        progress: Called with ``(pairs drawn + nodes written, drawn pairs + N)``.

    Returns:
        ``out`` as a ``Path``.

    Raises:
        ValueError: A parameter out of range, or ``out`` exists (without ``overwrite``).
        DiskError: A write failed; nothing is left behind.
    """
    from gnnsys.datasets import parquet_write as pw

    _check_params(num_nodes, num_classes, homophily, abc, chunk_edges, num_features)
    num_pairs = _num_drawn(num_nodes, avg_degree, num_edges) // 2
    out = Path(out)
    pw.check_sizes(rows_per_group, rows_per_file)
    pw.check_out(out, overwrite)
    rng = np.random.default_rng([seed, 0])  # draws in rmat's order: ids, mu, masks
    ids = _IdMap.build(num_nodes, num_classes, rng)
    y = ids.slot_N % num_classes
    ticker = pw.Ticker(progress, num_pairs + num_nodes)
    sizes = {"rows_per_group": rows_per_group, "rows_per_file": rows_per_file}
    with pw.staged_dir(out, overwrite=overwrite) as tmp:
        chunks = _iter_chunks(ids, num_pairs, homophily, abc, seed, chunk_edges)
        _write_edges(tmp / pw.EDGES_DIR, chunks, num_nodes, sizes, ticker)
        del ids, chunks  # the raw-id table is the largest O(N) array
        recipe = None
        if num_features:
            recipe = _FeatureRecipe(num_classes, num_features, feature_signal, rng, seed)
        masks = fraction_split(num_nodes, rng, train, val, test)
        _write_nodes(tmp / pw.NODES_DIR, y, recipe, masks, sizes, ticker)
        pw.write_meta(tmp, name="synthetic:rmat", num_nodes=num_nodes, num_classes=num_classes)
    return out


def _write_edges(
    folder: Path,
    chunks: Iterator[tuple[int, tuple[np.ndarray, np.ndarray]]],
    num_nodes: int,
    sizes: dict[str, int],
    ticker: Ticker,
) -> None:
    """Each chunk of undirected pairs as edge rows in both directions (duplicates included)."""
    from gnnsys.datasets import parquet_write as pw

    with pw.TableWriter(folder, pw.edge_schema(num_nodes), **sizes) as writer:
        for m, (src, dst) in chunks:
            both = (np.concatenate([src, dst]), np.concatenate([dst, src]))
            writer.write(pw.edge_table(*both, num_nodes))
            ticker.advance(m)


def _write_nodes(
    folder: Path,
    y: np.ndarray,
    recipe: _FeatureRecipe | None,
    masks: tuple[np.ndarray, np.ndarray, np.ndarray],
    sizes: dict[str, int],
    ticker: Ticker,
) -> None:
    """Node rows in id order, features drawn in ``rmat``'s blocks of ``_FEATURE_ROWS`` rows."""
    from gnnsys.datasets import parquet_write as pw

    n = y.shape[0]
    f = 0 if recipe is None else int(recipe.mu_CF.shape[1])
    dtype = None if recipe is None else np.dtype(np.float32)
    schema = pw.node_schema(n, dtype, f, labels=True, masks="split")
    step = pw.node_group_rows(sizes["rows_per_group"], schema)
    writer: TableWriter
    with pw.TableWriter(
        folder, schema, rows_per_group=step, rows_per_file=sizes["rows_per_file"]
    ) as writer:
        for lo in range(0, n, _FEATURE_ROWS):
            hi = min(lo + _FEATURE_ROWS, n)
            x = None
            if recipe is not None:
                x = np.empty((hi - lo, f), dtype=np.float32)
                recipe.fill(x, y[lo:hi])
            block = tuple(m[lo:hi] for m in masks)
            writer.write(pw.node_table(schema, np.arange(lo, hi), x, y[lo:hi], block))
            ticker.advance(hi - lo)


def _num_drawn(num_nodes: int, avg_degree: float, num_edges: int | None) -> int:
    drawn = int(num_nodes * avg_degree) if num_edges is None else int(num_edges)
    if drawn < 0:
        raise ValueError(f"num_edges={drawn}; choose num_edges >= 0 (or avg_degree >= 0)")
    return drawn


def _check_params(
    num_nodes: int,
    num_classes: int,
    homophily: float,
    abc: tuple[float, float, float],
    chunk_edges: int,
    num_features: int,
) -> None:
    if num_classes < 2 or num_nodes < 2 * num_classes:
        raise ValueError(
            f"num_nodes={num_nodes}, num_classes={num_classes}; need num_classes >= 2 and "
            "num_nodes >= 2 * num_classes"
        )
    if num_nodes >= 2**31:
        raise ValueError(f"num_nodes={num_nodes}; synthetic:rmat supports N < 2**31 (int32 ids)")
    if not 0.0 <= homophily <= 1.0:
        raise ValueError(f"homophily={homophily}; choose a value in [0, 1]")
    if len(abc) != 3 or min(abc) < 0 or sum(abc) > 1:
        raise ValueError(f"abc={abc}; need three probabilities >= 0 with a + b + c <= 1")
    if chunk_edges < 1 or num_features < 0:
        raise ValueError(f"chunk_edges={chunk_edges}, num_features={num_features}; need >= 1, >= 0")


class _IdMap:
    """Raw R-MAT id ``(slot, low bits)`` -> node gid, and the community slot of every node.

    Attributes:
        k: Community bits (``S = 2**k`` slots). ``low_bits``: bits of the id inside a slot.
        gid_of_raw: ``[2**scale]`` int32 lookup (one gather per endpoint; 64 MiB at products
            size), so drawing never divides or chases two permutations per edge.
        slot_N: ``[N]`` int64 community slot of every node.
    """

    def __init__(self, k: int, low_bits: int, gid_of_raw: np.ndarray, slot_N: np.ndarray) -> None:
        self.k, self.low_bits = k, low_bits
        self.gid_of_raw = gid_of_raw
        self.slot_N = slot_N

    @classmethod
    def build(cls, num_nodes: int, num_classes: int, rng: np.random.Generator) -> _IdMap:
        """Split ``N`` nodes at random into ``2**ceil(log2 C)`` near-equal slots.

        Slot ``s`` owns ``gid_order[start_S[s] : start_S[s] + size_S[s]]``; a raw id's low bits
        go through a random permutation of ``2**low_bits`` and fold (modulo) onto that set.
        """
        k = max(1, math.ceil(math.log2(num_classes)))
        num_slots = 1 << k
        size_S = np.full(num_slots, num_nodes // num_slots, dtype=np.int64)
        size_S[: num_nodes % num_slots] += 1
        start_S = np.concatenate([[0], np.cumsum(size_S)[:-1]])
        gid_order = rng.permutation(num_nodes).astype(np.int32)
        low_bits = max(1, math.ceil(math.log2(int(size_S.max())))) + _FOLD_BITS
        low_perm = rng.permutation(1 << low_bits).astype(np.int64)
        gid_of_raw = np.empty(num_slots << low_bits, dtype=np.int32)
        slot_N = np.empty(num_nodes, dtype=np.int64)
        for slot in range(num_slots):
            owned = gid_order[start_S[slot] : start_S[slot] + size_S[slot]]
            gid_of_raw[slot << low_bits : (slot + 1) << low_bits] = owned[low_perm % size_S[slot]]
            slot_N[owned] = slot
        return cls(k, low_bits, gid_of_raw, slot_N)

    @property
    def scale(self) -> int:
        """Bits of a raw id."""
        return self.k + self.low_bits

    def to_gid(self, raw: np.ndarray) -> np.ndarray:
        """``[M]`` int32 gids of raw ids."""
        gid: np.ndarray = self.gid_of_raw[raw]
        return gid


def _draw_chunk(
    ids: _IdMap, m: int, homophily: float, abc: tuple[float, float, float], rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``m`` undirected pairs as int32 gids, self-loops removed.

    The bit loop runs over cache-sized blocks: on whole chunks each level would stream the
    arrays through memory ~10 times, which made generation memory-bound (~4x slower).
    """
    src = np.empty(m, dtype=np.int32)
    dst = np.empty(m, dtype=np.int32)
    tables = {g: _level_table(g, abc) for g in range(1, _GROUP + 1)}
    for lo in range(0, m, _BIT_BLOCK):
        hi = min(lo + _BIT_BLOCK, m)
        src[lo:hi], dst[lo:hi] = _draw_raw(ids, hi - lo, homophily, tables, rng)
    src, dst = ids.to_gid(src), ids.to_gid(dst)
    keep = src != dst
    return src[keep], dst[keep]


def _level_table(levels: int, abc: tuple[float, float, float]) -> np.ndarray:
    """Inverse-CDF table drawing ``levels`` R-MAT levels at once.

    Entry ``u`` of the ``[2**_TABLE_BITS]`` uint8 table is the outcome ``src_bits << levels |
    dst_bits`` of the ``u``-th quantile: indexing it with a uniform ``_TABLE_BITS``-bit integer
    samples the ``4**levels`` outcomes with probabilities exact to ``2**-_TABLE_BITS``.
    """
    quad_p = np.array([abc[0], abc[1], abc[2], 1.0 - sum(abc)])
    prob = np.ones(1)
    src_bits = np.zeros(1, dtype=np.int64)
    dst_bits = np.zeros(1, dtype=np.int64)
    for _ in range(levels):  # quadrant q: src bit = q >> 1, dst bit = q & 1 (a, b, c, d order)
        prob = np.outer(prob, quad_p).ravel()
        src_bits = (np.repeat(src_bits, 4) << 1) | np.tile([0, 0, 1, 1], src_bits.shape[0])
        dst_bits = (np.repeat(dst_bits, 4) << 1) | np.tile([0, 1, 0, 1], dst_bits.shape[0])
    bounds = np.round(np.cumsum(prob) / prob.sum() * (1 << _TABLE_BITS)).astype(np.int64)
    counts = np.diff(np.concatenate([[0], bounds]))
    table: np.ndarray = np.repeat((src_bits << levels) | dst_bits, counts).astype(np.uint8)
    return table


def _draw_raw(
    ids: _IdMap, m: int, homophily: float, tables: dict[int, np.ndarray], rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``m`` raw-id pairs: one R-MAT descent each (``_GROUP`` levels per draw), then planting."""
    src = np.zeros(m, dtype=np.int32)
    dst = np.zeros(m, dtype=np.int32)
    for done in range(0, ids.scale, _GROUP):  # most significant bits first
        levels = min(_GROUP, ids.scale - done)
        code = tables[levels][rng.integers(0, 1 << _TABLE_BITS, m, dtype=np.uint32)]
        src <<= levels
        src |= code >> levels
        dst <<= levels
        dst |= code & ((1 << levels) - 1)
    same = rng.random(m, dtype=np.float32) < np.float32(homophily)
    low_mask = np.int32((1 << ids.low_bits) - 1)
    dst[same] = (src[same] & ~low_mask) | (dst[same] & low_mask)
    return src, dst


def _draw_pairs(
    ids: _IdMap,
    num_pairs: int,
    homophily: float,
    abc: tuple[float, float, float],
    seed: int,
    chunk_edges: int,
) -> list[tuple[np.ndarray, np.ndarray]]:
    return [pairs for _, pairs in _iter_chunks(ids, num_pairs, homophily, abc, seed, chunk_edges)]


def _iter_chunks(
    ids: _IdMap,
    num_pairs: int,
    homophily: float,
    abc: tuple[float, float, float],
    seed: int,
    chunk_edges: int,
) -> Iterator[tuple[int, tuple[np.ndarray, np.ndarray]]]:
    """``(pairs drawn, (src, dst))`` per chunk; chunk ``i`` draws from seed ``[seed, 1, i]``."""
    for i, lo in enumerate(range(0, num_pairs, chunk_edges)):
        m = min(chunk_edges, num_pairs - lo)
        yield m, _draw_chunk(ids, m, homophily, abc, np.random.default_rng([seed, 1, i]))


def _pairs_to_csr(
    pairs: list[tuple[np.ndarray, np.ndarray]], num_nodes: int
) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric, deduplicated in-edge CSR from undirected pairs; consumes ``pairs``.

    Pass 1 counts degrees (with duplicates) and places every directed edge in its row by a
    counting sort, one chunk at a time, freeing each chunk once placed. Pass 2 sorts and
    deduplicates blocks of rows, compacting ``indices`` in place (writes never overtake reads).
    """
    deg_N = np.zeros(num_nodes, dtype=np.int64)
    for src, dst in pairs:
        deg_N += np.bincount(src, minlength=num_nodes)
        deg_N += np.bincount(dst, minlength=num_nodes)
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(deg_N, out=indptr[1:])
    indices = np.empty(int(indptr[-1]), dtype=np.int32)
    fill_N = indptr[:-1].copy()
    while pairs:
        src, dst = pairs.pop(0)
        for lo in range(0, src.shape[0], _PLACE_PAIRS):  # slices bound the sort temporaries
            s, d = src[lo : lo + _PLACE_PAIRS], dst[lo : lo + _PLACE_PAIRS]
            _place(np.concatenate([d, s]), np.concatenate([s, d]), indices, fill_N)
        del src, dst
    del fill_N
    new_deg_N = _dedup_rows(indptr, deg_N, indices, num_nodes)
    np.cumsum(new_deg_N, out=indptr[1:])
    return indptr, _shrink(indices, int(indptr[-1]))


def _place(dst: np.ndarray, src: np.ndarray, indices: np.ndarray, fill_N: np.ndarray) -> None:
    """Write ``src`` into each ``dst`` row at the row's fill pointer, then advance the pointers.

    Groups by ``dst`` with one sort of int64 keys ``dst << 32 | src`` (about 2x faster here than
    ``argsort`` plus two gathers).
    """
    key = dst.astype(np.int64) << 32
    key |= src
    key.sort()
    dst_sorted = key >> 32
    starts = np.flatnonzero(np.concatenate([[True], dst_sorted[1:] != dst_sorted[:-1]]))
    counts = np.diff(np.append(starts, key.shape[0]))
    pos = fill_N[dst_sorted]
    pos += np.arange(key.shape[0], dtype=np.int64)
    pos -= np.repeat(starts, counts)
    indices[pos] = key & 0xFFFFFFFF
    fill_N[dst_sorted[starts]] += counts


def _dedup_rows(
    indptr: np.ndarray, deg_N: np.ndarray, indices: np.ndarray, num_nodes: int
) -> np.ndarray:
    """Sort and deduplicate every row, compacting ``indices``; returns the new degrees."""
    new_deg_N = np.zeros(num_nodes, dtype=np.int64)
    out = 0
    r0 = 0
    while r0 < num_nodes:
        r1 = int(np.searchsorted(indptr, indptr[r0] + _DEDUP_EDGES, side="right")) - 1
        r1 = min(max(r1, r0 + 1), num_nodes)
        lo, hi = int(indptr[r0]), int(indptr[r1])
        key = np.repeat(np.arange(r1 - r0, dtype=np.int64), deg_N[r0:r1])
        key *= num_nodes
        key += indices[lo:hi]
        key.sort()  # np.sort + a neighbour mask: np.unique was ~15x slower (numpy 2.4)
        key = key[np.concatenate([[True], key[1:] != key[:-1]])]
        row_u = key // num_nodes
        indices[out : out + key.shape[0]] = key - row_u * num_nodes
        new_deg_N[r0:r1] = np.bincount(row_u, minlength=r1 - r0)
        out += key.shape[0]
        r0 = r1
    return new_deg_N


def _shrink(indices: np.ndarray, length: int) -> np.ndarray:
    """``indices[:length]`` as its own array: in place (realloc) when possible, else a copy."""
    try:
        indices.resize(length, refcheck=True)
    except ValueError:  # another reference exists (e.g. a debugger); copy instead
        copy: np.ndarray = indices[:length].copy()
        return copy
    return indices


def _features(
    y: np.ndarray,
    num_classes: int,
    num_features: int,
    signal: float,
    rng: np.random.Generator,
    seed: int,
) -> np.ndarray | None:
    """``[N, F]`` float32 ``signal * mu[y] + N(0, I)``, filled in place one row block at a time."""
    if num_features == 0:
        return None
    recipe = _FeatureRecipe(num_classes, num_features, signal, rng, seed)
    x = np.empty((y.shape[0], num_features), dtype=np.float32)
    for lo in range(0, y.shape[0], _FEATURE_ROWS):
        hi = min(lo + _FEATURE_ROWS, y.shape[0])
        recipe.fill(x[lo:hi], y[lo:hi])
    return x


class _FeatureRecipe:
    """The features ``signal * mu[y] + N(0, I)``, produced one row block at a time.

    ``mu`` is drawn from ``rng`` on construction (so construct it where ``rmat`` draws it); the
    noise comes from ``torch``'s CPU normal sampler (about 2.5x numpy's here), written straight
    into the block, so the only temporary is one block of ``mu[y]``. The values depend on the
    block boundaries: call :meth:`fill` on consecutive blocks of ``_FEATURE_ROWS`` rows (the
    last may be shorter), in id order, to get exactly the rows ``rmat`` gives.
    """

    def __init__(
        self,
        num_classes: int,
        num_features: int,
        signal: float,
        rng: np.random.Generator,
        seed: int,
    ) -> None:
        mu = rng.standard_normal((num_classes, num_features)).astype(np.float32)
        self.mu_CF = mu * np.float32(signal)
        state = np.random.SeedSequence([seed, 2]).generate_state(1, np.uint64)[0]
        self._gen = torch.Generator().manual_seed(int(state >> np.uint64(1)))

    def fill(self, x_BF: np.ndarray, y_B: np.ndarray) -> None:
        """Write the next block's features into ``x_BF`` (C-contiguous float32 ``[B, F]``)."""
        torch.from_numpy(x_BF).normal_(generator=self._gen)
        x_BF += self.mu_CF[y_B]
