"""``gnnsys train [DATASET] [options]``: distributed training on Ray (see docs/training.md)."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gnnsys.commands._link import add_link_args, apply_link_args, print_link_table
from gnnsys.commands._train_types import add_hetero_args
from gnnsys.models.pyg_user import parse_model_args

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


def _add_model_flags(p: argparse.ArgumentParser) -> None:
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


def add_parser(sub: Any) -> None:
    """Register ``train``."""
    p: argparse.ArgumentParser = sub.add_parser(
        "train",
        help="train a GNN across P Ray workers, one per partition",
        description="Partition DATASET (unless --store is given), start one shard owner and "
        "one trainer per part on Ray, and train; writes RUN_DIR/metrics.jsonl, "
        "checkpoint.pt and summary.json.",
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
    p.add_argument("--root", help="dataset directory")
    p.add_argument("--store", help="existing partition store (skips partitioning)")
    p.add_argument("--parts", type=int, help="P: partitions = workers")
    p.add_argument("--partitioner", help="partitioning strategy (default metis)")
    p.add_argument(
        "--feature-norm",
        help="feature transform before partitioning: none (default) or row (divide each row "
        "by its sum: Kipf's Planetoid preprocessing, PyG NormalizeFeatures)",
    )
    _add_model_flags(p)
    add_hetero_args(p)
    p.add_argument("--hidden", type=int, help="hidden width")
    p.add_argument("--fanouts", help="neighbors per hop, seed hop first, e.g. 15,10")
    _add_optim_flags(p)
    p.add_argument("--seed", type=int)
    p.add_argument("--out", help="run directory (default runs/train-TIMESTAMP)")
    p.add_argument("--address", help="join this Ray cluster instead of starting one")
    p.add_argument(
        "--executor",
        choices=("ray", "local"),
        default="ray",
        help="ray (default): one actor per owner and trainer; local: the ranks as threads of "
        "this process (same code and files, no Ray; for small runs and debugging)",
    )
    _add_step_flags(p)
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
    p.add_argument("--topology", choices=("auto", "partitioned", "replicated"))
    _add_liveness_flags(p)
    p.add_argument("--max-restarts", type=int, help="group restarts after a worker dies")
    p.add_argument("--num-nodes", type=int, help="nodes of a synthetic dataset")
    add_feature_path_args(p)
    _add_eval_flags(p)
    add_link_args(p, typed=True)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--tensorboard",
        metavar="DIR",
        help="also write each epoch's metrics.jsonl line as TensorBoard scalars in DIR (loss, "
        "metrics, bytes by category, cache hit rate, stage times, stall); view them with "
        "'tensorboard --logdir DIR'. Needs: pip install 'gnnsys[tensorboard]'",
    )
    p.add_argument("--inject-fault", help=argparse.SUPPRESS)  # KIND:RANK:EPOCH:BATCH, tests
    p.add_argument("--inject-delay-ms", type=float, help=argparse.SUPPRESS)  # owner latency
    p.set_defaults(func=run)


def _add_liveness_flags(p: argparse.ArgumentParser) -> None:
    """Deadlines: remote calls, heartbeats, start-up."""
    p.add_argument(
        "--deadline",
        type=float,
        help="seconds per remote call / without progress (a batch, an evaluation step)",
    )
    p.add_argument(
        "--heartbeat-timeout",
        type=float,
        metavar="S",
        help="seconds a trainer or shard owner may leave a heartbeat unanswered before it "
        "counts as frozen and is killed and restarted like a dead one (default: 10, or half "
        "of --deadline when that is shorter)",
    )
    p.add_argument(
        "--startup-deadline",
        type=float,
        metavar="S",
        help="seconds the workers may take to start (load shards, warm caches, join the "
        "gloo group) before the silent ones are restarted (default 90)",
    )


def _add_step_flags(p: argparse.ArgumentParser) -> None:
    """How each worker runs its steps: threads and prefetching."""
    p.add_argument(
        "--threads",
        type=int,
        help="CPUs per trainer, asked of Ray (default: this machine's cores / --parts, at "
        "least 1; with --executor local, CPUs of the process, default 1). A trainer "
        "computes on that many torch threads, one fewer when it prefetches (its sampling and "
        "fetching threads take one). On a cluster of big nodes, give the cores per trainer",
    )
    p.add_argument(
        "--owner-reads",
        choices=("auto", "remote", "local"),
        help="remote: a trainer asks other parts' owner actors for their rows and neighbour "
        "lists; local: it runs the owners' code itself over their mapped shard files (same "
        "results and traffic ledger, no call overhead; needs the store on every node); auto "
        "(default): local when gnnsys starts Ray itself (one machine), remote with --address",
    )
    p.add_argument(
        "--device",
        choices=("cpu", "cuda", "auto"),
        help="where each trainer computes: cpu, cuda (a GPU per trainer through Ray's GPU "
        "resources, shared when there are fewer GPUs than --parts; with --executor local the "
        "ranks share the process's GPUs) or auto (default: cuda where the run sees a GPU). "
        "Checkpoints are device-independent: a run resumes on either",
    )
    p.add_argument(
        "--prefetch",
        type=int,
        metavar="K",
        help="batches each worker samples and fetches ahead on a second thread while the "
        "current one computes (default 2; 0: one stage after the other). The result is "
        "identical at every K; each batch ahead costs one batch of memory",
    )


def _add_optim_flags(p: argparse.ArgumentParser) -> None:
    """Batch size and schedule, epochs and the optimiser's settings."""
    p.add_argument("--batch-size", type=int, help="seeds per batch per worker")
    p.add_argument(
        "--batch-schedule",
        choices=("global", "max"),
        help="global (default): each epoch has one part's steps for the global batch "
        "(batch-size x parts), ranks with more seeds take bigger batches; max: the largest "
        "rank's steps, no batch above --batch-size (less memory, more steps on unbalanced parts)",
    )
    p.add_argument("--epochs", type=int)
    p.add_argument("--lr", type=float)
    p.add_argument(
        "--weight-decay",
        type=float,
        help="Adam weight decay (L2), e.g. 5e-4 for GCN on Planetoid (default 0)",
    )
    p.add_argument(
        "--dropout",
        type=float,
        help="dropout probability after each hidden layer while training, in [0, 1) (default 0.5)",
    )


def add_feature_path_args(p: argparse.ArgumentParser) -> None:
    """The codec, cache and layer-0 flags (also used by ``gnnsys bench comm``).

    No ``choices`` here: each value is checked once, by the ``Config`` of the stage that uses it
    (``CodecConfig``, ``CacheConfig``, ``AdaptiveAdmission.Config``, ``FirstLayerConfig``), and
    a bad one fails ``build_config`` before anything starts.
    """
    p.add_argument(
        "--codec",
        help="codec of remote feature rows: fp32 (default), fp16, bf16, int8, int4, binary, or "
        "auto (smallest lossless codec the features admit, else --lossy-codec)",
    )
    p.add_argument("--lossy-codec", help="what --codec auto falls back to (default int8)")
    p.add_argument(
        "--wire",
        help="measure a lossless wire stage over the encoded rows: zstd or lz4 (bytes_wire)",
    )
    add_cache_args(p)
    p.add_argument(
        "--aggregate-at",
        help="where layer 1 aggregates remote neighbors: requester (rows travel, default), "
        "owner (partial sums travel; SAGE-mean and GCN), auto (fewer bytes per owner)",
    )
    p.add_argument(
        "--decode-halo",
        action="store_true",
        help="with --codec int8/int4, decode halo rows to float32 before layer 1 aggregates "
        "them (default: the fused kernels sum them from their codes; same bytes on the wire)",
    )


def add_cache_args(p: argparse.ArgumentParser) -> None:
    """The halo cache flags: policy and budget, plus ``add_cache_tuning_args``."""
    p.add_argument(
        "--cache-policy",
        help="halo cache admission (default none): degree = most in-edges into the part, "
        "presample = most accessed in a dry-run epoch, adaptive = online counts",
    )
    p.add_argument(
        "--cache-ratio",
        type=float,
        help="cache budget as a fraction of the worker's own fp32 feature bytes, e.g. 0.1; "
        "above 1 the cache may hold more than the part's own features (a halo can be larger)",
    )
    p.add_argument("--cache-mb", type=float, help="cache budget in MiB (overrides --cache-ratio)")
    p.add_argument(
        "--features-on",
        choices=("host", "device"),
        help="where a trainer keeps the feature rows it holds: host memory (default), or its "
        "device (its GPU): a copy of its own shard's rows and its halo cache's slots (the "
        "cache budget is then device memory); a batch's rows are gathered there and "
        "--codec int8/int4 rows are summed there. On a CPU run both are the host",
    )
    add_cache_tuning_args(p)


def add_cache_tuning_args(p: argparse.ArgumentParser) -> None:
    """Presample epochs and the adaptive policy's knobs (``gnnsys bench comm`` has them too)."""
    p.add_argument(
        "--presample-epochs", type=int, help="dry-run epochs behind presample/adaptive scores"
    )
    p.add_argument(
        "--cache-decay", type=float, help="adaptive: weight of history per batch (default 0.99)"
    )
    p.add_argument(
        "--cache-warm-weight",
        type=float,
        help="adaptive: multiplier of the presample warm-start counts (default 1)",
    )
    p.add_argument(
        "--cache-margin",
        type=float,
        help="adaptive: a fetched row displaces a cached one only if its count is higher by "
        "more than this many accesses (default 1)",
    )


def _pick(**kw: Any) -> dict[str, Any]:
    """The keyword arguments that were given (flags left out keep the preset's value)."""
    return {k: v for k, v in kw.items() if v is not None}


def cache_tuning(args: argparse.Namespace, base: CacheConfig) -> CacheConfig:
    """``base`` with ``--presample-epochs``, ``--features-on`` and the adaptive knobs applied."""
    adaptive = replace(
        base.adaptive,
        **_pick(
            decay=args.cache_decay, warm_weight=args.cache_warm_weight, margin=args.cache_margin
        ),
    )
    return replace(
        base,
        adaptive=adaptive,
        **_pick(
            presample_epochs=args.presample_epochs, placement=getattr(args, "features_on", None)
        ),
    )


def _add_eval_flags(p: argparse.ArgumentParser) -> None:
    """The sharded-evaluation flags of ``train``."""
    p.add_argument(
        "--eval-every",
        type=int,
        help="evaluate every N epochs and after the last (default 1; 0 never). Evaluation is "
        "exact and sharded: each worker computes its own nodes' full-neighbourhood outputs",
    )
    p.add_argument(
        "--eval-codec",
        help="codec of the halo embeddings exchanged during evaluation: fp32 (default, exact), "
        "fp16, bf16, int8 or int4",
    )
    p.add_argument(
        "--eval-halo-mb",
        type=float,
        help="MiB of halo rows a worker holds at once while evaluating (default 0: all at once)",
    )
    p.add_argument(
        "--eval-spill-mb",
        type=float,
        help="evaluation layer tables larger than this many MiB live in memory-mapped, "
        "immediately deleted files in TMPDIR (page cache the kernel can evict) instead of "
        "process memory; same results (default 0: all in memory)",
    )
    p.add_argument(
        "--eval-block-mb",
        type=float,
        help="source-blocked evaluation for tables larger than memory: SAGE mean/sum and GCN "
        "layers (heterogeneous SAGE per relation) sum neighbours for runs of nodes whose sums "
        "fit this many MiB, reading sources "
        "in ascending blocks (sequential passes, not one random read per edge); same results "
        "up to float rounding (default 0: off)",
    )
    p.add_argument(
        "--test-at-end",
        action="store_true",
        help="per-epoch evaluations report train and val only; test once, after the last epoch",
    )
    p.add_argument(
        "--metric",
        help="validation metric that picks the best epoch: acc, auc or f1 (default acc; auc for "
        "binary labels); with --task link mrr (default), hits@20, hits@50 or hits@100",
    )


def build_config(args: argparse.Namespace) -> Any:
    """The preset's ``RunConfig`` with the given flags applied."""
    from gnnsys.presets import PRESETS

    if args.preset not in PRESETS:
        raise ValueError(f"unknown preset {args.preset!r}; choose one of {sorted(PRESETS)}")
    cfg = PRESETS[args.preset]()
    if getattr(args, "config", None) is not None:
        cfg = type(cfg).from_toml(args.config, cfg)
    cfg = apply_link_args(args, cfg)

    def pick(**kw: Any) -> dict[str, Any]:
        return {k: v for k, v in kw.items() if v is not None}

    from gnnsys.options import parse_kv

    params = dict(cfg.data.dataset_params) | pick(num_nodes=args.num_nodes)
    params |= parse_kv(getattr(args, "dataset_param", []) or [])
    data = replace(
        cfg.data,
        **pick(dataset=args.dataset, root=args.root, store=args.store),
        **pick(partitioner=args.partitioner, feature_norm=args.feature_norm),
        dataset_params=tuple(sorted(params.items())),
    )
    from gnnsys.commands import _train_types

    hetero = _train_types.check_kind(args, data, cfg.hetero is not None)
    fanouts = None if args.fanouts is None or hetero else _parse_fanouts(args.fanouts)
    model_name = None if hetero else args.model
    codec_name = None if hetero else args.codec
    cfg = replace(
        cfg,
        data=data,
        cluster=replace(
            cfg.cluster,
            **pick(parts=args.parts, topology=args.topology, address=args.address),
            **pick(threads=args.threads, owner_reads=args.owner_reads, device=args.device),
        ),
        sampler=replace(cfg.sampler, **pick(fanouts=fanouts)),
        model=replace(
            cfg.model,
            **pick(name=model_name, hidden=args.hidden, dropout=args.dropout),
            **pick(args=parse_model_args(args.model_arg) or None),
        ),  # fmt: skip
        trainer=replace(
            cfg.trainer,
            **pick(batch_size=args.batch_size, lr=args.lr, seed=args.seed),
            **pick(weight_decay=args.weight_decay, schedule=args.batch_schedule),
            **pick(prefetch=args.prefetch),
        ),
        loop=replace(
            cfg.loop,
            resume=cfg.loop.resume or args.resume,
            progress=cfg.loop.progress and not args.no_progress and sys.stderr.isatty(),
            **pick(epochs=args.epochs, deadline_s=args.deadline),
            **pick(heartbeat_s=args.heartbeat_timeout, startup_deadline_s=args.startup_deadline),
            **pick(tensorboard=args.tensorboard),
        ),
        failure=replace(cfg.failure, **pick(max_restarts=args.max_restarts)),
        eval=replace(
            cfg.eval,
            **pick(every=args.eval_every, codec=args.eval_codec, metric=args.metric),
            **pick(halo_mb=args.eval_halo_mb, spill_mb=args.eval_spill_mb),
            **pick(block_mb=args.eval_block_mb),
            test_at_end=cfg.eval.test_at_end or args.test_at_end,
        ),
        codec=replace(cfg.codec, **pick(name=codec_name, lossy=args.lossy_codec, wire=args.wire)),
        cache=replace(
            cache_tuning(args, cfg.cache),
            **pick(policy=args.cache_policy, ratio=args.cache_ratio, mb=args.cache_mb),
        ),
        layer0=replace(
            cfg.layer0,
            **pick(placement=args.aggregate_at),
            fused_dequant=cfg.layer0.fused_dequant and not args.decode_halo,
        ),
    )
    return _train_types.build_hetero_config(args, cfg) if hetero else cfg


def _parse_fanouts(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(f) for f in text.split(","))
    except ValueError as err:
        raise ValueError(f"--fanouts {text!r}; use comma-separated ints, e.g. 15,10") from err


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
    if config.hetero is not None:
        from gnnsys.commands._train_types import print_type_bytes

        print_type_bytes(result.history)
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
