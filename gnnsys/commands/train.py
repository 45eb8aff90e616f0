"""``gnnsys train [DATASET] [options]``: distributed training on Ray (see docs/training.md)."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gnnsys.commands._link import add_link_args, apply_link_args, print_link_table
from gnnsys.commands._train_types import add_dataset_args

if TYPE_CHECKING:
    from gnnsys.cache import CacheConfig

_EXAMPLES = """examples:
  gnnsys train                                   # synthetic:sbm (100k nodes), 2 workers
  gnnsys train planetoid:cora --parts 4 --epochs 20 --out runs/cora
  gnnsys train --store runs/cora/store --parts 4 --resume --out runs/cora
  gnnsys train synthetic:sbm --address 127.0.0.1:6379 --parts 2   # join a running cluster
  gnnsys train synthetic:sbm --parts 4 --cache-policy presample --cache-ratio 0.1 --codec int8
  gnnsys train synthetic:mag -D scale=0.01 -D reverse=true --parts 4 --codec paper=int8,author=fp16
"""


# Each flag sets one field of RunConfig; its type, help text, default and check are the field's
# (gnnsys.flags). The same fields are the keys of a --config file (gnnsys.run_file).
FIELD_FLAGS: dict[str, dict[str, str]] = {
    "data (DataConfig; [data] in --config)": {
        "--root": "data.root DIR",
        "--store": "data.store DIR",
        "--partitioner": "data.partitioner",
        "--feature-norm": "data.feature_norm",
    },
    "cluster (ClusterConfig; [cluster])": {
        "--parts": "cluster.parts",
        "--topology": "cluster.topology",
        "--address": "cluster.address ADDR",
        "--threads": "cluster.threads",
        "--owner-reads": "cluster.owner_reads",
        "--device": "cluster.device",
    },
    "model (ModelConfig; [model])": {
        "--hidden": "model.hidden",
        "--dropout": "model.dropout",
    },
    "optimisation and step (Trainer.Config; [trainer])": {
        "--batch-size": "trainer.batch_size",
        "--batch-schedule": "trainer.schedule",
        "--lr": "trainer.lr",
        "--weight-decay": "trainer.weight_decay",
        "--seed": "trainer.seed",
        "--prefetch": "trainer.prefetch",
    },
    "epochs and deadlines (Coordinator.Config; [loop]; FailurePolicy.Config; [failure])": {
        "--epochs": "loop.epochs",
        "--deadline": "loop.deadline_s S",
        "--heartbeat-timeout": "loop.heartbeat_s S",
        "--startup-deadline": "loop.startup_deadline_s S",
        "--tensorboard": "loop.tensorboard DIR",
        "--max-restarts": "failure.max_restarts",
    },
    "remote features (CodecConfig, CacheConfig, FirstLayerConfig; [codec], [cache], [layer0])": {
        "--codec": "codec.name",
        "--lossy-codec": "codec.lossy",
        "--wire": "codec.wire",
        "--cache-policy": "cache.policy",
        "--cache-ratio": "cache.ratio",
        "--cache-mb": "cache.mb MIB",
        "--features-on": "cache.placement",
        "--aggregate-at": "layer0.placement",
        "--decode-halo": "!layer0.fused_dequant",
    },
    "evaluation (EvalConfig; [eval])": {
        "--eval-every": "eval.every",
        "--eval-codec": "eval.codec",
        "--eval-halo-mb": "eval.halo_mb MIB",
        "--eval-spill-mb": "eval.spill_mb MIB",
        "--eval-block-mb": "eval.block_mb MIB",
        "--test-at-end": "eval.test_at_end",
        "--metric": "eval.metric",
    },
}
"""Flag -> ``RunConfig`` field, by ``--help`` group."""

CACHE_TUNING: dict[str, str] = {
    "--presample-epochs": "cache.presample_epochs",
    "--cache-decay": "cache.adaptive.decay",
    "--cache-warm-weight": "cache.adaptive.warm_weight",
    "--cache-margin": "cache.adaptive.margin",
}
"""The presample and adaptive-cache knobs (``gnnsys bench comm`` has them too)."""


def _field_flags() -> dict[str, tuple[Any, ...]]:
    from gnnsys.config import RunConfig
    from gnnsys.flags import field_flags

    base = RunConfig()
    groups = {title: field_flags(base, table) for title, table in FIELD_FLAGS.items()}
    groups["halo cache tuning (CacheConfig; [cache], [cache.adaptive])"] = field_flags(
        base, CACHE_TUNING
    )
    return groups


def _add_model_flags(p: Any) -> None:
    """``--model`` (gnnsys's or any PyG ``BasicGNN``) and ``--model-arg``."""
    from gnnsys.models.registry import REGISTRY

    one_type = ", ".join(name for name, kind in REGISTRY.items() if kind.one_type)
    p.add_argument(
        "--model",
        metavar="NAME",
        help=f"{one_type} (default sage); heterogeneous datasets: {', '.join(REGISTRY)} (per "
        "relation; gcn where every relation leads from a type to itself). Homogeneous graphs "
        "also take any PyG BasicGNN by its class name (GraphSAGE, GCN, GAT, GIN, EdgeCNN, ...) "
        "or package.module:factory returning one",
    )
    p.add_argument(
        "--model-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a keyword argument of a PyG --model (repeatable; JSON values, else text), e.g. "
        "--model-arg jk=last --model-arg heads=4",
    )
    p.add_argument("--fanouts", help="neighbors per hop, seed hop first, e.g. 15,10")


def add_parser(sub: Any) -> None:
    """Register ``train``."""
    from gnnsys.flags import add_flags

    p: argparse.ArgumentParser = sub.add_parser(
        "train",
        help="train a GNN across P Ray workers, one per partition",
        description="Partition DATASET (unless --store is given), start one shard owner and "
        "one trainer per part on Ray, and train; writes RUN_DIR/metrics.jsonl, "
        "checkpoint.pt, summary.json and config.toml. Each option below sets one field of "
        "the run's config, named in its group: a --config file sets the same fields.",
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("dataset", nargs="?", help="dataset name (default: the preset's)")
    p.add_argument("--preset", default="default", help="named config in gnnsys.presets")
    p.add_argument(
        "--config",
        metavar="RUN.TOML",
        help="read the settings from a TOML file, one table per stage ([trainer] batch_size = "
        "512, [sampler] fanouts = [15, 10], ...; see docs/training.md), over the preset; "
        "flags override it. Every run writes RUN_DIR/config.toml, which repeats it",
    )
    p.add_argument("--out", help="run directory (default runs/train-TIMESTAMP)")
    p.add_argument(
        "--executor",
        choices=("ray", "local"),
        default="ray",
        help="ray (default): one actor per owner and trainer; local: the ranks as threads of "
        "this process (same code and files, no Ray; for small runs and debugging)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue from RUN_DIR/checkpoint.pt (refused if the data, store, model shape, "
        "fanouts or --parts differ from the checkpoint's run; more --epochs is fine)",
    )
    p.add_argument(
        "--allow-change",
        metavar="FIELDS",
        help="with --resume, comma list of fields that may differ from the checkpoint's run, "
        "e.g. trainer.lr,sampler.fanouts (short: lr, fanouts, batch-size, seed, codec, dropout)",
    )
    p.add_argument("--num-nodes", type=int, help="nodes of a synthetic dataset")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_dataset_args(p)
    for title, flags in _field_flags().items():
        group = p.add_argument_group(title)
        if title.startswith("model"):
            _add_model_flags(group)
        add_flags(group, flags)
    add_link_args(p, target_edge=True)
    p.add_argument("--inject-fault", help=argparse.SUPPRESS)  # KIND:RANK:EPOCH:BATCH, tests
    p.add_argument("--inject-delay-ms", type=float, help=argparse.SUPPRESS)  # owner latency
    p.set_defaults(func=run)


def add_cache_tuning_args(p: argparse.ArgumentParser) -> None:
    """``CACHE_TUNING``'s flags (``gnnsys bench comm`` has them too)."""
    from gnnsys.config import RunConfig
    from gnnsys.flags import add_flags, field_flags

    add_flags(p, field_flags(RunConfig(), CACHE_TUNING))


def cache_tuning(args: argparse.Namespace, base: CacheConfig) -> CacheConfig:
    """``base`` with the given ``CACHE_TUNING`` flags applied."""
    from gnnsys.config import RunConfig
    from gnnsys.flags import apply_flags, field_flags

    flags = field_flags(RunConfig(), CACHE_TUNING)
    out: CacheConfig = apply_flags(RunConfig(cache=base), args, flags).cache
    return out


def build_config(args: argparse.Namespace) -> Any:
    """The preset's ``RunConfig``, then the ``--config`` file's settings, then the flags given."""
    from gnnsys.flags import apply_flags
    from gnnsys.options import parse_kv
    from gnnsys.presets import PRESETS

    if args.preset not in PRESETS:
        raise ValueError(f"unknown preset {args.preset!r}; choose one of {sorted(PRESETS)}")
    cfg = PRESETS[args.preset]()
    if getattr(args, "config", None) is not None:
        cfg = type(cfg).from_toml(args.config, cfg)
    cfg = apply_link_args(args, cfg)
    for flags in _field_flags().values():
        cfg = apply_flags(cfg, args, flags)
    params = dict(cfg.data.dataset_params)
    if args.num_nodes is not None:
        params["num_nodes"] = args.num_nodes
    params |= parse_kv(getattr(args, "dataset_param", []) or [])
    data = replace(cfg.data, dataset_params=tuple(sorted(params.items())))
    if args.dataset is not None:
        data = replace(data, dataset=args.dataset)
    from gnnsys.commands import _train_types

    model = cfg.model
    loop = replace(
        cfg.loop,
        resume=cfg.loop.resume or args.resume,
        progress=cfg.loop.progress and not args.no_progress and sys.stderr.isatty(),
    )
    typed_settings = cfg.node_types is not None  # the --config file's [node_types] table
    cfg = replace(cfg, data=data, model=model, loop=loop)
    return _train_types.for_kind(args, cfg, typed_settings)


def _parse_fault(text: str | None, delay_ms: float | None = None) -> Any:
    from gnnsys.train.worker import FaultSpec

    if delay_ms is not None:  # latency on every owner call (the pipeline benchmark)
        return FaultSpec("delay", -1, -1, delay_s=delay_ms / 1000)
    if text is None:
        return None

    try:
        kind, rank, epoch, batch = text.split(":")
        return FaultSpec(kind, int(rank), int(epoch), int(batch))
    except ValueError as err:
        raise ValueError(f"--inject-fault {text!r}: use KIND:RANK:EPOCH:BATCH ({err})") from err


def _cell(value: float | None) -> str:
    return f"{'-':>7}" if value is None else f"{value:>7.4f}"


def print_table(history: list[dict[str, Any]]) -> None:
    """The per-epoch summary table (``-`` where an epoch was not evaluated)."""
    extra = "auc" if any("val_auc" in m for m in history) else "f1"
    head = (
        f"{'epoch':>5} {'loss':>8} {'train':>7} {'val':>7} {'val ' + extra:>7} {'test':>7} "
        f"{'sec':>7} {'stall s':>7} {'overlap':>7} {'eval s':>7} {'MiB sent':>9} "
        f"{'feat MiB':>9} {'hit rate':>8}"
    )
    print(head)
    print("-" * len(head))
    for m in history:
        mib = sum(m["bytes"].values()) / 2**20
        feat = sum(v for k, v in m["bytes"].items() if k.startswith(("feature_", "partial_")))
        hit = f"{m['cache']['hit_rate']:>8.3f}" if "cache" in m else f"{'-':>8}"
        cells = " ".join(
            _cell(m.get(k)) for k in ("train_acc", "val_acc", f"val_{extra}", "test_acc")
        )
        secs = m["seconds"]
        stall, overlap = secs.get("stall"), secs.get("overlap")  # absent in older runs' lines
        print(
            f"{m['epoch']:>5} {m['loss']:>8.4f} {cells} {secs['total']:>7.1f} "
            + ("      - " if stall is None else f"{stall:>7.2f} ")
            + ("      - " if overlap is None else f"{overlap:>7.2f} ")
            + f"{secs['eval']:>7.2f} {mib:>9.1f} {feat / 2**20:>9.2f} {hit}"
        )


def run(args: argparse.Namespace) -> int:
    """Handler of ``gnnsys train``; returns the exit code (1 when workers failed)."""
    from gnnsys.commands._preflight import check_numbers, run_preflight
    from gnnsys.errors import WorkerFailedError
    from gnnsys.train.control.run import train, train_local

    check_numbers(args)  # before anything: Ray, the store and the run directory
    config = build_config(args)
    fault = _parse_fault(args.inject_fault, args.inject_delay_ms)
    out = Path(args.out or f"runs/train-{time.strftime('%Y%m%d-%H%M%S')}")
    pre = run_preflight(args, config, out)
    for line in pre.notices:
        print(f"gnnsys train: {line}", file=sys.stderr)
    try:
        if args.executor == "local":
            result = train_local(config, out, allow_change=pre.allowed, fault=fault)
        else:
            result = train(config, out, allow_change=pre.allowed, fault=fault)
    except WorkerFailedError as err:
        print(f"gnnsys train: error: {err}", file=sys.stderr)
        return 1
    link = result.summary["config"].get("link") is not None
    (print_link_table if link else print_table)(result.history)
    from gnnsys.commands._train_types import print_type_bytes

    print_type_bytes(result.history)  # typed runs' lines carry bytes_by_type
    best, metric = result.summary["best"], result.summary["metric"]
    topology = result.summary["config"]["cluster"]["topology"]
    if best is None:
        print(f"no epoch was evaluated; topology {topology}; run dir {result.run_dir}")
        return 0
    final = result.summary["final"]
    shown = metric if link else "acc"
    test = (
        final.get(f"test_{shown}") if best.get(f"test_{shown}") is None else best[f"test_{shown}"]
    )
    print(
        f"best val_{metric} {best[f'val_{metric}']:.4f} (epoch {best['epoch']}, test_{shown} "
        f"{_cell(test).strip()}); topology {topology}; run dir {result.run_dir}"
    )
    return 0
