"""Command-line flags made from config fields: each setting is declared once, in its field.

A command names which flag sets which field of its config (``{"--batch-size":
"trainer.batch_size", ...}``); everything else comes from the field itself:

- the value's type from its annotation (``int``, ``float``, ``str``; a ``bool`` field is a
  switch, which sets the field to true, or to false for a ``!`` path such as
  ``"!layer0.fused_dequant"``);
- the help text from its attribute docstring (read from the source with ``ast``; reST markup
  dropped), with the field's default when the docstring does not state one;
- validation from the ``Config``'s ``__post_init__``: flags have no ``choices`` of their own, so a
  bad value is refused once, in the words of the stage that uses it.

A flag left out is ``None`` (a switch ``False``), and :func:`apply_flags` leaves that field as
the preset or ``--config`` file set it. ``gnnsys train --config`` reads the same fields by
their own names (``gnnsys.run_file``).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import enum
import functools
import inspect
import re
import textwrap
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gnnsys.run_file import dataclass_of, field_types

__all__ = ["FieldFlag", "add_flags", "apply_flags", "field_doc", "field_flags"]

_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")  # :func:`x`, :meth:`~a.b` -> x, a.b
_LITERAL = re.compile(r"``([^`]+)``")


@dataclass(frozen=True, slots=True)
class FieldFlag:
    """One flag and the config field it sets."""

    flag: str
    """``--batch-size``."""
    path: tuple[str, ...]
    """The field's path from the root config, e.g. ``("trainer", "batch_size")``."""
    kind: Any
    """The field's type, ``None`` removed (``int``, ``float``, ``str`` or ``bool``)."""
    help: str
    invert: bool = False
    """A switch that sets a ``bool`` field to false (``--decode-halo``)."""
    metavar: str | None = None
    """The value's name in ``--help`` (default by type: ``N``, ``X``, ``NAME``)."""

    @property
    def dest(self) -> str:
        """The argparse attribute: ``--batch-size`` -> ``batch_size``."""
        return self.flag.lstrip("-").replace("-", "_")


@functools.cache
def _docs(kind: type) -> dict[str, str]:
    """Attribute docstrings of a dataclass: the string literal after each annotated field."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(kind)))
    except (OSError, TypeError):  # no source (a frozen application): help without text
        return {}
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef)).body
    out = {}
    for field, doc in zip(body, body[1:], strict=False):
        if (
            isinstance(field, ast.AnnAssign)
            and isinstance(field.target, ast.Name)
            and isinstance(doc, ast.Expr)
            and isinstance(doc.value, ast.Constant)
            and isinstance(doc.value.value, str)
        ):
            out[field.target.id] = doc.value.value
    return out


def field_doc(kind: type, name: str) -> str:
    """The docstring of field ``name`` of ``kind`` as plain text, on one line."""
    text = _LITERAL.sub(r"\1", _ROLE.sub(r"\1", _docs(kind).get(name, "")))
    return " ".join(text.split())


def field_flags(root: Any, table: Mapping[str, str]) -> tuple[FieldFlag, ...]:
    """The flags of ``table``: flag -> dotted field path of ``root``.

    ``"loop.tensorboard DIR"`` also names the metavar; ``"!layer0.fused_dequant"`` is a switch
    that sets the field to false.

    Args:
        root: The root config instance whose defaults the help names (e.g. ``RunConfig()``).
        table: Which flag sets which field.

    Raises:
        ValueError: A path that names no field, or a type a flag cannot parse.
    """
    out = []
    for flag, spec in table.items():
        field_path, _, metavar = spec.partition(" ")
        invert = field_path.startswith("!")
        path = tuple(field_path.lstrip("!").split("."))
        owner, value, kind = _field(root, path)
        if kind not in (int, float, str, bool) and not _is_enum(kind):
            raise ValueError(f"{flag} -> {spec}: a {kind} field cannot be one flag's value")
        doc = _help(field_doc(type(owner), path[-1]), flag)
        where = f"[{'.'.join(path[:-1])}] {path[-1]}"
        if invert:
            where = f"sets {where} = false"
        elif value is not None and kind is not bool and "default" not in doc:
            shown = value.value if _is_enum(kind) else value
            where = f"{where}, default {shown}"
        doc = f"{doc} ({where})" if doc else f"({where})"
        out.append(
            FieldFlag(flag, path, str if _is_enum(kind) else kind, doc, invert, metavar or None)
        )
    return tuple(out)


def _help(doc: str, flag: str) -> str:
    """A field's docstring as a flag's help: no mention of the flag itself, ``None`` as unset."""
    own = re.escape(flag)
    doc = re.sub(rf"\s*\({own}\)", "", doc)  # "width H (--hidden)" -> "width H"
    doc = re.sub(rf"\({own};\s*", "(", doc)  # "(--prefetch; 0: ...)" -> "(0: ...)"
    doc = re.sub(rf"[;,]\s*{own}\)", ")", doc)  # "(L2 penalty; --weight-decay)" -> "(L2 penalty)"
    return re.sub(r"\bNone\b", "unset", doc).rstrip(".")


def _is_enum(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, enum.Enum)


def _field(root: Any, path: tuple[str, ...]) -> tuple[Any, Any, Any]:
    """The config that holds the field at ``path``, the field's default value and its type."""
    owner = root
    for i, name in enumerate(path):
        hints = field_types(type(owner))
        if name not in hints:
            raise ValueError(f"{'.'.join(path)}: {type(owner).__name__} has no field {name!r}")
        if i == len(path) - 1:
            kind = hints[name]
            args = typing.get_args(kind)
            if type(None) in args:
                kind = next(a for a in args if a is not type(None))
            return owner, getattr(owner, name), kind
        sub = getattr(owner, name)
        owner = sub if sub is not None else dataclass_of(hints[name])()  # type: ignore[misc]
    raise ValueError("an empty field path")


def add_flags(parser: Any, flags: Sequence[FieldFlag]) -> None:
    """Add ``flags`` to ``parser`` (an ``ArgumentParser`` or an argument group)."""
    for f in flags:
        help_text = f.help.replace("%", "%%")
        if f.kind is bool:
            parser.add_argument(f.flag, dest=f.dest, action="store_true", help=help_text)
        else:
            metavar = f.metavar or {int: "N", float: "X", str: "NAME"}[f.kind]
            parser.add_argument(f.flag, dest=f.dest, type=f.kind, metavar=metavar, help=help_text)


def apply_flags(config: Any, args: argparse.Namespace, flags: Sequence[FieldFlag]) -> Any:
    """``config`` with the value of every flag of ``flags`` that was given.

    Raises:
        ValueError: The stage ``Config``'s own refusal of a value.
    """
    for f in flags:
        value = getattr(args, f.dest, None)
        if value is None or value is False:
            continue
        config = _set(config, f.path, not f.invert if f.kind is bool else value)
    return config


def _set(config: Any, path: tuple[str, ...], value: Any) -> Any:
    """``config`` with the field at ``path`` replaced, every config on the way rebuilt."""
    name = path[0]
    if len(path) > 1:
        hints = field_types(type(config))
        current = getattr(config, name)
        if current is None:
            current = dataclass_of(hints[name])()  # type: ignore[misc]
        value = _set(current, path[1:], value)
    return dataclasses.replace(config, **{name: value})
