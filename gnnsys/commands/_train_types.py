"""``gnnsys train`` on a heterogeneous dataset or store (``synthetic:mag``, ``ogb:ogbn-mag``).

``train.run`` hands a run here when the dataset is heterogeneous (``datasets.is_heterogeneous``) or
``--store`` is a heterogeneous store. The run goes through the same coordinator, executors,
failure policy, checkpoints, metrics lines and ledger as a homogeneous one
(``gnnsys.train.control.run``, with ``RunConfig.node_types`` set). Options that have no meaning
here are refused by name, before anything starts (:data:`NOT_FOR_HETERO`).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

__all__ = [
    "NOT_FOR_HETERO",
    "add_dataset_args",
    "build_node_types_config",
    "for_kind",
    "is_hetero_run",
    "parse_fanouts",
    "print_type_bytes",
]

NOT_FOR_HETERO: dict[str, str] = {}
"""Flags (argparse dest -> how to name it) refused for heterogeneous runs (none at present:
``--num-nodes`` sizes ``synthetic:mag`` too; ``--task link`` without ``--target-edge`` is
refused with its reason below; ``--model gcn`` runs where every relation leads from a type to
itself, checked by ``models.relational.check_gcn_relations``)."""


def add_dataset_args(p: argparse.ArgumentParser) -> None:
    """``-D KEY=VALUE`` (dataset options) and ``--embedding-dim``."""
    p.add_argument(
        "-D",
        "--dataset-param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="dataset option, repeatable (e.g. -D scale=0.01 -D reverse=true for synthetic:mag)",
    )
    p.add_argument(
        "--embedding-dim",
        type=int,
        help="heterogeneous: width of the learnable embeddings of featureless node types "
        "(default: the featured type's width)",
    )


def is_hetero_run(data: Any) -> bool:
    """Whether ``gnnsys train`` got a heterogeneous dataset or store (``data``: a DataConfig)."""
    from gnnsys.datasets import is_heterogeneous
    from gnnsys.store import is_hetero_store

    if data.store is not None:
        return is_hetero_store(data.store)
    return is_heterogeneous(data.dataset, data.root)


def for_kind(args: argparse.Namespace, cfg: Any, typed_settings: bool = False) -> Any:
    """``cfg`` with ``--model`` and ``--fanouts`` applied for the run's graph kind.

    The CLI's one switch on the kind: a heterogeneous dataset or store gets its
    ``RunConfig.node_types`` (:func:`build_node_types_config`); a homogeneous one refuses the
    heterogeneous-only flags and takes ``--model`` and ``--fanouts`` as they are.

    Args:
        args: The parsed ``gnnsys train`` flags.
        cfg: The run's ``RunConfig`` (flags over the ``--config`` file over the preset).
        typed_settings: The ``--config`` file has a ``[node_types]`` table.

    Raises:
        ValueError: ``--model rgcn``, ``--embedding-dim`` or a ``[node_types]`` table on a
            homogeneous dataset; a malformed ``--fanouts``.
    """
    if is_hetero_run(cfg.data):
        return build_node_types_config(args, cfg)
    _refuse_typed_flags(args)
    if typed_settings:
        raise ValueError(
            f"--config {args.config}: table [node_types] applies to heterogeneous datasets "
            f"only, and {cfg.data.store or cfg.data.dataset} has one node type: drop the table"
        )
    if args.model is not None:
        cfg = replace(cfg, model=replace(cfg.model, name=args.model))
    if getattr(args, "model_arg", None):  # after the name: the args are the named model's
        from gnnsys.models.pyg_user import parse_model_args

        cfg = replace(cfg, model=replace(cfg.model, args=parse_model_args(args.model_arg)))
    if args.fanouts is not None:
        cfg = replace(cfg, sampler=replace(cfg.sampler, fanouts=parse_fanouts(args.fanouts)))
    return cfg


def parse_fanouts(text: str) -> tuple[int, ...]:
    """``--fanouts 15,10`` of a homogeneous run."""
    try:
        return tuple(int(f) for f in text.split(","))
    except ValueError as err:
        raise ValueError(f"--fanouts {text!r}; use comma-separated ints, e.g. 15,10") from err


def _refuse_typed_flags(args: argparse.Namespace) -> None:
    """The flags that only a typed graph gives a meaning, on a homogeneous dataset."""
    from gnnsys.models.registry import REGISTRY

    kind = REGISTRY.get(args.model)
    if kind is not None and not kind.one_type:
        offered = ", ".join(n for n, k in REGISTRY.items() if k.one_type)
        raise ValueError(
            f"--model {args.model} takes a heterogeneous dataset (e.g. synthetic:mag); choose "
            f"{offered} for this one"
        )
    if getattr(args, "embedding_dim", None) is not None:
        raise ValueError("--embedding-dim applies to heterogeneous datasets only; drop it")
    if getattr(args, "target_edge", None) is not None:
        raise ValueError(
            "--target-edge names a relation of a heterogeneous dataset; a homogeneous graph's "
            "links are its edges: drop it"
        )


def _refuse_flags(args: argparse.Namespace) -> None:
    given = [name for dest, name in NOT_FOR_HETERO.items() if _given(args, dest)]
    if args.task == "link" and not args.target_edge:
        raise ValueError(
            "--task link on a heterogeneous dataset needs the relation to predict: add "
            "--target-edge SRC__REL__DST, e.g. paper__cites__paper"
        )
    from gnnsys.models.pyg_user import BUILTIN

    if args.model is not None and args.model not in BUILTIN:  # not one of gnnsys's models
        given.append(
            f"--model {args.model} (a PyG model runs on a homogeneous graph here; for typed "
            "graphs use to_hetero(your model) in your own loop on "
            "gnnsys.distributed.DistNeighborLoader, or --model sage|gcn|gat|rgcn)"
        )
    if getattr(args, "model_arg", None):
        given.append("--model-arg (for a PyG --model on a homogeneous graph)")
    if given:
        raise ValueError("options that do not apply to heterogeneous training: " + "; ".join(given))


def _given(args: argparse.Namespace, dest: str) -> bool:
    value = getattr(args, dest, None)
    return value not in (None, False)


def build_node_types_config(args: argparse.Namespace, cfg: Any) -> Any:
    """``cfg`` (the homogeneous ``build_config`` result) turned into a heterogeneous run.

    ``--fanouts`` may be one list or ``src__rel__dst=...`` entries; ``--model`` any name of
    ``models.registry.REGISTRY``; ``-D key=value`` go to the dataset (``--codec``'s
    ``type=name`` pairs reach ``CodecConfig`` as every flag does).

    Raises:
        ValueError: A flag that does not apply (named), or a malformed value.
    """
    from gnnsys.train.node_types import NodeTypesConfig, parse_relation_fanouts

    _refuse_flags(args)
    hetero = (
        cfg.node_types or NodeTypesConfig()
    )  # a --config file's [node_types], else the defaults
    if args.model is not None:
        hetero = replace(hetero, model=args.model)
    sampler = cfg.sampler
    if args.fanouts is not None:
        default, named = parse_relation_fanouts(args.fanouts)
        hetero = replace(hetero, fanouts=named)
        if default:
            sampler = replace(sampler, fanouts=default)
    if getattr(args, "embedding_dim", None) is not None:
        hetero = replace(hetero, embedding_dim=args.embedding_dim)
    return replace(cfg, sampler=sampler, node_types=hetero)


def print_type_bytes(history: list[dict[str, Any]]) -> None:
    """Training MiB per epoch by node type (all categories of that type added)."""
    types = sorted({t for m in history for t in m.get("bytes_by_type", {})})
    if not types:
        return
    head = f"{'epoch':>5} " + " ".join(f"{t[:14] + ' MiB':>18}" for t in types)
    print(head)
    print("-" * len(head))
    for m in history:
        by_type = m.get("bytes_by_type", {})
        cells = " ".join(f"{sum(by_type.get(t, {}).values()) / 2**20:>18.2f}" for t in types)
        print(f"{m['epoch']:>5} {cells}")
