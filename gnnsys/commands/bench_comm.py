"""``gnnsys bench comm DATASET``: remote feature traffic and accuracy per cache x codec x placement.

Every configuration (cache ``policy`` x ``ratio`` x ``codec`` x ``aggregate_at``) runs gnnsys's
own runtime in one process (``gnnsys.train.control.local_group``: the Ray workers' Trainer,
samplers, caches, codecs and shard owners, called directly; its ledger equals a Ray run's, which a
test checks):

- **traffic**: every configuration x ``--seeds`` replays the training epochs' sampling and
  fetching without the model (``train_local(traffic_only=True)``). A test checks that the
  replay's ledger and cache counters equal a training run's exactly: which rows travel depends
  on the sampled batches, never on the weights.
- **accuracy**: a training run per codec (``--acc-seeds``), exact layer-wise test accuracy at the
  best validation epoch. With requester placement a cache never changes the values the model
  sees (a cached row is the decoded owner row; a test checks identical losses), so every cache
  configuration of a codec shares that codec's run (``acc_source = "codec run"``). Owner and
  auto placement change the arithmetic, so those configurations are trained themselves
  (``acc_source = "trained"``, on ``--acc-seeds``): at ratio 0 with fp32, and with the best
  requester cache+codec (``benchmarks/owner_parity.py`` has the 3-seed placement parity).
- **confirmation**: the baseline (no cache, fp32, requester) and the best configuration are
  trained on ``--confirm-seeds`` too; ``test_acc`` is the mean over all seeds trained.

``remote_feature_bytes_per_epoch`` counts every feature-path payload (gids sent, encoded rows
back, owner-side pairs and partial sums) plus the cache's warm-up prefetch spread over the
epochs; ``steady_feature_bytes_per_epoch`` leaves the warm-up out. The METIS, no-cache, fp32,
requester row is the DistDGL-equivalent baseline; ``bytes_reduction`` is relative to it.

Writes ``DIR/results.jsonl``, ``DIR/results.md``, ``DIR/pareto.png`` (bytes per epoch against
test accuracy, Pareto front marked) and ``DIR/hit_rate.png`` (hit rate against cache ratio).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gnnsys.commands._link import add_link_args, apply_link_args, link_split_of
from gnnsys.commands.partition import add_dataset_args
from gnnsys.commands.train import add_cache_tuning_args, cache_tuning
from gnnsys.models.registry import REGISTRY
from gnnsys.options import parse_kv
from gnnsys.store.diskio import atomic_write

logger = logging.getLogger(__name__)

FEATURE_KEYS = ("feature_request", "feature_response", "partial_request", "partial_response")
BASELINE = ("none", 0.0, "fp32", "requester")
ONE_TYPE_MODELS = tuple(n for n, k in REGISTRY.items() if k.one_type)
MAX_RATIO = 0.25  # the acceptance's "cache ratio <= 0.25"
MAX_ACC_DROP_PT = 0.5


@dataclass(frozen=True, slots=True)
class CommConfig:
    """One configuration of the grid."""

    policy: str
    ratio: float
    codec: str
    aggregate_at: str = "requester"

    @property
    def name(self) -> str:
        """Directory-safe label, e.g. ``presample-0.1-int8-requester``."""
        return f"{self.policy}-{self.ratio:g}-{self.codec}-{self.aggregate_at}"

    @property
    def key(self) -> tuple[str, float, str, str]:
        """``(policy, ratio, codec, aggregate_at)``."""
        return (self.policy, self.ratio, self.codec, self.aggregate_at)

    def fields(self) -> dict[str, Any]:
        """The configuration's columns of a results row."""
        return {
            "policy": self.policy, "ratio": self.ratio, "codec": self.codec,
            "aggregate_at": self.aggregate_at,
        }  # fmt: skip


def add_parser(kinds: Any) -> None:
    """Register ``bench comm``."""
    p: argparse.ArgumentParser = kinds.add_parser(
        "comm",
        help="remote feature bytes and accuracy per cache policy, ratio, codec and placement",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_dataset_args(p)
    p.add_argument("--parts", type=int, default=4, help="P workers (default 4)")
    p.add_argument("--partitioner", default="metis", help="default metis")
    p.add_argument("--policies", default="none,degree,presample,adaptive")
    p.add_argument("--ratios", default="0,0.05,0.1,0.25", help="cache ratios")
    p.add_argument("--codecs", default="fp32,fp16,int8,int4", help="add binary for 0/1 features")
    p.add_argument("--aggregate-at", default="requester", help="e.g. requester,owner,auto")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--seeds", default="0", help="seeds of the traffic replays")
    p.add_argument("--acc-seeds", default="0", help="seeds of each codec's training run")
    p.add_argument("--confirm-seeds", default="0,1,2", help="seeds of baseline and best")
    p.add_argument("--fanouts", default="15,10", help="sampler fanouts, seed hop first")
    p.add_argument("--batch-size", type=int, default=1024, help="seeds per batch per worker")
    p.add_argument("--model", default="sage", choices=ONE_TYPE_MODELS)
    p.add_argument("--lr", type=float, default=0.003)
    add_cache_tuning_args(p)  # --presample-epochs and the adaptive knobs, for every config
    add_link_args(p)  # --task link: bytes per epoch only (gnnsys.commands._bench_link)
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads")
    p.add_argument("--out", required=True, help="output directory")
    p.set_defaults(func=run)


def _floats(text: str) -> list[float]:
    return [float(v) for v in text.split(",") if v]


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def _names(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def grid(policies: list[str], ratios: list[float], codecs: list[str]) -> list[CommConfig]:
    """Requester-placement configurations: no cache per codec, then every cached combination.

    ``none`` at any ratio and any policy at ratio 0 are the same (no cache), so they appear once.
    """
    out = [CommConfig("none", 0.0, c) for c in codecs]
    for policy in policies:
        for ratio in ratios:
            if policy != "none" and ratio > 0:
                out += [CommConfig(policy, ratio, c) for c in codecs]
    return out


def base_config(args: argparse.Namespace, store: Path, typed: bool = False) -> Any:
    """The ``RunConfig`` every configuration derives from (``typed``: a RelationalSAGE/GAT run)."""
    from gnnsys.config import RunConfig
    from gnnsys.sampler import NeighborSampler
    from gnnsys.train.node_types import NodeTypesConfig

    cfg = apply_link_args(args, RunConfig())
    cfg = replace(cfg, node_types=NodeTypesConfig(model=args.model) if typed else None)
    return replace(
        cfg,
        data=replace(cfg.data, dataset=args.dataset, root=args.root, store=str(store)),
        cluster=replace(cfg.cluster, parts=args.parts, topology="partitioned"),
        sampler=NeighborSampler.Config(fanouts=tuple(_ints(args.fanouts))),
        model=replace(cfg.model, name=args.model),
        trainer=replace(cfg.trainer, batch_size=args.batch_size, lr=args.lr),
        loop=replace(cfg.loop, epochs=args.epochs, progress=False),
        cache=cache_tuning(args, cfg.cache),
    )


def _run(
    base: Any, c: CommConfig, seed: int, out: Path, *, traffic: bool, threads: int
) -> list[dict[str, Any]]:
    from gnnsys.train.control.run import train_local

    cfg = replace(
        base,
        trainer=replace(base.trainer, seed=seed),
        codec=replace(base.codec, name=c.codec),
        cache=replace(base.cache, policy=c.policy, ratio=c.ratio),
        layer0=replace(base.layer0, placement=c.aggregate_at),
    )
    kind = "replay" if traffic else "train"
    run_dir = out / "runs" / f"{c.name}-seed{seed}-{kind}"
    return train_local(cfg, run_dir, traffic_only=traffic, threads=threads).history


def traffic_of(histories: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """Per-epoch traffic and cache figures, averaged over the seeds' replays."""
    per_seed = []
    for hist in histories:
        epochs = len(hist)
        steady = sum(sum(m["bytes"][k] for k in FEATURE_KEYS) for m in hist) / epochs
        warm = sum(hist[0]["warmup_bytes"][k] for k in FEATURE_KEYS)
        looked = sum(m.get("cache", {}).get("rows_requested", 0) for m in hist)
        hits = sum(m.get("cache", {}).get("rows_hit", 0) for m in hist)
        per_seed.append(
            {
                "remote_feature_bytes_per_epoch": steady + warm / epochs,
                "steady_feature_bytes_per_epoch": steady,
                "warmup_feature_bytes": warm,
                "remote_vertices_per_epoch": sum(m["bytes"]["feature_request"] for m in hist)
                / 8
                / epochs,
                "partial_sums_per_epoch": sum(m["bytes"]["partial_response"] for m in hist)
                / epochs,
                "hit_rate": hits / looked if looked else 0.0,
                "fetch_seconds_per_epoch": sum(m["seconds"]["fetch"] for m in hist) / epochs,
            }
        )
    return {k: statistics.fmean(s[k] for s in per_seed) for k in per_seed[0]}


def accuracy_of(histories: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """Test accuracy at the best validation epoch, mean and std over the seeds' runs."""
    accs = [max(h, key=lambda m: m["val_acc"])["test_acc"] for h in histories]
    return {
        "test_acc": statistics.fmean(accs),
        "test_acc_std": statistics.pstdev(accs) if len(accs) > 1 else 0.0,
        "test_acc_by_seed": accs,
        "epoch_seconds": statistics.fmean(m["seconds"]["total"] for h in histories for m in h),
    }


class _Runs:
    """Memoised replays and training runs of one benchmark invocation."""

    def __init__(self, base: Any, out: Path, threads: int) -> None:
        self.base, self.out, self.threads = base, out, threads
        self._done: dict[tuple[Any, ...], list[dict[str, Any]]] = {}

    def get(self, c: CommConfig, seed: int, *, traffic: bool) -> list[dict[str, Any]]:
        key = (c.key, seed, traffic)
        if key not in self._done:
            what = "replay" if traffic else "train"
            logger.info("%s %s seed %d", what, c.name, seed)
            self._done[key] = _run(
                self.base, c, seed, self.out, traffic=traffic, threads=self.threads
            )
        return self._done[key]

    def traffic(self, c: CommConfig, seeds: list[int]) -> dict[str, Any]:
        return traffic_of([self.get(c, s, traffic=True) for s in seeds])

    def accuracy(self, c: CommConfig, seeds: list[int]) -> dict[str, Any]:
        return accuracy_of([self.get(c, s, traffic=False) for s in seeds])


TYPED_GRID = {
    "policies": ("none", "degree", "presample", "adaptive"),
    "aggregate_at": ("requester", "owner", "auto"),
    "codecs": ("fp32", "fp16", "bf16", "int8", "int4"),
    "models": ("sage", "gat"),
}
"""What a heterogeneous dataset's grid can hold: the typed models are RelationalSAGE and
RelationalGAT (``gnnsys.commands._train_types.NOT_FOR_HETERO`` has the reasons); ``binary`` is
dropped (its 0/1 check reads one feature table)."""


def typed_args(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` with what a heterogeneous grid cannot run dropped, each drop logged.

    Raises:
        ValueError: A model typed runs do not have.
    """
    if args.model not in TYPED_GRID["models"]:
        raise ValueError(
            f"--model {args.model}: heterogeneous datasets train {'/'.join(TYPED_GRID['models'])}"
        )
    kept = {}
    for flag in ("policies", "aggregate_at", "codecs"):
        allowed = TYPED_GRID[flag]
        names = _names(getattr(args, flag))
        dropped = [n for n in names if n not in allowed]
        if dropped:
            logger.warning(
                "heterogeneous dataset: skipping --%s %s", flag.replace("_", "-"), dropped
            )
        kept[flag] = ",".join(n for n in names if n in allowed)
    return argparse.Namespace(**{**vars(args), **kept})


def _store(args: argparse.Namespace, out: Path, typed: bool = False) -> Path:
    """Partition once into ``out/store`` (reused when it exists with the same parts)."""
    from gnnsys.store.source import DataConfig
    from gnnsys.train.control.prepare import prepare_store

    params = tuple(sorted(parse_kv(args.dataset_param).items()))
    spec = DataConfig(
        dataset=args.dataset, root=args.root, partitioner=args.partitioner, dataset_params=params
    )
    spec = replace(spec, link_split=link_split_of(args))
    return prepare_store(
        spec,
        num_parts=args.parts,
        num_hops=len(_ints(args.fanouts)),
        seed=0,
        run_dir=out,
        reuse=True,
        hetero=typed,
    ).path


def _usable_codecs(codecs: list[str], store: Path) -> list[str]:
    """Drop ``binary`` when the features are not all 0/1 (it would refuse to encode them)."""
    import numpy as np
    import torch

    from gnnsys.cache.codecs.binary import is_binary
    from gnnsys.train.topology import assemble_graph

    if "binary" not in codecs:
        return codecs
    x = assemble_graph(store, with_data=True).x
    if x is not None and is_binary(torch.from_numpy(np.asarray(x, dtype=np.float32))):
        return codecs
    logger.warning("features are not all 0/1: skipping the binary codec")
    return [c for c in codecs if c != "binary"]


def _with_accuracy(row: dict[str, Any], acc: dict[str, Any], source: str) -> dict[str, Any]:
    return row | acc | {"acc_source": source, "acc_seeds": len(acc["test_acc_by_seed"])}


def pick_best(rows: list[dict[str, Any]], baseline: dict[str, Any]) -> dict[str, Any] | None:
    """Fewest bytes among requester rows at ratio <= 0.25 within 0.5 pt of the baseline."""
    ok = [
        r
        for r in rows
        if r["aggregate_at"] == "requester"
        and r["ratio"] <= MAX_RATIO
        and (baseline["test_acc"] - r["test_acc"]) * 100 <= MAX_ACC_DROP_PT
    ]
    return min(ok, key=lambda r: r["remote_feature_bytes_per_epoch"]) if ok else None


def run(args: argparse.Namespace) -> int:
    """Replay every configuration, train per codec and placement, write table and plots."""
    from tqdm import tqdm

    from gnnsys.datasets import is_heterogeneous

    typed = is_heterogeneous(args.dataset, args.root)  # the dataset's kind, from its files
    if typed:
        args = typed_args(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    store = _store(args, out, typed)
    runs = _Runs(base_config(args, store, typed), out, args.threads)
    seeds, acc_seeds = _ints(args.seeds), _ints(args.acc_seeds)
    codecs = _usable_codecs(_names(args.codecs), store)
    configs = grid(_names(args.policies), _floats(args.ratios), codecs)
    if CommConfig(*BASELINE) not in configs:
        configs.insert(0, CommConfig(*BASELINE))
    if args.task == "link":
        from gnnsys.commands._bench_link import run_link_traffic

        return run_link_traffic(args, runs, configs, out, baseline=BASELINE)
    rows = {
        c.key: {**c.fields(), **runs.traffic(c, seeds)}
        for c in tqdm(configs, desc="traffic", unit="config")
    }
    all_acc_seeds = sorted(set(acc_seeds) | set(_ints(args.confirm_seeds)))
    best = _attach_codec_accuracy(rows, runs, codecs, acc_seeds, all_acc_seeds)
    for placement in _names(args.aggregate_at):
        if placement == "requester":
            continue
        targets = [CommConfig("none", 0.0, "fp32", placement)]
        if best is not None:
            targets.append(CommConfig(best["policy"], best["ratio"], best["codec"], placement))
        for c in targets:
            row = {**c.fields(), **runs.traffic(c, seeds)}
            rows[c.key] = _with_accuracy(row, runs.accuracy(c, acc_seeds), "trained")
    final = _finish(list(rows.values()))
    _write(final, args, out)
    return 0


def _attach_codec_accuracy(
    rows: dict[tuple[str, float, str, str], dict[str, Any]],
    runs: _Runs,
    codecs: list[str],
    acc_seeds: list[int],
    all_seeds: list[int],
) -> dict[str, Any] | None:
    """Accuracy per codec (its no-cache run) onto every requester row; returns the best row.

    The baseline and the best row's codec are confirmed on ``all_seeds``.
    """

    def attach(codec: str, seeds: list[int]) -> None:
        acc = runs.accuracy(CommConfig("none", 0.0, codec), seeds)
        for key, row in rows.items():
            if key[2] == codec and key[3] == "requester":
                trained = key[0] == "none"
                rows[key] = _with_accuracy(row, acc, "trained" if trained else "codec run")

    for codec in sorted(set(codecs) | {"fp32"}):
        attach(codec, acc_seeds)
    attach("fp32", all_seeds)
    best = pick_best(list(rows.values()), rows[BASELINE])
    if best is not None:
        attach(best["codec"], all_seeds)
        best = pick_best(list(rows.values()), rows[BASELINE])
    return best


def _finish(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Add ratios to the baseline and mark the best row; sorted by bytes per epoch."""
    base = next(
        r for r in rows if (r["policy"], r["ratio"], r["codec"], r["aggregate_at"]) == BASELINE
    )
    best = pick_best(rows, base)
    for r in rows:
        r["bytes_reduction"] = base["remote_feature_bytes_per_epoch"] / max(
            r["remote_feature_bytes_per_epoch"], 1.0
        )
        r["acc_delta_pt"] = (r["test_acc"] - base["test_acc"]) * 100
        r["baseline"] = r is base
        r["best"] = r is best
    return sorted(rows, key=lambda r: r["remote_feature_bytes_per_epoch"])


def _write(rows: list[dict[str, Any]], args: argparse.Namespace, out: Path) -> None:
    setting = {
        "dataset": args.dataset,
        "parts": args.parts,
        "partitioner": args.partitioner,
        "fanouts": args.fanouts,
        "batch_size": args.batch_size,
        "epochs": args.epochs,
        "model": args.model,
    }
    lines = "".join(json.dumps(setting | r) + "\n" for r in rows)
    atomic_write(out / "results.jsonl", lines.encode())
    atomic_write(out / "results.md", markdown(rows, setting).encode())
    write_plots(rows, out)
    for r in rows:
        if r["baseline"] or r["best"]:
            print(json.dumps(setting | r))
    print(f"wrote {out / 'results.jsonl'}, {out / 'results.md'} and plots")


def markdown(rows: list[dict[str, Any]], setting: dict[str, Any]) -> str:
    """The results table, sorted by bytes per epoch, with the baseline and best named."""
    base = next(r for r in rows if r["baseline"])
    best = next((r for r in rows if r["best"]), None)
    head = ", ".join(f"{k} {v}" for k, v in setting.items())
    text = [f"# gnnsys bench comm: {setting['dataset']}", "", head, ""]
    mb = base["remote_feature_bytes_per_epoch"] / 1e6
    text.append(
        f"Baseline (METIS, no cache, fp32, requester): {mb:.2f} MB/epoch, "
        f"test acc {base['test_acc']:.4f} ({base['acc_seeds']} seeds)."
    )
    if best is not None:
        text.append(
            f"Best at ratio <= {MAX_RATIO} within {MAX_ACC_DROP_PT} pt: {best['policy']} "
            f"{best['ratio']:g} {best['codec']}: {best['remote_feature_bytes_per_epoch'] / 1e6:.3f}"
            f" MB/epoch, **{best['bytes_reduction']:.1f}x fewer bytes**, test acc "
            f"{best['test_acc']:.4f} +- {best['test_acc_std']:.4f} ({best['acc_seeds']} seeds, "
            f"{best['acc_delta_pt']:+.2f} pt)."
        )
    text += [
        "",
        "| policy | ratio | codec | aggregate at | MB/epoch | steady MB/epoch | remote rows/epoch "
        "| hit rate | reduction | test acc | delta pt | acc from | epoch s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        mark = " (baseline)" if r["baseline"] else " (best)" if r["best"] else ""
        text.append(
            f"| {r['policy']}{mark} | {r['ratio']:g} | {r['codec']} | {r['aggregate_at']} | "
            f"{r['remote_feature_bytes_per_epoch'] / 1e6:.3f} | "
            f"{r['steady_feature_bytes_per_epoch'] / 1e6:.3f} | "
            f"{r['remote_vertices_per_epoch']:.0f} | {r['hit_rate']:.3f} | "
            f"{r['bytes_reduction']:.1f}x | {r['test_acc']:.4f} +- {r['test_acc_std']:.4f} "
            f"(n={r['acc_seeds']}) | {r['acc_delta_pt']:+.2f} | {r['acc_source']} | "
            f"{r['epoch_seconds']:.1f} |"
        )
    return "\n".join(text) + "\n"


def write_plots(rows: list[dict[str, Any]], out: Path) -> None:
    """``pareto.png`` and ``hit_rate.png`` (skipped, with a warning, without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.warning("matplotlib missing: no plots (pip install 'gnnsys[bench]')")
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for codec in sorted({r["codec"] for r in rows}):
        pts = [r for r in rows if r["codec"] == codec]
        ax.scatter(
            [r["remote_feature_bytes_per_epoch"] for r in pts],
            [r["test_acc"] for r in pts],
            label=codec,
            s=18,
        )
    front, top = [], -1.0
    for r in rows:  # sorted by bytes: a row is on the front if it beats every cheaper row
        if r["test_acc"] > top:
            front.append(r)
            top = r["test_acc"]
    ax.plot(
        [r["remote_feature_bytes_per_epoch"] for r in front],
        [r["test_acc"] for r in front],
        "k--",
        lw=1,
        label="Pareto front",
    )
    ax.set(xscale="log", xlabel="remote feature bytes / epoch", ylabel="test accuracy")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "pareto.png", dpi=120)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 4))
    for policy in sorted({r["policy"] for r in rows} - {"none"}):
        for codec in sorted({r["codec"] for r in rows}):
            curve = sorted(
                (r["ratio"], r["hit_rate"])
                for r in rows
                if r["policy"] == policy
                and r["codec"] == codec
                and r["aggregate_at"] == "requester"
            )
            if curve:
                xs, ys = zip(*[(0.0, 0.0), *curve], strict=True)
                ax.plot(xs, ys, marker="o", label=f"{policy} {codec}")
    ax.set(xlabel="cache ratio", ylabel="hit rate")
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(out / "hit_rate.png", dpi=120)
    plt.close(fig)
