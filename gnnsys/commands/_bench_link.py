"""``gnnsys bench comm --task link``: bytes per epoch of link training per cache x codec.

The link task's traffic differs from the node task's in what it fetches: each batch's seeds are
the endpoints of its positive links *and* of their uniform negatives, most of which other ranks
own, so the halo path (cache, codec) carries the negatives' features too. Every configuration
of the grid is a traffic replay (``train_local(traffic_only=True)``: the epochs' sampling and
fetching without the model; the bytes equal a training run's, see ``Trainer.replay_epoch``).
Accuracy is not part of this table: ``benchmarks/link_parity.py`` trains and reports MRR and
Hits@K per configuration.

Writes ``DIR/results.jsonl`` and ``DIR/results.md``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

__all__ = ["run_link_traffic"]


def run_link_traffic(
    args: argparse.Namespace, runs: Any, configs: list[Any], out: Path, *, baseline: tuple[Any, ...]
) -> int:
    """Replay every configuration and write the bytes table; returns the exit code 0.

    ``configs`` are ``bench_comm.CommConfig``; ``baseline`` the key of the row the
    reductions are relative to.
    """
    from gnnsys.store.diskio import atomic_write

    seeds = [int(v) for v in args.seeds.split(",") if v]
    rows = [{**c.fields(), **runs.traffic(c, seeds)} for c in configs]
    base = next(r for r in rows if tuple(_fields_key(r)) == baseline)
    for r in rows:
        r["bytes_reduction"] = base["remote_feature_bytes_per_epoch"] / max(
            r["remote_feature_bytes_per_epoch"], 1.0
        )
    rows.sort(key=lambda r: r["remote_feature_bytes_per_epoch"])
    setting = {
        "task": "link",
        "dataset": args.dataset,
        "parts": args.parts,
        "partitioner": args.partitioner,
        "fanouts": args.fanouts,
        "batch_size": args.batch_size,
        "epochs": args.epochs,
    }
    lines = "".join(json.dumps(setting | r) + "\n" for r in rows)
    atomic_write(out / "results.jsonl", lines.encode())
    atomic_write(out / "results.md", _markdown(rows, setting).encode())
    for r in rows:
        print(json.dumps(setting | r))
    return 0


def _fields_key(row: dict[str, Any]) -> tuple[Any, ...]:
    return (row["policy"], row["ratio"], row["codec"], row["aggregate_at"])


def _markdown(rows: list[dict[str, Any]], setting: dict[str, Any]) -> str:
    head = ", ".join(f"{k} {v}" for k, v in setting.items())
    text = [f"# gnnsys bench comm --task link: {setting['dataset']}", "", head, ""]
    text += [
        "| policy | ratio | codec | MB/epoch | steady MB/epoch | hit rate | reduction |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        text.append(
            f"| {r['policy']} | {r['ratio']:g} | {r['codec']} | "
            f"{r['remote_feature_bytes_per_epoch'] / 1e6:.3f} | "
            f"{r['steady_feature_bytes_per_epoch'] / 1e6:.3f} | {r['hit_rate']:.3f} | "
            f"{r['bytes_reduction']:.1f}x |"
        )
    return "\n".join(text) + "\n"
