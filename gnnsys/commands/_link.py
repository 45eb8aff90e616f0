"""The link-prediction flags of ``gnnsys train`` and ``gnnsys bench comm`` (``--task link``).

``--task link`` holds out ``--val-edges`` / ``--test-edges`` of the undirected links (seeded by
``--split-seed``), gives each held-out link ``--eval-negatives`` fixed negatives, trains the
encoder with a ``--decoder`` over positive links and ``--neg-per-pos`` uniform negatives, and
evaluates MRR and Hits@20/50/100 exactly (docs/link_prediction.md). The other flags are refused
without it, so a forgotten ``--task link`` is an error, not a node run.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

__all__ = ["add_link_args", "apply_link_args", "link_split_of", "print_link_table"]

_LINK_FLAGS = (
    "val_edges",
    "test_edges",
    "eval_negatives",
    "split_seed",
    "decoder",
    "neg_per_pos",
    "target_edge",
)


def add_link_args(p: argparse.ArgumentParser, *, target_edge: bool = False) -> None:
    """Register ``--task`` and the link-prediction flags.

    ``target_edge``: also ``--target-edge``, for commands that take heterogeneous datasets.
    """
    p.add_argument(
        "--task",
        choices=("node", "link"),
        default="node",
        help="node classification (default) or link prediction (MRR, Hits@K)",
    )
    p.add_argument("--val-edges", type=float, help="link: fraction of links held out (0.1)")
    p.add_argument("--test-edges", type=float, help="link: fraction of links for test (0.1)")
    p.add_argument(
        "--eval-negatives", type=int, help="link: fixed negatives per held-out link (1000)"
    )
    p.add_argument("--split-seed", type=int, help="link: seed of the held-out split (0)")
    p.add_argument("--decoder", help="link: pair scorer, dot (default) or mlp")
    p.add_argument("--neg-per-pos", type=int, help="link: training negatives per positive (1)")
    if not target_edge:  # gnnsys train's relations to predict
        return
    p.add_argument(
        "--target-edge",
        metavar="SRC__REL__DST",
        help="link, heterogeneous datasets: the relation to predict, e.g. paper__cites__paper "
        "or author__writes__paper (its held-out links and their reverses leave the graph)",
    )


def _pick(**kw: Any) -> dict[str, Any]:
    return {k: v for k, v in kw.items() if v is not None}


def _check_task(args: argparse.Namespace) -> bool:
    """Whether the task is link; link flags without ``--task link`` raise ``ValueError``."""
    given = [f for f in _LINK_FLAGS if getattr(args, f, None) is not None]
    if getattr(args, "task", "node") == "link":
        return True
    if given:
        flags = ", ".join("--" + f.replace("_", "-") for f in given)
        raise ValueError(f"{flags} only apply to link prediction; add --task link")
    return False


def link_split_of(args: argparse.Namespace, base: Any = None) -> Any:
    """The ``LinkSplitConfig`` the flags ask for (from ``base``), or ``None`` for a node task."""
    from gnnsys.datasets.link_split import LinkSplitConfig

    if not _check_task(args):
        return None
    return replace(
        base or LinkSplitConfig(),
        **_pick(val=args.val_edges, test=args.test_edges, num_neg=args.eval_negatives),
        **_pick(seed=args.split_seed, edge_type=getattr(args, "target_edge", None)),
    )


def apply_link_args(args: argparse.Namespace, cfg: Any) -> Any:
    """``cfg`` with the link task applied (``args.task == "link"``), else unchanged.

    Raises:
        ValueError: A link flag without ``--task link``, or a value its config refuses.
    """
    from gnnsys.train.link.config import LinkConfig

    split = link_split_of(args, cfg.data.link_split)
    if split is None:
        return cfg
    link = replace(
        cfg.link or LinkConfig(), **_pick(decoder=args.decoder, neg_per_pos=args.neg_per_pos)
    )
    return replace(cfg, data=replace(cfg.data, link_split=split), link=link)


def _cell(value: float | None) -> str:
    return f"{'-':>8}" if value is None else f"{value:>8.4f}"


def print_link_table(history: list[dict[str, Any]]) -> None:
    """The per-epoch table of a link run (``-`` where an epoch was not evaluated)."""
    keys = ("val_mrr", "val_hits@50", "test_mrr", "test_hits@20", "test_hits@50", "test_hits@100")
    labels = ("val mrr", "val h@50", "test mrr", "t h@20", "t h@50", "t h@100")
    head = f"{'epoch':>5} {'loss':>8} " + " ".join(f"{k:>8}" for k in labels)
    head += f" {'sec':>7} {'eval s':>7} {'MiB sent':>9} {'feat MiB':>9}"
    print(head)
    print("-" * len(head))
    for m in history:
        mib = sum(m["bytes"].values()) / 2**20
        feat = sum(v for k, v in m["bytes"].items() if k.startswith(("feature_", "partial_")))
        cells = " ".join(_cell(m.get(k)) for k in keys)
        print(
            f"{m['epoch']:>5} {m['loss']:>8.4f} {cells} {m['seconds']['total']:>7.1f} "
            f"{m['seconds']['eval']:>7.2f} {mib:>9.1f} {feat / 2**20:>9.2f}"
        )
