"""Codec interface and the encoded-row record every codec emits.

A codec turns float feature rows into a compact, row-addressable form that stays compressed in
the halo cache and on the wire. Every codec uses the same three-tensor layout, so selecting,
concatenating and storing rows is codec-agnostic (``take``, ``concat``, ``put``):

- ``data``:  ``[N, W]`` payload, one fixed-width row per node (dtype depends on the codec);
- ``scale``: ``[N]`` float16 per-row step, or ``None``;
- ``zero``:  ``[N]`` float16 per-row zero point, or ``None``.

For the affine codecs (``int8``, ``int4``), ``x ~= (q.float() - zero.float()) * scale.float()``:
the layout ``gnnsys.kernels.aggregate(x, rowptr, col, reduce, scale=, zero=)`` consumes.

Shape legend: ``N`` rows (nodes), ``F`` feature dim, ``W`` payload width in elements of ``data``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from torch import Tensor

__all__ = ["Codec", "EncodedRows", "check_features", "concat", "put", "take"]


@dataclass(frozen=True, slots=True, eq=False)
class EncodedRows:
    """Feature rows in a codec's wire/cache format.

    Attributes:
        codec: Registry name of the codec that produced the rows (``CODECS[codec]`` decodes).
        num_cols: ``F``, the decoded feature dim (the payload may be padded, e.g. int4, binary).
        data: ``[N, W]`` payload, contiguous.
        scale: ``[N]`` float16 per-row step, or ``None`` for codecs without one.
        zero: ``[N]`` float16 per-row zero point, or ``None``.
    """

    codec: str
    num_cols: int
    data: Tensor
    scale: Tensor | None = None
    zero: Tensor | None = None

    def __post_init__(self) -> None:
        if self.data.dim() != 2:
            raise ValueError(f"EncodedRows.data must be [N, W], got shape {tuple(self.data.shape)}")
        n = self.data.shape[0]
        for name, aux in (("scale", self.scale), ("zero", self.zero)):
            if aux is not None and tuple(aux.shape) != (n,):
                raise ValueError(
                    f"EncodedRows.{name} has shape {tuple(aux.shape)}; expected ({n},)"
                )

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        """Pickle the tensors as numpy arrays, which Ray moves out of band.

        A torch tensor pickles its storage in band (one more copy of every row on the sender
        before Ray writes it to the object store); a numpy array is written straight into the
        object store (pickle protocol 5). The receiver gets its own writable copy
        (:func:`_rebuild_rows`), so nothing aliases the read-only object store.
        """
        arrays = tuple(
            None if t is None else _wire_array(t) for t in (self.data, self.scale, self.zero)
        )
        return _rebuild_rows, (self.codec, self.num_cols, str(self.data.dtype), *arrays)

    @property
    def num_rows(self) -> int:
        """``N``."""
        return int(self.data.shape[0])

    def to(self, device: torch.device | str) -> EncodedRows:
        """These rows on ``device`` (``self`` when they are there already), still encoded."""
        device = torch.device(device)
        if self.data.device == device:
            return self
        return EncodedRows(
            self.codec,
            self.num_cols,
            self.data.to(device),
            None if self.scale is None else self.scale.to(device),
            None if self.zero is None else self.zero.to(device),
        )

    @property
    def nbytes(self) -> int:
        """Exact bytes of the tensors that would be sent: payload plus per-row metadata."""
        total = self.data.numel() * self.data.element_size()
        for aux in (self.scale, self.zero):
            if aux is not None:
                total += aux.numel() * aux.element_size()
        return int(total)


def _wire_array(t: Tensor) -> np.ndarray:
    """A numpy view of ``t`` (bfloat16, which numpy lacks, as its int16 bits)."""
    t = t.detach().contiguous()
    return (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy()


def _rebuild_rows(
    codec: str,
    num_cols: int,
    dtype: str,
    data: np.ndarray,
    scale: np.ndarray | None,
    zero: np.ndarray | None,
) -> EncodedRows:
    """The receiving end of :meth:`EncodedRows.__reduce__`: private copies of the arrays."""

    def tensor(a: np.ndarray | None) -> Tensor | None:
        return None if a is None else torch.from_numpy(np.array(a, copy=True))

    payload = tensor(data)
    assert payload is not None
    if dtype == str(torch.bfloat16):
        payload = payload.view(torch.bfloat16)
    return EncodedRows(codec, num_cols, payload, tensor(scale), tensor(zero))


class Codec(Protocol):
    """Encodes float rows to ``EncodedRows`` and back; one frozen object per configuration."""

    @property
    def name(self) -> str:
        """Registry name written into every ``EncodedRows.codec``."""
        ...

    @property
    def lossless(self) -> bool:
        """True when ``decode(encode(x)) == x`` for every input the codec accepts."""
        ...

    @property
    def fused_aggregate(self) -> bool:
        """True when ``gnnsys.kernels.aggregate`` sums rows straight from their codes.

        The rows are affine (``data``, ``scale``, ``zero``), the layout the fused dequantizing
        kernel reads, so a linear first layer never decodes them (int8, int4).
        """
        ...

    @property
    def partial_sums(self) -> bool:
        """True when owner-side partial sums may travel in this codec.

        Sums grow with the number of rows summed: a codec that cannot hold a sum's range
        (``fp16`` overflows at 65504) or its values (``binary``) says False, and the sums then
        travel as float32.
        """
        ...

    def encode(self, x_NF: Tensor) -> EncodedRows:
        """Encode ``[N, F]`` float rows (float32/float16/bfloat16)."""
        ...

    def decode(self, enc: EncodedRows) -> Tensor:
        """Decode to ``[N, F]`` float32."""
        ...

    def nbytes(self, enc: EncodedRows) -> int:
        """Exact bytes of ``enc``'s tensors (what one transfer of these rows costs)."""
        ...

    def row_nbytes(self, num_cols: int) -> int:
        """Exact bytes one encoded row of ``num_cols`` features occupies."""
        ...

    def empty(self, num_rows: int, num_cols: int) -> EncodedRows:
        """Uninitialised storage for ``num_rows`` rows (the cache's slot arrays)."""
        ...


def all_finite(x: Tensor) -> bool:
    """Whether every value of ``x`` is finite, exactly.

    A NaN or inf makes the sum non-finite, so a finite sum settles it in one pass without a
    mask (``torch.isfinite(x).all()`` costs ~25x more on CPU: it builds a bool tensor). Only
    a non-finite sum (a bad value, or finite values whose sum overflows) takes the exact check.
    """
    if bool(torch.isfinite(x.sum())):
        return True
    return bool(torch.isfinite(x).all())


def check_features(x_NF: Tensor, codec: str) -> None:
    """Raise ``TypeError``/``ValueError`` unless ``x_NF`` is a finite 2-D floating tensor."""
    if not isinstance(x_NF, Tensor):
        raise TypeError(f"{codec}.encode expects a torch.Tensor, got {type(x_NF).__name__}")
    if x_NF.dim() != 2 or not x_NF.is_floating_point():
        raise ValueError(
            f"{codec}.encode expects a floating [N, F] tensor, got {x_NF.dtype} "
            f"{tuple(x_NF.shape)}; pass features as x.float()"
        )
    if x_NF.numel() and not all_finite(x_NF):
        raise ValueError(
            f"{codec}.encode got a NaN or inf feature; clean the features (torch.nan_to_num)"
        )


def take(enc: EncodedRows, pos: Tensor) -> EncodedRows:
    """Rows ``pos`` of ``enc`` without decoding (a copy; ``pos`` is ``[K]`` int64)."""
    return EncodedRows(
        codec=enc.codec,
        num_cols=enc.num_cols,
        data=enc.data[pos],
        scale=None if enc.scale is None else enc.scale[pos],
        zero=None if enc.zero is None else enc.zero[pos],
    )


def concat(parts: Sequence[EncodedRows]) -> EncodedRows:
    """Stack encoded rows of the same codec and width, in order, without decoding.

    Raises:
        ValueError: ``parts`` is empty or mixes codecs or feature dims.
    """
    if not parts:
        raise ValueError("concat needs at least one EncodedRows")
    first = parts[0]
    for p in parts[1:]:
        if p.codec != first.codec or p.num_cols != first.num_cols:
            raise ValueError(
                f"cannot concat {p.codec}/F={p.num_cols} rows onto {first.codec}/F="
                f"{first.num_cols}; encode every part with one codec"
            )

    def cat(field: str) -> Tensor | None:
        tensors = [getattr(p, field) for p in parts]
        return None if tensors[0] is None else torch.cat(tensors)

    data = torch.cat([p.data for p in parts])
    return EncodedRows(first.codec, first.num_cols, data, cat("scale"), cat("zero"))


def put(dst: EncodedRows, slot: Tensor, src: EncodedRows) -> None:
    """Write rows of ``src`` into rows ``slot`` of ``dst`` in place (cache slot arrays).

    Raises:
        ValueError: The codecs, feature dims or row counts differ.
    """
    if dst.codec != src.codec or dst.num_cols != src.num_cols:
        raise ValueError(
            f"cannot store {src.codec}/F={src.num_cols} rows in a {dst.codec}/F={dst.num_cols} "
            "cache; fetch with the cache's codec"
        )
    if slot.shape[0] != src.num_rows:
        raise ValueError(f"{slot.shape[0]} slots for {src.num_rows} rows; pass one slot per row")
    dst.data[slot] = src.data
    if dst.scale is not None and src.scale is not None:
        dst.scale[slot] = src.scale
    if dst.zero is not None and src.zero is not None:
        dst.zero[slot] = src.zero
