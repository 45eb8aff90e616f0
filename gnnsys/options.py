"""``KEY=VALUE`` options (``-D``, ``-O``, ``--model-arg``): JSON scalars and comma tuples."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["parse_kv"]


def parse_kv(items: list[str]) -> dict[str, Any]:
    """``["a=1", "b=x,y"]`` -> ``{"a": 1, "b": ("x", "y")}`` (JSON scalars, comma tuples).

    Raises:
        ValueError: An item without ``=``.
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ValueError(f"option {item!r} is not KEY=VALUE; write e.g. seed=1 or passes=3")
        values = [_scalar(v) for v in raw.split(",")] if "," in raw else None
        out[key] = tuple(values) if values is not None else _scalar(raw)
    return out


def _scalar(raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw
