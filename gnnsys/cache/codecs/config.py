"""``CodecConfig``: the codec remote feature rows travel in, validated and resolved in one place.

A name becomes a codec object only here (:meth:`CodecConfig.make`); ``fp32`` is an ``FP32Codec``
like any other, so no caller branches on "no codec". ``auto`` is resolved once, on the driver,
from the features (:meth:`CodecConfig.resolve`) before the config reaches the workers.

Heterogeneous graphs may name one codec per node type (``--codec paper=int8,author=fp16``):
:class:`PerTypeCodecConfig` parses such a spec against the graph's node
types. ``CodecConfig`` accepts the spec as its ``name`` (checking its syntax and codec names, so
the CLI can carry it), but only a plain name makes a codec; a homogeneous run given a per-type
spec stops at :meth:`CodecConfig.resolve` or :meth:`CodecConfig.make` with a message.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from torch import Tensor

from gnnsys.cache.codecs.auto import AutoCodec
from gnnsys.cache.codecs.base import Codec
from gnnsys.cache.codecs.binary import is_binary

__all__ = [
    "WIRE_STAGES",
    "CodecConfig",
    "PerTypeCodecConfig",
    "is_per_type_spec",
    "split_codec_spec",
]

log = logging.getLogger(__name__)

WIRE_STAGES = ("zstd", "lz4")
"""Lossless wire stages a run may measure (``lz4`` needs the optional ``lz4`` package)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CodecConfig:
    """How remote feature rows are encoded by their owners (``--codec``, ``--wire``)."""

    name: str = "fp32"
    """Codec of remote feature rows, in ``gnnsys.cache.codecs.CODECS``: ``fp32`` (plain float
    rows), ``fp16``, ``bf16``, ``int8``, ``int4``, ``binary``, or ``auto``: the smallest codec
    that is exact on the features, else ``lossy`` (:meth:`resolve`). A typed run also takes
    ``type=name`` pairs, e.g. ``paper=int8,author=fp16``."""
    lossy: str = "int8"
    """What ``auto`` picks when no lossless codec fits the features."""
    wire: str | None = None
    """Optional lossless wire stage over encoded rows: ``zstd`` or ``lz4``, measured into the
    cache counters' ``bytes_wire`` (so only with a cache); the ledger counts the codec's bytes."""

    def __post_init__(self) -> None:
        from gnnsys.cache.codecs import CODECS

        if is_per_type_spec(self.name):
            split_codec_spec(self.name)  # syntax and codec names; types are checked by parse
        elif self.name not in CODECS:
            raise ValueError(f"codec name={self.name!r}; choose one of {sorted(CODECS)}")
        if self.lossy not in CODECS or self.lossy in ("auto", "binary"):
            raise ValueError(
                f"codec lossy={self.lossy!r}; auto falls back to fp32, fp16, bf16, int8 or int4"
            )
        if self.wire is not None and self.wire not in WIRE_STAGES:
            raise ValueError(f"codec wire={self.wire!r}; choose zstd, lz4 or leave it unset")

    def resolve(self, x_NF: Tensor) -> CodecConfig:
        """This config with ``auto`` replaced by what ``AutoCodec`` picks for ``x_NF``.

        Costs one encode and decode per candidate over ``x_NF``; call it once, on the driver.
        """
        self._plain("resolve")
        if self.name != "auto":
            return self
        chosen = AutoCodec(lossy=self.lossy).resolve(x_NF)
        log.info("codec auto -> %s", chosen.name)
        return replace(self, name=chosen.name)

    def resolve_chunks(self, chunks: Callable[[], Iterable[Tensor]]) -> CodecConfig:
        """:meth:`resolve` over the rows of ``chunks()`` without concatenating them.

        ``chunks`` is called once per candidate tried (``AutoCodec.resolve_chunks``), so the
        driver never holds the whole feature matrix.
        """
        self._plain("resolve_chunks")
        if self.name != "auto":
            return self
        chosen = AutoCodec(lossy=self.lossy).resolve_chunks(chunks)
        log.info("codec auto -> %s", chosen.name)
        return replace(self, name=chosen.name)

    def make(self) -> Codec:
        """The codec object (``FP32Codec`` for ``fp32``).

        Raises:
            ValueError: ``name`` is still ``auto`` (resolve it on the driver first), or a
                per-type spec (``PerTypeCodecConfig.from_config`` makes one codec per type).
        """
        from gnnsys.cache.codecs import make_codec

        self._plain("make")
        if self.name == "auto":
            raise ValueError("codec name='auto' is unresolved; call CodecConfig.resolve(x) first")
        return make_codec(self.name)

    @property
    def per_type(self) -> bool:
        """Whether ``name`` is a per-type spec (``paper=int8,*=fp16``) rather than one codec."""
        return is_per_type_spec(self.name)

    def _plain(self, what: str) -> None:
        if is_per_type_spec(self.name):
            raise ValueError(
                f"codec {self.name!r} names a codec per node type, which only a heterogeneous "
                f"graph has ({what} needs one codec); pass one codec name, e.g. --codec int8"
            )


def is_per_type_spec(spec: str) -> bool:
    """Whether ``spec`` names codecs per node type (it has ``=`` or ``,``), not one codec."""
    return "=" in spec or "," in spec


def split_codec_spec(spec: str) -> tuple[str | None, tuple[tuple[str, str], ...]]:
    """The default codec and the ``(node type, codec)`` pairs of a per-type spec, in order.

    Grammar: entries separated by commas; an entry is ``TYPE=NAME``, ``*=NAME`` or a bare
    ``NAME`` (both: the codec of every type not named). Spaces around parts are ignored. Node
    types are not checked here (:meth:`PerTypeCodecConfig.parse` knows the graph's).

    Raises:
        ValueError: An empty entry or part, an unknown codec, two defaults, or a type named
            twice; the message names the entry and the fix.
    """
    from gnnsys.cache.codecs import CODECS

    default: str | None = None
    named: dict[str, str] = {}
    for entry in (e.strip() for e in spec.split(",")):
        if not entry:
            raise ValueError(
                f"codec spec {spec!r} has an empty entry; separate TYPE=NAME entries by single "
                "commas, e.g. 'paper=int8,*=fp16'"
            )
        node_type, sep, name = (part.strip() for part in entry.partition("="))
        if not sep:
            node_type, name = "*", entry
        if not node_type or not name:
            raise ValueError(
                f"codec spec entry {entry!r} needs both a node type and a codec: TYPE=NAME "
                "(e.g. 'paper=int8') or '*=NAME' for every other type"
            )
        if name not in CODECS:
            who = "the default" if node_type == "*" else f"node type {node_type!r}"
            raise ValueError(
                f"codec spec {spec!r}: unknown codec {name!r} for {who}; choose one of "
                f"{sorted(CODECS)}"
            )
        if node_type == "*":
            if default is not None:
                raise ValueError(
                    f"codec spec {spec!r} gives the default twice ({default!r}, {name!r}); "
                    "give one bare NAME or '*=NAME'"
                )
            default = name
        elif node_type in named:
            raise ValueError(
                f"codec spec {spec!r} names node type {node_type!r} twice "
                f"({named[node_type]!r}, {name!r}); give each type once"
            )
        else:
            named[node_type] = name
    return default, tuple(named.items())


Chunks = Callable[[], Iterable[Tensor]]
"""Rows of one node type as a callable returning an iterable of ``[n, F]`` chunks (re-callable)."""

_CAST_MAX_ABS = {"fp16": 65504.0}
"""Largest magnitude a cast codec holds (bf16 and fp32 hold every finite float32)."""


@dataclass(frozen=True, slots=True)
class PerTypeCodecConfig:
    """One ``CodecConfig`` per node type of a heterogeneous graph (``--codec`` per type).

    Build it with :meth:`parse` (or :meth:`from_config`); every type of the graph has an entry,
    in the graph's order, so ``for_type`` never guesses. Pickles to Ray actors like
    ``CodecConfig`` (plain frozen records).
    """

    by_type: tuple[tuple[str, CodecConfig], ...]
    """``(node type, its codec config)`` for every node type, in the graph's order."""

    def __post_init__(self) -> None:
        types = [t for t, _ in self.by_type]
        if not types:
            raise ValueError("PerTypeCodecConfig needs at least one node type; pass the graph's")
        dups = sorted({t for t in types if types.count(t) > 1})
        if dups:
            raise ValueError(f"PerTypeCodecConfig lists node types {dups} twice; list each once")
        nested = [t for t, c in self.by_type if c.per_type]
        if nested:
            raise ValueError(f"node types {nested} hold a per-type spec; give each one codec name")

    @classmethod
    def parse(
        cls, spec: str, node_types: Sequence[str], *, lossy: str = "int8", wire: str | None = None
    ) -> PerTypeCodecConfig:
        """Per-type codecs from ``spec``: ``int8`` (every type) or ``paper=int8,*=fp16``.

        Types the spec does not name take its default (a bare ``NAME`` or ``*=NAME``), else
        ``fp32`` (the codec of a run without ``--codec``).

        Args:
            spec: The ``--codec`` value; grammar in :func:`split_codec_spec`.
            node_types: The graph's node types, in its order.
            lossy: What ``auto`` falls back to (``--lossy-codec``), for every type.
            wire: Optional lossless wire stage (``--wire``), for every type.

        Raises:
            ValueError: Bad syntax, an unknown codec, two defaults, a type named twice, a type
                the graph lacks, or no or repeated ``node_types``.
        """
        types = list(node_types)
        if not types or len(set(types)) != len(types):
            raise ValueError(f"node_types={types}; pass the graph's node types, each once")
        default, named = split_codec_spec(spec)
        for node_type, _ in named:
            if node_type not in types:
                raise ValueError(
                    f"codec spec {spec!r} names node type {node_type!r}, which this graph "
                    f"lacks; its node types are {types} (or use '*=NAME' for every other type)"
                )
        names = dict(named)
        fallback = default if default is not None else "fp32"
        return cls(
            tuple(
                (t, CodecConfig(name=names.get(t, fallback), lossy=lossy, wire=wire)) for t in types
            )
        )

    @classmethod
    def from_config(cls, config: CodecConfig, node_types: Sequence[str]) -> PerTypeCodecConfig:
        """:meth:`parse` of a run's ``CodecConfig`` (its ``name`` may be a per-type spec)."""
        return cls.parse(config.name, node_types, lossy=config.lossy, wire=config.wire)

    @property
    def node_types(self) -> list[str]:
        """Node types in the graph's order."""
        return [t for t, _ in self.by_type]

    @property
    def spec(self) -> str:
        """Canonical spec naming every type, e.g. ``paper=int8,author=fp32`` (for logs)."""
        return ",".join(f"{t}={c.name}" for t, c in self.by_type)

    def for_type(self, node_type: str) -> CodecConfig:
        """The ``CodecConfig`` of ``node_type``.

        Raises:
            ValueError: ``node_type`` is not one of :attr:`node_types`.
        """
        for t, config in self.by_type:
            if t == node_type:
                return config
        raise ValueError(f"node type {node_type!r} has no codec; known types: {self.node_types}")

    def codecs(self) -> dict[str, Codec]:
        """Node type -> its codec object.

        Raises:
            ValueError: A type's codec is still ``auto``; call :meth:`resolve` on the driver.
        """
        return {t: config.make() for t, config in self.by_type}

    def resolve(self, x_by_type: Mapping[str, Tensor | None]) -> PerTypeCodecConfig:
        """:meth:`resolve_chunks` over whole feature matrices (``None``: a featureless type)."""
        return self.resolve_chunks(
            {t: None if x is None else _one_chunk(x) for t, x in x_by_type.items()}
        )

    def resolve_chunks(self, chunks_by_type: Mapping[str, Chunks | None]) -> PerTypeCodecConfig:
        """``auto`` resolved per type from its rows, and every type's codec checked against them.

        A type absent from ``chunks_by_type`` or mapped to ``None`` has no feature rows (its
        rows are learnable embeddings, whose values change in training): its ``auto`` becomes
        ``fp32``, exact for any rows, and ``binary`` is refused for it. ``binary`` on rows not
        all 0/1 and ``fp16`` on rows above 65504 are refused here, once, on the driver, instead
        of in an owner's first encode. Costs ``CodecConfig.resolve_chunks`` per ``auto`` type
        plus one pass over the rows of each ``binary`` or ``fp16`` type.

        Raises:
            ValueError: A codec a type's rows cannot take; the message names the type and fix.
        """
        unknown = sorted(set(chunks_by_type) - set(self.node_types))
        if unknown:
            raise ValueError(f"features given for node types {unknown}; known: {self.node_types}")
        out = []
        for t, config in self.by_type:
            chunks = chunks_by_type.get(t)
            if config.name == "auto":
                config = (
                    config.resolve_chunks(chunks)
                    if chunks is not None
                    else replace(config, name="fp32")
                )
            _check_rows(t, config.name, chunks, self.spec)
            out.append((t, config))
        return PerTypeCodecConfig(tuple(out))


def _one_chunk(x: Tensor) -> Chunks:
    return lambda: (x,)


def _check_rows(node_type: str, name: str, chunks: Chunks | None, spec: str) -> None:
    """Raise unless codec ``name`` can hold every row of ``chunks`` (``None``: embeddings)."""
    if name == "binary" and chunks is None:
        raise ValueError(
            f"codec spec {spec!r} gives binary to node type {node_type!r}, which has no "
            f"features (its rows are learnable embeddings); give it another codec, e.g. "
            f"{node_type}=fp32"
        )
    if name == "binary" and chunks is not None and not all(is_binary(x) for x in chunks()):
        raise ValueError(
            f"codec spec {spec!r} gives binary to node type {node_type!r}, whose features are "
            f"not all 0/1; give it auto or a lossy codec, e.g. {node_type}=int8"
        )
    limit = _CAST_MAX_ABS.get(name)
    if limit is not None and chunks is not None:
        peak = max((float(x.abs().max()) for x in chunks() if x.numel()), default=0.0)
        if peak > limit:
            raise ValueError(
                f"codec spec {spec!r} gives {name} to node type {node_type!r}, whose features "
                f"reach |x| = {peak:.4g} > {limit:.4g}; give it bf16 or fp32, e.g. "
                f"{node_type}=bf16"
            )
