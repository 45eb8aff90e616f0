"""Link prediction: gnnsys at 1 and P parts vs PyG's full-batch SAGE example, and bytes per epoch.

Per dataset, one seeded split (``edge_split``: 10 % val / 10 % test links, 1000 fixed negatives
per held-out link) shared by every run:

- **gnnsys** at 1 part and at ``--parts`` METIS parts (in-process executor, the Ray workers'
  code; per-rank batch ``B / P``, so the global batch is the same; the gradient average weighs
  ranks by their positives): test MRR and Hits@20/50/100 at the best validation MRR, exact
  sharded evaluation;
- **PyG** (``benchmarks/pyg_link_baseline.py``): full-batch ``SAGEConv`` + dot product +
  ``negative_sampling``, scored on the same negatives with the same ranks;

The defaults are PyG ``examples/link_pred.py``'s settings (lr 0.01, no dropout, one negative per
positive, ``NormalizeFeatures``, full batch) for both sides; gnnsys runs them as a batch of every
train link with fanouts ``-1,-1`` (one step per epoch, the whole neighbourhood), so the two
differ only in code, the RNG streams and PyG's filtering of negatives that are true edges.
``val_mrr_curve`` in each line shows whether the run had converged.
- **bytes per epoch** at ``--parts`` parts: traffic replays (the training epochs' sampling and
  fetching; equal to training's) without a cache in fp32 and with the adaptive cache (ratio
  ``--cache-ratio``) and int8 rows.

Prints JSON lines (``bench`` = ``link_gnnsys``, ``link_pyg``, ``link_bytes``).

    python benchmarks/link_parity.py --datasets planetoid:cora --root ../shared/datasets
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pyg_link_baseline import run as run_pyg  # noqa: E402

from gnnsys.cache import CacheConfig  # noqa: E402
from gnnsys.cache.codecs import CodecConfig  # noqa: E402
from gnnsys.config import RunConfig  # noqa: E402
from gnnsys.datasets import LinkSplitConfig, load_link_split  # noqa: E402
from gnnsys.datasets.transforms import FEATURE_NORMS  # noqa: E402
from gnnsys.models import ModelConfig  # noqa: E402
from gnnsys.partitioners import partition  # noqa: E402
from gnnsys.sampler import NeighborSampler  # noqa: E402
from gnnsys.store import write_partitions  # noqa: E402
from gnnsys.store.source import DataConfig  # noqa: E402
from gnnsys.train.control.cluster_config import ClusterConfig  # noqa: E402
from gnnsys.train.control.coordinator import Coordinator  # noqa: E402
from gnnsys.train.control.run import train_local  # noqa: E402
from gnnsys.train.eval.evaluate import EvalConfig  # noqa: E402
from gnnsys.train.link.config import LinkConfig  # noqa: E402
from gnnsys.train.trainer import Trainer  # noqa: E402

KEYS = ("mrr", "hits@20", "hits@50", "hits@100")


def _config(args: argparse.Namespace, store: Path, parts: int, seed: int) -> RunConfig:
    return RunConfig(
        data=DataConfig(store=str(store)),
        cluster=ClusterConfig(parts=parts),
        sampler=NeighborSampler.Config(fanouts=tuple(int(f) for f in args.fanouts.split(","))),
        model=ModelConfig(name="sage", hidden=args.hidden, dropout=args.dropout),
        trainer=Trainer.Config(batch_size=args.batch_size // parts, lr=args.lr, seed=seed),
        loop=Coordinator.Config(epochs=args.epochs, progress=False),
        eval=EvalConfig(every=args.eval_every),
        link=LinkConfig(neg_per_pos=args.neg_per_pos),
    )


def _best(history: list[dict[str, Any]]) -> dict[str, Any]:
    scored = [m for m in history if m.get("val_mrr") is not None]
    best = max(scored, key=lambda m: m["val_mrr"])
    out = {"epoch": best["epoch"], "loss": best["loss"], "epochs": len(history)}
    out |= {f"{s}_{k}": best[f"{s}_{k}"] for s in ("val", "test") for k in KEYS}
    return out | {"val_mrr_curve": [round(m["val_mrr"], 5) for m in scored]}


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    keys = ("batch_size", "fanouts", "hidden", "lr", "dropout", "neg_per_pos", "feature_norm")
    return {k: getattr(args, k) for k in keys}


def _emit(line: dict[str, Any]) -> None:
    print(json.dumps(line), flush=True)


def _stores(split: Any, parts: list[int], root: Path) -> dict[int, Path]:
    out = {}
    for p in parts:
        store = root / f"store-{p}"
        method = "metis" if p > 1 else "random"
        assignment = partition(split.graph, method, p, seed=0)
        write_partitions(split.graph, assignment, store, num_hops=2, overwrite=True, links=split)
        out[p] = store
    return out


def _bytes(args: argparse.Namespace, store: Path, root: Path, dataset: str) -> None:
    base = _config(args, store, args.parts, 0)
    base = replace(base, loop=replace(base.loop, epochs=args.traffic_epochs))
    settings = {
        "none-fp32": (CacheConfig(), CodecConfig()),
        f"adaptive-{args.cache_ratio:g}-int8": (
            CacheConfig(policy="adaptive", ratio=args.cache_ratio),
            CodecConfig(name="int8"),
        ),
    }
    for name, (cache, codec) in settings.items():
        cfg = replace(base, cache=cache, codec=codec)
        hist = train_local(cfg, root / f"replay-{name}", traffic_only=True).history
        feature = ("feature_request", "feature_response")
        steady = sum(sum(m["bytes"][k] for k in feature) for m in hist) / len(hist)
        warm = sum(hist[0]["warmup_bytes"][k] for k in feature)
        total = sum(sum(m["bytes"].values()) for m in hist) / len(hist)
        _emit(
            {
                "bench": "link_bytes",
                "dataset": dataset,
                "parts": args.parts,
                "setting": name,
                "epochs": len(hist),
                "feature_bytes_per_epoch": steady + warm / len(hist),
                "steady_feature_bytes_per_epoch": steady,
                "warmup_feature_bytes": warm,
                "total_bytes_per_epoch": total,
                "bytes_by_category": hist[-1]["bytes"],
                "hit_rate": hist[-1].get("cache", {}).get("hit_rate", 0.0),
                "settings": _settings(args),
            }
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--datasets", default="planetoid:cora,musae:facebook")
    p.add_argument("--root")
    p.add_argument("--parts", type=int, default=4)
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--eval-every", type=int, default=1)
    p.add_argument("--pyg-epochs", type=int, default=100)
    p.add_argument(
        "--batch-size",
        type=int,
        default=1 << 30,
        help="global positive links per step (default: all of them, one step per epoch)",
    )
    p.add_argument("--fanouts", default="-1,-1", help="-1,-1 with the whole batch = full batch")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01, help="PyG link_pred.py's")
    p.add_argument("--dropout", type=float, default=0.0, help="PyG link_pred.py has none")
    p.add_argument("--neg-per-pos", type=int, default=1, help="as PyG's example draws")
    p.add_argument(
        "--feature-norm",
        default="row",
        choices=sorted(FEATURE_NORMS),
        help="row = PyG's NormalizeFeatures, which link_pred.py applies; both sides get it",
    )
    p.add_argument("--seeds", default="0")
    p.add_argument("--cache-ratio", type=float, default=0.25)
    p.add_argument("--traffic-epochs", type=int, default=2)
    p.add_argument("--skip", default="", help="comma list of: gnnsys, pyg, bytes")
    p.add_argument("--train-parts", default="", help="part counts to train (default 1 and --parts)")
    args = p.parse_args()
    skip = set(args.skip.split(","))
    for dataset in args.datasets.split(","):
        split = load_link_split(dataset, args.root, config=LinkSplitConfig())
        split = replace(split, graph=FEATURE_NORMS[args.feature_norm](split.graph))
        root = Path(tempfile.mkdtemp(prefix="link-parity-"))
        print(f"# {dataset}: work dir {root} (metrics.jsonl per run)", file=sys.stderr, flush=True)
        wanted = {int(v) for v in args.train_parts.split(",") if v} or {1, args.parts}
        needed = (set() if "gnnsys" in skip else wanted) | (
            set() if "bytes" in skip else {args.parts}
        )
        stores = _stores(split, sorted(needed), root)
        for seed in [int(s) for s in args.seeds.split(",")]:
            for parts, store in stores.items():
                if "gnnsys" in skip or parts not in wanted:
                    continue
                start = time.perf_counter()
                hist = train_local(_config(args, store, parts, seed), root / f"run-{parts}-{seed}")
                _emit(
                    {"bench": "link_gnnsys", "dataset": dataset, "parts": parts, "seed": seed}
                    | _best(hist.history)
                    | {"seconds": time.perf_counter() - start, "settings": _settings(args)}
                )
            if "pyg" not in skip:
                best = run_pyg(
                    split,
                    hidden=args.hidden,
                    num_layers=len(args.fanouts.split(",")),
                    epochs=args.pyg_epochs,
                    lr=args.lr,
                    dropout=args.dropout,
                    seed=seed,
                    eval_every=args.eval_every,
                )
                line = {"bench": "link_pyg", "dataset": dataset, "seed": seed} | best
                _emit(line | {"settings": _settings(args) | {"epochs": args.pyg_epochs}})
        if "bytes" not in skip:
            _bytes(args, stores[args.parts], root, dataset)


if __name__ == "__main__":
    main()
