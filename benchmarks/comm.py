"""Communication simulation of the halo cache (no Ray): remote vertices and bytes per epoch.

For each part of a METIS partition, every epoch's batches of that part's train seeds are sampled
once; the non-owned gids of each batch's ``n_id`` are the halo rows the worker needs. The same
traces are then replayed through ``HaloFetcher`` + ``HaloCache`` (real encoding, real policies,
an in-process ``LocalFeatureSource``) for every policy x cache ratio x codec, so all
configurations see identical accesses. Policies:

- ``none``: no cache (the DistDGL-equivalent baseline with ``fp32``);
- ``degree``: static top halo nodes by in-edges into the part;
- ``presample``: static top halo nodes by accesses in one dry-run epoch (its own seeds);
- ``presample-analytic``: static, by SALIENT++-style vertex-inclusion probabilities;
- ``adaptive``: online decayed counts, warm-started from presample scores (the analytic ones
  by default, ``--adaptive-warm dryrun`` for the dry-run counts).

Scores are tie-broken: dry-run and analytic presample by degree, degree (in-edges into the part)
by global in-degree, so nodes two or three hops out still rank.

Static caches and adaptive's warm start are prefetched before epoch 0 (``prefetch_*`` fields);
the ``*_per_epoch`` figures are the mean over the measured epochs. The cache budget is
``ratio x`` the part's own fp32 feature bytes; a smaller codec therefore caches more rows.

Usage (one JSON line per configuration, then one summary line per dataset)::

    flock /tmp/gnnsys-heavy.lock .venv/bin/python benchmarks/comm.py --dataset synthetic:rmat
    .venv/bin/python benchmarks/comm.py --dataset musae:facebook --fanouts 15,10 --ratios 0.25
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gnnsys.cache import (
    AdaptiveAdmission,
    HaloCache,
    HaloFetcher,
    LocalFeatureSource,
    degree_scores,
    inclusion_scores,
    make_codec,
    make_policy,
    presample_scores,
    tie_break,
)
from gnnsys.cache.codecs import AutoCodec
from gnnsys.types import Graph, SampledSubgraph

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared"
CACHE_DIR = Path("/tmp/gnnsys-comm-cache")
MARGIN = 1.0
ADAPTIVE_WARM = "analytic"
BASELINE_RMAT = False


# ---- datasets -----------------------------------------------------------------------------------
def load_rmat(scale: int, feature_dim: int, train_frac: float, seed: int) -> Graph:
    """gnnsys's R-MAT, or (``--baseline-rmat``, or before it existed) make_rmat.py + Gaussian x."""
    from gnnsys.datasets.synthetic import GENERATORS

    if "rmat" in GENERATORS and not BASELINE_RMAT:
        # gnnsys's R-MAT has planted communities and its own features and splits
        return GENERATORS["rmat"](num_nodes=1 << scale, num_features=feature_dim, train=train_frac,
                                  seed=seed)  # fmt: skip
    else:
        spec = importlib.util.spec_from_file_location(
            "make_rmat", SHARED / "baselines/make_rmat.py"
        )
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        n = 1 << scale
        src, dst = mod.rmat_edges(scale, 10 * n, seed)
        indptr, indices = mod.to_csr(n, src, dst)
    n = indptr.shape[0] - 1
    rng = np.random.default_rng(seed)
    x = np.empty((n, feature_dim), dtype=np.float32)
    for start in range(0, n, 1 << 16):  # chunked: no float64 temporary of the whole matrix
        stop = min(n, start + (1 << 16))
        x[start:stop] = rng.standard_normal((stop - start, feature_dim), dtype=np.float32)
    train = np.zeros(n, dtype=bool)
    train[rng.permutation(n)[: int(train_frac * n)]] = True
    return Graph(
        indptr=indptr.astype(np.int64),
        indices=indices.astype(np.int32),
        num_nodes=n,
        x=x,
        train_mask=train,
        name=f"synthetic:rmat{scale}",
    )


def load_facebook(train_frac: float, seed: int) -> Graph:
    """musae:facebook from gnnsys.datasets once registered, else parsed from shared/datasets."""
    import gnnsys.datasets

    if "musae" in gnnsys.datasets.DATASETS:
        return gnnsys.datasets.load("musae:facebook")
    root = SHARED / "datasets" / "musae_facebook"
    edges = np.loadtxt(root / "facebook_edges.csv", delimiter=",", skiprows=1, dtype=np.int64)
    feats = json.loads((root / "facebook_features.json").read_text())
    n = 22470
    x = np.zeros((n, 4714), dtype=np.float32)
    for node, ids in feats.items():
        x[int(node), ids] = 1.0
    with open(root / "facebook_target.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    classes = sorted({r["page_type"] for r in rows})
    y = np.full(n, -1, dtype=np.int64)
    for r in rows:
        y[int(r["id"])] = classes.index(r["page_type"])
    rng = np.random.default_rng(seed)
    train = np.zeros(n, dtype=bool)
    train[rng.permutation(n)[: int(train_frac * n)]] = True
    return Graph.from_edge_index(
        edges.T, n, symmetric=True, self_loops=False, x=x, y=y, train_mask=train,
        name="musae:facebook",
    )  # fmt: skip


def load_graph(name: str, args: argparse.Namespace) -> Graph:
    if name == "synthetic:rmat":
        return load_rmat(args.rmat_scale, args.feature_dim, args.train_frac, args.seed)
    if name == "musae:facebook":
        return load_facebook(args.train_frac, args.seed)
    import gnnsys.datasets

    return gnnsys.datasets.load(name)


def metis_parts(graph: Graph, num_parts: int, seed: int) -> np.ndarray:
    """METIS assignment, cached under /tmp (the 1M-node partition takes about a minute)."""
    CACHE_DIR.mkdir(exist_ok=True)
    path = CACHE_DIR / f"{graph.name.replace(':', '_')}-{graph.num_nodes}-{num_parts}-{seed}.npy"
    if path.exists():
        return np.load(path)
    from gnnsys.partitioners import partition

    part_N = partition(graph, "metis", num_parts, seed=seed).part_N
    np.save(path, part_N)
    return part_N


# ---- sampling -----------------------------------------------------------------------------------
class UniformSampler:
    """Fallback sampler: per hop, ``fanout`` uniform draws with replacement, deduplicated."""

    def __init__(self, indptr: np.ndarray, indices: np.ndarray, fanouts: tuple[int, ...]):
        self.indptr = torch.from_numpy(indptr)
        self.indices = torch.from_numpy(indices.astype(np.int64))
        self.fanouts = fanouts

    def sample(self, seed_gid: torch.Tensor, *, seed: int) -> SampledSubgraph:
        gen = torch.Generator().manual_seed(seed)
        seen, frontier = [seed_gid], seed_gid
        known = seed_gid
        for fanout in self.fanouts:
            start, deg = self.indptr[frontier], self.indptr[frontier + 1] - self.indptr[frontier]
            has = deg > 0
            start, deg = start[has].repeat_interleave(fanout), deg[has].repeat_interleave(fanout)
            pick = (torch.rand(deg.shape, generator=gen, dtype=torch.float64) * deg).long()
            nbr = torch.unique(self.indices[start + pick])
            frontier = nbr[~torch.isin(nbr, known)]
            known = torch.cat([known, frontier])
            seen.append(frontier)
        n_id = torch.cat(seen)
        return SampledSubgraph(n_id, (), int(seed_gid.shape[0]), (int(n_id.shape[0]),), (0,))


def make_sampler(graph: Graph, fanouts: tuple[int, ...]) -> tuple[Any, str]:
    try:
        from gnnsys.sampler import CSRNeighborSource, NeighborSampler
    except ImportError:
        return UniformSampler(graph.indptr, graph.indices, fanouts), "bench-uniform"
    cfg = NeighborSampler.Config(fanouts=fanouts)
    return NeighborSampler(
        cfg, source=CSRNeighborSource.from_graph(graph)
    ), "gnnsys.NeighborSampler"


def halo_traces(
    sampler: Any, train_gid: torch.Tensor, owned_N: torch.Tensor, args: argparse.Namespace
) -> list[list[torch.Tensor]]:
    """Per measured epoch, per batch: the non-owned gids of the batch's ``n_id``."""
    epochs = []
    for epoch in range(args.epochs):
        gen = torch.Generator().manual_seed(args.seed * 7919 + 1000 + epoch)
        perm = train_gid[torch.randperm(train_gid.shape[0], generator=gen)]
        batches = []
        for b, start in enumerate(range(0, perm.shape[0], args.batch_size)):
            n_id = sampler.sample(
                perm[start : start + args.batch_size], seed=(epoch + 1) * 100_003 + b
            ).n_id
            batches.append(n_id[~owned_N[n_id]])
        epochs.append(batches)
    return epochs


# ---- replay -------------------------------------------------------------------------------------
class Part:
    """What one simulated worker needs: its ownership mask, scores, traces and feature source."""

    def __init__(self, graph: Graph, x: torch.Tensor, part_N: torch.Tensor, p: int, sampler: Any,
                 args: argparse.Namespace) -> None:  # fmt: skip
        self.owned_N = part_N == p
        owned_gid = torch.nonzero(self.owned_N).flatten()
        train = torch.from_numpy(graph.train_mask) & self.owned_N
        self.train_gid = torch.nonzero(train).flatten()
        indptr = torch.from_numpy(graph.indptr)
        in_degree = indptr[1:] - indptr[:-1]
        deg = in_degree[owned_gid]
        starts = torch.repeat_interleave(indptr[owned_gid], deg)
        offs = torch.arange(int(deg.sum())) - torch.repeat_interleave(
            torch.cumsum(deg, 0) - deg, deg
        )
        src = torch.from_numpy(graph.indices.astype(np.int64))[starts + offs]
        # In-edges into this part first; global in-degree orders the rest (nodes 2-3 hops out
        # have no edge into the part but are sampled too), owned gids stay 0.
        self.degree = tie_break(degree_scores(src, owned_gid, graph.num_nodes), in_degree)
        self.degree[self.owned_N] = 0.0
        counts = presample_scores(
            sampler, self.train_gid, self.owned_N, batch_size=args.batch_size, seed=args.seed
        )
        self.presample = tie_break(counts, self.degree)
        self.presample[self.owned_N] = 0.0
        self.analytic = tie_break(
            inclusion_scores(graph.indptr, graph.indices, self.train_gid, self.owned_N,
                             fanouts=args.fanout_tuple, batch_size=args.batch_size),
            self.degree,
        )  # fmt: skip
        self.analytic[self.owned_N] = 0.0
        self.traces = halo_traces(sampler, self.train_gid, self.owned_N, args)
        self.owned_bytes = int(owned_gid.shape[0]) * x.shape[1] * 4
        self.source = LocalFeatureSource(x, part_N, p)


def run_config(parts: list[Part], policy: str, ratio: float, codec: Any, feature_dim: int,
               wire: str | None, decay: float) -> dict[str, Any]:  # fmt: skip
    totals: dict[str, float] = {}
    hits = misses = cache_rows = 0
    epochs = len(parts[0].traces)
    t0 = time.perf_counter()
    for part in parts:
        warm = part.analytic if ADAPTIVE_WARM == "analytic" else part.presample
        scores = {"degree": part.degree, "presample-analytic": part.analytic, "adaptive": warm}
        score = scores.get(policy, part.presample)
        name = policy.removesuffix("-analytic")  # the analytic variant is a presample policy
        config = AdaptiveAdmission.Config(decay=decay, margin=MARGIN)
        pol = make_policy(name, score_N=score, owned_N=part.owned_N, config=config)
        cfg = HaloCache.Config.from_ratio(ratio, owned_feature_bytes=part.owned_bytes, policy=name)
        cache = HaloCache(cfg, feature_dim=feature_dim, codec=codec, policy=pol)
        fetcher = HaloFetcher(cache, part.source, codec, wire=wire)
        fetcher.warm_up()
        cache.reset_stats()
        for batches in part.traces:
            for gid in batches:
                fetcher.gather(gid)
        s = fetcher.stats
        for key in ("rows_fetched", "bytes_received", "bytes_wire", "bytes_fp32", "prefetch_rows",
                    "prefetch_bytes"):  # fmt: skip
            totals[key] = totals.get(key, 0) + getattr(s, key)
        hits, misses = hits + cache.stats.hits, misses + cache.stats.misses
        cache_rows += cache.capacity_rows
    return {
        "policy": policy,
        "ratio": ratio,
        "codec": codec.name,
        "wire": wire or "none",
        "remote_vertices_per_epoch": totals["rows_fetched"] / epochs,
        "remote_feature_bytes_per_epoch": totals["bytes_received"] / epochs,
        "wire_bytes_per_epoch": totals["bytes_wire"] / epochs,
        "hit_rate": round(hits / max(hits + misses, 1), 4),
        "cache_rows": cache_rows,
        "prefetch_rows": totals["prefetch_rows"],
        "prefetch_bytes": totals["prefetch_bytes"],
        "fp32_nocache_bytes_per_epoch": totals["bytes_fp32"] / epochs,
        "replay_seconds": round(time.perf_counter() - t0, 2),
    }


def resolve_codec(name: str, x: torch.Tensor) -> Any:
    if name == "auto":
        return AutoCodec().resolve(x)
    return make_codec(name)


def bench_dataset(name: str, args: argparse.Namespace) -> None:
    t0 = time.perf_counter()
    graph = load_graph(name, args)
    assert graph.x is not None and graph.train_mask is not None, f"{name} needs x and train_mask"
    part_N = torch.from_numpy(metis_parts(graph, args.parts, args.seed).astype(np.int64))
    fanouts = tuple(
        int(f) for f in (args.fanouts or ("15,10,5" if "rmat" in name else "15,10")).split(",")
    )
    args.fanout_tuple = fanouts
    sampler, sampler_name = make_sampler(graph, fanouts)
    x = torch.from_numpy(graph.x)
    parts = [Part(graph, x, part_N, p, sampler, args) for p in range(args.parts)]
    setup_s = time.perf_counter() - t0
    common = {"dataset": name, "num_nodes": graph.num_nodes, "num_edges": graph.num_edges,
              "feature_dim": int(x.shape[1]), "parts": args.parts, "partitioner": "metis",
              "fanouts": list(fanouts), "batch_size": args.batch_size, "epochs": args.epochs,
              "sampler": sampler_name, "train_seeds": int(sum(p.train_gid.shape[0] for p in parts)),
              "setup_seconds": round(setup_s, 1)}  # fmt: skip
    rows = []
    for codec_name in args.codecs.split(","):
        codec = resolve_codec(codec_name, x)
        for policy in args.policies.split(","):
            for ratio in [0.0] if policy == "none" else [float(r) for r in args.ratios.split(",")]:
                row = {
                    **common,
                    **run_config(
                        parts, policy, ratio, codec, int(x.shape[1]), args.wire, args.decay
                    ),
                }
                row["codec_requested"] = codec_name
                rows.append(row)
                print(json.dumps(row), flush=True)
    summarize(name, rows)


def summarize(name: str, rows: list[dict[str, Any]]) -> None:
    base = next((r for r in rows if r["policy"] == "none" and r["codec"] == "fp32"), None)
    if base is None:
        return
    base_b, base_v = base["remote_feature_bytes_per_epoch"], base["remote_vertices_per_epoch"]
    best = min(
        (r for r in rows if r["ratio"] <= 0.25), key=lambda r: r["remote_feature_bytes_per_epoch"]
    )
    amortized = best["remote_feature_bytes_per_epoch"] + best["prefetch_bytes"] / best["epochs"]
    per_policy = {}
    for r in rows:
        if r["codec"] == "fp32":
            key = f"{r['policy']}@{r['ratio']}"
            per_policy[key] = round(base_v / max(r["remote_vertices_per_epoch"], 1), 2)
    print(json.dumps({
        "dataset": name, "summary": True,
        "baseline_fp32_nocache_bytes_per_epoch": base_b,
        "baseline_remote_vertices_per_epoch": base_v,
        "best_at_ratio_le_0.25": {k: best[k] for k in ("policy", "ratio", "codec")},
        "best_bytes_per_epoch": best["remote_feature_bytes_per_epoch"],
        "best_bytes_reduction": round(base_b / max(best["remote_feature_bytes_per_epoch"], 1), 2),
        "best_prefetch_bytes": best["prefetch_bytes"],
        "best_bytes_reduction_incl_prefetch_over_epochs": round(base_b / amortized, 2),
        "fp32_vertex_reduction_by_policy": per_policy,
    }), flush=True)  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--dataset",
        default="synthetic:rmat",
        help="synthetic:rmat, musae:facebook, synthetic:sbm, or a comma list",
    )
    p.add_argument("--parts", type=int, default=4)
    p.add_argument("--fanouts", default=None, help="default 15,10,5 for rmat, else 15,10")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--epochs", type=int, default=1, help="measured epochs after warm-up")
    p.add_argument(
        "--policies",
        default="none,degree,presample,adaptive",
        help="also presample-analytic (vertex-inclusion probabilities instead of a dry run)",
    )
    p.add_argument("--ratios", default="0.2,1.0")
    p.add_argument("--codecs", default="fp32,fp16,int8,int4")
    p.add_argument("--wire", default=None, help="lossless wire stage: zstd (or lz4)")
    p.add_argument("--rmat-scale", type=int, default=20)
    p.add_argument("--feature-dim", type=int, default=128, help="R-MAT Gaussian feature dim")
    p.add_argument("--train-frac", type=float, default=0.1, help="R-MAT/Facebook train fraction")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--decay", type=float, default=0.99, help="adaptive policy decay per batch")
    p.add_argument("--margin", type=float, default=1.0, help="adaptive policy hysteresis")
    p.add_argument("--baseline-rmat", action="store_true",
                   help="R-MAT of make_rmat.py (no communities, Gaussian x)")  # fmt: skip
    p.add_argument("--adaptive-warm", choices=("analytic", "dryrun"), default="analytic",
                   help="adaptive warm start: inclusion scores or dry-run counts")  # fmt: skip
    args = p.parse_args(argv)
    global MARGIN, ADAPTIVE_WARM, BASELINE_RMAT
    MARGIN, ADAPTIVE_WARM, BASELINE_RMAT = args.margin, args.adaptive_warm, args.baseline_rmat
    torch.set_num_threads(2)
    for name in args.dataset.split(","):
        bench_dataset(name, args)


if __name__ == "__main__":
    sys.exit(main())
