"""A run's settings as a TOML file: ``gnnsys train --config run.toml`` and ``RUN_DIR/config.toml``.

The file has one table per field of ``RunConfig`` (``[data]``, ``[cluster]``, ``[sampler]``,
``[model]``, ``[trainer]``, ``[loop]``, ``[failure]``, ``[codec]``, ``[cache]``, ``[layer0]``,
``[eval]``, ``[link]``, ``[node_types]``) and one key per field of that stage's ``Config``, with the
field's own name and meaning (``gnnsys train --help`` names the flag of each). Keys left out
keep the preset's value; a table ``[link]`` or ``[node_types]`` present turns that part on.

Reading is strict (:func:`apply_table`): an unknown table or key, a value of the wrong TOML type
and a value the stage's ``Config`` refuses each fail with the key's path (``[trainer]
batch_size``), what it takes, and the file's name. Values are applied one key at a time, so the
error names the key that is wrong, in the words of the ``Config`` that checks it.

Writing (:func:`dump`) gives the resolved settings of a run, every key, so the run can be repeated
from its file. TOML has no null: a field that is ``None`` (unset, every such field's default) is
left out, with a comment naming it.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import re
import sys
import types
import typing
from typing import Any

__all__ = ["apply_table", "dataclass_of", "dump", "field_types", "read"]

_BARE = re.compile(r"[A-Za-z0-9_-]+")


def read(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The TOML document at ``path`` (Python's ``tomllib``; ``tomli``, the same parser, on 3.10).

    Raises:
        ValueError: The file cannot be read or is not TOML (its line and column named).
    """
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

    try:
        with open(path, "rb") as fh:
            doc: dict[str, Any] = tomllib.load(fh)
            return doc
    except OSError as err:
        raise ValueError(f"{path}: cannot read it ({err.strerror})") from err
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{path}: not a TOML file: {err}") from err


def field_types(kind: type) -> dict[str, Any]:
    """The resolved type of every field of the dataclass ``kind``."""
    module = vars(sys.modules[kind.__module__])
    return typing.get_type_hints(kind, globalns=module, localns=dict(vars(kind)))


def _fields(kind: type) -> list[str]:
    return [f.name for f in dataclasses.fields(kind) if f.init]


def _where(path: tuple[str, ...]) -> str:
    """``("trainer", "batch_size")`` as ``[trainer] batch_size``; a table as ``[a.b]``."""
    return f"[{'.'.join(path[:-1])}] {path[-1]}" if len(path) > 1 else f"[{path[0]}]"


def dataclass_of(kind: Any) -> type | None:
    """The dataclass of ``kind`` or of ``kind | None``; ``None`` for other types."""
    for k in (kind, *typing.get_args(kind)):
        if dataclasses.is_dataclass(k) and isinstance(k, type):
            return k
    return None


RENAMED = {"hetero": "node_types"}
"""``RunConfig`` fields renamed since runs were first written: old name -> new. Read under
their old name from a ``summary.json``, a ``--config``/``config.toml`` file and a checkpoint's
identity (:func:`renamed_field`), so runs written before the rename load, resume and export."""


def renamed_keys(table: dict[str, Any]) -> dict[str, Any]:
    """``table``'s top-level keys under their current names (:data:`RENAMED`).

    An old name whose new one is also present stays as it is (refused as unknown where keys are
    checked).
    """
    return {RENAMED.get(k, k) if RENAMED.get(k) not in table else k: v for k, v in table.items()}


def renamed_field(name: str) -> str:
    """A dotted config field (``hetero.model``) under its current name (``node_types.model``)."""
    head, dot, rest = name.partition(".")
    return RENAMED.get(head, head) + dot + rest


def apply_table(base: Any, table: Any, path: tuple[str, ...], source: str) -> Any:
    """``base`` (a config dataclass) with the keys of ``table`` applied, one at a time.

    Args:
        base: The values the file's keys override (the preset's section).
        table: The TOML table read for it.
        path: Where the table sits in the file (``()`` for the whole file).
        source: The file's name, for errors.

    Raises:
        ValueError: ``SOURCE: [table] key: ...``: an unknown key (the known ones listed), a
            wrong type (the expected one named), or the ``Config``'s own refusal of the value.
    """
    kind = type(base)
    where = f"table {_where(path)}" if path else "the file"
    if not isinstance(table, dict):
        raise ValueError(f"{source}: {where} must be a table, got {table!r}")
    if not path:  # a table under a field's old name (``[hetero]``) is that field's
        table = renamed_keys(table)
    names, hints = _fields(kind), field_types(kind)
    unknown = sorted(set(table) - set(names))
    if unknown:
        what, listed = ("key", "keys") if path else ("table", "tables")
        raise ValueError(
            f"{source}: unknown {what} {_where((*path, unknown[0]))}; {where} takes the "
            f"{listed}: {', '.join(names)}"
        )
    for name in names:
        if name not in table:
            continue
        here = (*path, name)
        sub = dataclass_of(hints[name])
        current = getattr(base, name)
        if sub is not None:
            value = apply_table(sub() if current is None else current, table[name], here, source)
        else:
            value = _value(hints[name], table[name], here, source)
        try:
            base = dataclasses.replace(base, **{name: value})
        except (ValueError, TypeError) as err:
            raise ValueError(f"{source}: {_where(here)} = {_toml(table[name])}: {err}") from err
    return base


def _value(kind: Any, value: Any, path: tuple[str, ...], source: str) -> Any:
    """``value`` read from TOML as type ``kind``, or a ``ValueError`` naming the expected type."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)

    def wrong(expected: str) -> ValueError:
        return ValueError(
            f"{source}: {_where(path)} = {_toml(value)}: expected {expected}, got "
            f"{type(value).__name__}"
        )

    if origin in (typing.Union, types.UnionType):  # TOML has no null: the non-None type
        return _value(next(a for a in args if a is not type(None)), value, path, source)
    if kind is Any:
        return value
    if origin is tuple and _is_pairs(kind):
        if isinstance(value, dict):
            value = list(value.items())
        if not isinstance(value, list) or not all(
            isinstance(v, list | tuple) and len(v) == 2 for v in value
        ):
            raise wrong("a table of KEY = VALUE")
        item = typing.get_args(args[0])[1]
        if item is str:  # text kept for a later decode (``--model-arg``): JSON of other values
            return tuple((str(k), v if isinstance(v, str) else json.dumps(v)) for k, v in value)
        return tuple((str(k), _value(item, v, path, source)) for k, v in value)
    if origin is tuple:
        if not isinstance(value, list):
            raise wrong("an array")
        items = [args[0]] * len(value) if len(args) == 2 and args[1] is Ellipsis else args
        if len(value) != len(items):
            raise wrong(f"an array of {len(items)}")
        return tuple(
            _value(a, v, (*path[:-1], f"{path[-1]}[{i}]"), source)
            for i, (a, v) in enumerate(zip(items, value, strict=True))
        )
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        allowed = [str(e.value) for e in kind]
        if value not in allowed:
            raise ValueError(
                f"{source}: {_where(path)} = {_toml(value)}: choose one of {', '.join(allowed)}"
            )
        return kind(value)
    checks: dict[Any, tuple[tuple[type, ...], str]] = {
        bool: ((bool,), "true or false"),
        int: ((int,), "an integer"),
        float: ((int, float), "a number"),
        str: ((str,), "a string"),
    }
    if kind in checks:
        allowed_types, expected = checks[kind]
        if isinstance(value, bool) is not (kind is bool) or not isinstance(value, allowed_types):
            raise wrong(expected)
        return float(typing.cast(float, value)) if kind is float else value
    return value


def _is_pairs(kind: Any) -> bool:
    """Whether ``kind`` is ``tuple[tuple[str, X], ...]`` (written as an inline table)."""
    args = typing.get_args(kind)
    if len(args) != 2 or args[1] is not Ellipsis:
        return False
    inner = typing.get_args(args[0])
    return typing.get_origin(args[0]) is tuple and len(inner) == 2 and inner[0] is str


def dump(config: Any, header: str = "") -> str:
    """``config`` (a dataclass of config dataclasses) as a TOML document, every set key."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    for name in _fields(type(config)):
        value = getattr(config, name)
        if value is None:
            lines += ["", f"# [{name}]: not set"]
            continue
        _table(value, (name,), lines)
    return "\n".join(lines).lstrip("\n") + "\n"


def _table(section: Any, path: tuple[str, ...], lines: list[str]) -> None:
    """Append ``[path]`` and its keys, then its sub-tables, to ``lines``."""
    hints = field_types(type(section))
    lines += ["", f"[{'.'.join(path)}]"]
    subtables = []
    for name in _fields(type(section)):
        value = getattr(section, name)
        if value is None:
            lines.append(f"# {name}: not set")
        elif dataclasses.is_dataclass(value):
            subtables.append((name, value))
        elif _is_pairs(hints[name]):
            items = ", ".join(f"{_key(k)} = {_toml(v)}" for k, v in value)
            lines.append(f"{name} = {{ {items} }}" if items else f"{name} = {{}}")
        else:
            lines.append(f"{name} = {_toml(value)}")
    for name, value in subtables:
        _table(value, (*path, name), lines)


def _key(key: str) -> str:
    return key if _BARE.fullmatch(key) else json.dumps(key)


def _toml(value: Any) -> str:
    """One TOML value: strings (JSON's escapes are TOML's), numbers, booleans, arrays."""
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if value != value:
            return "nan"
        if value in (float("inf"), float("-inf")):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, int | str):
        return json.dumps(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(str(k))} = {_toml(v)}" for k, v in value.items()) + " }"
    raise ValueError(f"{value!r} ({type(value).__name__}) has no TOML form")
