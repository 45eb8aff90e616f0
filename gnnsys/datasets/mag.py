"""``synthetic:mag``: a seeded heterogeneous graph shaped like ogbn-mag, with planted signal.

Node types and relations are ogbn-mag's, in PyG's ``OGB_MAG`` order; counts are ogbn-mag's
times ``scale`` (``scale=1`` is ogbn-mag's size, 1,939,743 nodes and 21.1 M edges)::

    paper           736,389 x scale   x [128] float32, y (venue, 349 classes), year, masks
    author        1,134,649 x scale   no features (as in ogbn-mag)
    institution       8,740 x scale
    field_of_study   59,965 x scale
    (author, affiliated_with, institution)  1,043,998 x scale edges
    (author, writes, paper)                 7,145,660 x scale
    (paper, cites, paper)                   5,416,271 x scale
    (paper, has_topic, field_of_study)      7,505,078 x scale

**Planted signal.** Every paper has a venue ``y``; every author, institution and field has a
home venue drawn from the same skewed (lognormal-weighted) venue distribution. Each edge has a
uniform endpoint (the paper, or the author for ``affiliated_with``) and picks its other endpoint,
with probability ``homophily``, among the nodes of the same venue, else among all nodes; within
either pool the pick is weighted by a lognormal popularity, so degrees are skewed. Paper features
are ``feature_signal * mu[y] + N(0, I)``. A model therefore gets part of the label from a paper's
own features and more from its authors', fields' and cited papers' neighbourhoods.

**Split** (ogbn-mag's ``time`` split): years are drawn with ogbn-mag's proportions; train =
year <= 2017 (85.5 %), valid = 2018 (8.8 %), test = 2019 (5.7 %).

**Cost.** Every step is vectorized: per relation one ``searchsorted`` of ``E`` draws into a
popularity CDF and one sort of ``E`` int64 keys (deduplication); features are filled in blocks of
rows, in float32. Determinism: same arguments -> identical arrays; each part draws from its own
``SeedSequence([seed, part])``, so e.g. ``num_features`` does not change the edges.

Shape legend: ``P`` papers, ``E`` edges of one relation, ``F`` features, ``C`` venues.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gnnsys.types import EdgeType
from gnnsys.types.relations import HeteroGraph, NodeSet, Relation, relation_from_coo

__all__ = ["MAG_EDGE_COUNTS", "MAG_NODE_COUNTS", "load_synthetic_hetero", "synthetic_mag"]

MAG_NODE_COUNTS: dict[str, int] = {
    "paper": 736_389,
    "author": 1_134_649,
    "institution": 8_740,
    "field_of_study": 59_965,
}
"""ogbn-mag's node counts, in PyG's ``OGB_MAG`` node-type order."""

MAG_EDGE_COUNTS: dict[EdgeType, int] = {
    ("author", "affiliated_with", "institution"): 1_043_998,
    ("author", "writes", "paper"): 7_145_660,
    ("paper", "cites", "paper"): 5_416_271,
    ("paper", "has_topic", "field_of_study"): 7_505_078,
}
"""ogbn-mag's edge counts per relation, in PyG's ``OGB_MAG`` edge-type order."""

_YEARS = np.arange(2010, 2020)
_YEAR_P = np.array([0.855 / 8] * 8 + [0.088, 0.057])  # 2010-2017 share 85.5 %, then valid, test
_FEATURE_ROWS = 1 << 16  # rows of x filled per block (float32 temporaries of 32 MB at F=128)


@dataclass(frozen=True, slots=True)
class _Pool:
    """The nodes of one type, grouped by home venue, with their popularity CDF."""

    order: np.ndarray  # node ids sorted by venue
    cdf: np.ndarray  # cumulative popularity in that order
    lo_C: np.ndarray  # cdf value where each venue's group starts
    hi_C: np.ndarray  # ... and ends

    @classmethod
    def build(cls, venue: np.ndarray, num_classes: int, rng: np.random.Generator) -> _Pool:
        order = np.argsort(venue, kind="stable")
        popularity = rng.lognormal(0.0, 1.0, size=(venue.shape[0],))
        cdf = np.cumsum(popularity[order])
        count_C = np.bincount(venue, minlength=num_classes)
        end_C = np.cumsum(count_C)
        cdf0 = np.concatenate([np.zeros(1), cdf])
        return cls(order, cdf, cdf0[end_C - count_C], cdf0[end_C])

    def pick(self, venue_E: np.ndarray, homophily: float, rng: np.random.Generator) -> np.ndarray:
        """One node per draw: from the draw's venue with probability ``homophily``, else any."""
        num = venue_E.shape[0]
        lo, hi = self.lo_C[venue_E], self.hi_C[venue_E]
        same = (rng.random(num) < homophily) & (hi > lo)  # venues without nodes: any node
        u = rng.random(num)
        u = np.where(same, lo + u * (hi - lo), u * self.cdf[-1])
        # searchsorted on sorted queries walks the CDF once (cache-friendly): 2.3 s -> 0.3 s
        # for 3.7 M draws into 600 k nodes, for a 0.9 s argsort.
        by_u = np.argsort(u)
        at = np.empty(num, dtype=np.int64)
        at[by_u] = np.searchsorted(self.cdf, u[by_u], side="right")
        np.minimum(at, self.cdf.shape[0] - 1, out=at)
        out: np.ndarray = self.order[at]
        return out


def _rng(seed: int, part: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, part]))


def _counts(scale: float) -> tuple[dict[str, int], dict[EdgeType, int]]:
    if not scale > 0:
        raise ValueError(f"scale={scale}; choose scale > 0 (1.0 = ogbn-mag's size)")
    nodes = {t: max(1, round(n * scale)) for t, n in MAG_NODE_COUNTS.items()}
    edges = {e: max(1, round(n * scale)) for e, n in MAG_EDGE_COUNTS.items()}
    return nodes, edges


def _features(
    y: np.ndarray, num_classes: int, num_features: int, signal: float, seed: int
) -> np.ndarray | None:
    if num_features == 0:
        return None
    rng = _rng(seed, 9)
    mu = rng.standard_normal((num_classes, num_features), dtype=np.float32)
    mu *= np.float32(signal)
    x = np.empty((y.shape[0], num_features), dtype=np.float32)
    for start in range(0, y.shape[0], _FEATURE_ROWS):
        block = x[start : start + _FEATURE_ROWS]
        rng.standard_normal(block.shape, dtype=np.float32, out=block)
        block += mu[y[start : start + _FEATURE_ROWS]]
    return x


def _papers(num: int, num_classes: int, venue_p: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    rng = _rng(seed, 1)
    y = rng.choice(num_classes, size=num, p=venue_p).astype(np.int64)
    year = rng.choice(_YEARS, size=num, p=_YEAR_P / _YEAR_P.sum()).astype(np.int64)
    return {"y": y, "year": year}


def _relations(
    nodes: dict[str, int],
    edges: dict[EdgeType, int],
    venue: dict[str, np.ndarray],
    num_classes: int,
    homophily: float,
    seed: int,
) -> dict[EdgeType, Relation]:
    """Every relation: a uniform endpoint, the other picked by venue (see the module doc)."""
    pools = {t: _Pool.build(venue[t], num_classes, _rng(seed, 20 + i)) for i, t in enumerate(nodes)}
    relations: dict[EdgeType, Relation] = {}
    for i, ((src, rel, dst), num) in enumerate(edges.items()):
        rng = _rng(seed, 30 + i)
        # the uniform endpoint is the paper (or the author of affiliated_with)
        uniform_side = "src" if src == "author" and dst != "paper" else "dst"
        anchor = dst if uniform_side == "dst" else src
        other = src if uniform_side == "dst" else dst
        anchor_E = rng.integers(0, nodes[anchor], num, dtype=np.int64)
        other_E = pools[other].pick(venue[anchor][anchor_E], homophily, rng).astype(np.int64)
        src_E, dst_E = (other_E, anchor_E) if uniform_side == "dst" else (anchor_E, other_E)
        if src == dst:  # no self-citations
            keep = src_E != dst_E
            src_E, dst_E = src_E[keep], dst_E[keep]
        relations[(src, rel, dst)] = relation_from_coo(
            src_E, dst_E, nodes[src], nodes[dst], dedup=True
        )
    return relations


def synthetic_mag(
    scale: float = 0.01,
    *,
    num_classes: int = 349,
    num_features: int = 128,
    homophily: float = 0.7,
    feature_signal: float = 0.2,
    reverse: bool = False,
    seed: int = 0,
) -> HeteroGraph:
    """An ogbn-mag-shaped heterogeneous graph (see the module docstring).

    Args:
        scale: Node and edge counts relative to ogbn-mag (``0.52`` gives about 1 M nodes).
        num_classes: Venues (paper labels); ogbn-mag has 349.
        num_features: Paper feature width (0: no features); ogbn-mag has 128.
        homophily: Probability that an edge's non-uniform endpoint shares the venue.
        feature_signal: Scale of the venue means in the paper features.
        reverse: Add reverse relations as PyG's ``ToUndirected()`` does (``rev_writes``, ...,
            and ``cites`` symmetrized).
        seed: Seed of every draw.

    Returns:
        The ``HeteroGraph``, ``name="synthetic:mag"``.

    Raises:
        ValueError: Out-of-range parameters.
    """
    if num_classes < 2 or num_features < 0 or not 0.0 <= homophily <= 1.0:
        raise ValueError(
            f"need num_classes >= 2, num_features >= 0 and homophily in [0, 1]; got "
            f"{num_classes}, {num_features}, {homophily}"
        )
    node_counts, edge_counts = _counts(scale)
    weight_C = _rng(seed, 0).lognormal(0.0, 1.0, num_classes)
    venue_p = weight_C / weight_C.sum()
    paper = _papers(node_counts["paper"], num_classes, venue_p, seed)
    venue = {"paper": paper["y"]}
    for i, node_type in enumerate(t for t in node_counts if t != "paper"):
        draw = _rng(seed, 2 + i).choice(num_classes, size=node_counts[node_type], p=venue_p)
        venue[node_type] = draw.astype(np.int64)
    relations = _relations(node_counts, edge_counts, venue, num_classes, homophily, seed)
    year = paper["year"]
    nodes = {
        "paper": NodeSet(
            num_nodes=node_counts["paper"],
            x=_features(paper["y"], num_classes, num_features, feature_signal, seed),
            y=paper["y"],
            train_mask=year <= 2017,
            val_mask=year == 2018,
            test_mask=year == 2019,
            attrs={"year": year},
        ),
        **{t: NodeSet(num_nodes=n) for t, n in node_counts.items() if t != "paper"},
    }
    graph = HeteroGraph(nodes, relations, name="synthetic:mag", num_classes_hint=num_classes)
    return graph.with_reverse() if reverse else graph


def load_synthetic_hetero(variant: str, root: object = None, **params: Any) -> HeteroGraph:
    """Registry entry for heterogeneous ``synthetic:<variant>`` (only ``mag``); ``root`` unused.

    ``num_nodes=N`` (``gnnsys train --num-nodes``, ``-D num_nodes=``, as the homogeneous
    synthetic graphs take it) sizes the graph to about ``N`` nodes of all types: ``scale = N /
    sum(MAG_NODE_COUNTS)``.

    Raises:
        ValueError: Another variant, or both ``num_nodes`` and ``scale``.
    """
    del root
    if variant != "mag":
        raise ValueError(f"unknown heterogeneous synthetic graph {variant!r}; choose 'mag'")
    num_nodes = params.pop("num_nodes", None)
    if num_nodes is not None:
        if "scale" in params:
            raise ValueError(
                f"synthetic:mag got num_nodes={num_nodes} and scale={params['scale']}; "
                "give one of them"
            )
        if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 1:
            raise ValueError(f"num_nodes={num_nodes!r}; give a positive integer")
        params["scale"] = num_nodes / sum(MAG_NODE_COUNTS.values())
    return synthetic_mag(**params)
