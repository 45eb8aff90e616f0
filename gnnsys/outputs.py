"""Per-node outputs of a trained run: Parquet parts written by the ranks, a manifest, a reader.

``gnnsys predict RUN_DIR --out DIR`` and ``gnnsys embed RUN_DIR --out DIR`` run the sharded
exact inference of the run's checkpoint (``gnnsys.train.control.infer``); every rank writes the
rows of the nodes it owns, so no process holds the whole graph's outputs. The directory::

    DIR/manifest.json        format, kind, run, epoch, layer, parts, files (rows, checksum,
                             the writing rank's seconds and peak RSS)
    DIR/part-00000.parquet   rank 0's owned nodes
    DIR/part-00001.parquet   ...

Columns (one row per node):

- ``id`` (int64): the global node id; on a heterogeneous graph the id within its node type
  (PyG's ``data[node_type]`` row), with ``node_type`` (string) beside it;
- ``predict``: ``pred`` (int64, the arg-max class, as evaluation scores it) and ``probs``
  (``fixed_size_list<float32>[C]``, the softmax of the logits);
- ``embed``: ``embedding`` (``fixed_size_list<float32>[H]``): the outputs of layer ``L``
  (after its ReLU when it is a hidden layer), ``manifest["layer"]``.

Nothing is half-written: the ranks write into a staging directory beside ``DIR``; the driver
writes the manifest (with each file's row count and xxh3-128) last and then renames the staging
directory to ``DIR``. :func:`open` refuses a directory without a manifest or with a file whose
checksum differs.

Shape legend: ``K`` rows of a part, ``C`` classes, ``H`` embedding width.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

__all__ = [
    "FORMAT",
    "KINDS",
    "OutputRequest",
    "OutputRows",
    "Outputs",
    "PartFile",
    "open",
    "publish",
    "staging_dir",
    "write_part",
]

FORMAT = 1
"""Version of ``manifest.json``."""
KINDS = ("predict", "embed")
MANIFEST = "manifest.json"


@dataclass(frozen=True, slots=True)
class OutputRequest:
    """What every rank writes (shipped to the ranks).

    Attributes:
        kind: ``predict`` or ``embed``.
        layer: The table written: the model's last layer (``predict``) or ``L`` (``embed``).
        staging: The directory the parts go to (:func:`staging_dir`).
        node_types: Typed graphs: the node types written (``None``: every type with outputs;
            ``predict`` writes the labelled type only).
        nodes: Sorted ids to write (``--nodes``; of ``node_types[0]`` when given, else of every
            type), or ``None`` for every owned node.
    """

    kind: str
    layer: int
    staging: str
    node_types: tuple[str, ...] | None = None
    nodes: np.ndarray | None = None


@dataclass(frozen=True, slots=True)
class OutputRows:
    """A rank's owned rows of one table (one node type).

    Attributes:
        node_type: The type (``None`` on a homogeneous graph).
        ids: ``[K]`` int64 ids (global on a homogeneous graph, type-local on a typed one).
        rows: ``[K, W]`` float32 layer outputs.
    """

    node_type: str | None
    ids: np.ndarray
    rows: np.ndarray


@dataclass(frozen=True, slots=True)
class PartFile:
    """One written part (a manifest ``files`` entry plus the rank's costs)."""

    name: str
    rows: int
    nbytes: int
    xxh3_128: str
    seconds: float
    peak_rss_bytes: int


def _selected(pieces: list[OutputRows], request: OutputRequest) -> list[OutputRows]:
    """The pieces and rows ``request`` asks for (types, then ``--nodes`` of the first type)."""
    types = request.node_types
    out = []
    for piece in pieces:
        if types is not None and piece.node_type not in types:
            continue
        if request.nodes is not None and (types is None or piece.node_type == types[0]):
            keep = np.isin(piece.ids, request.nodes)
            piece = OutputRows(piece.node_type, piece.ids[keep], piece.rows[keep])
        out.append(piece)
    return out


def _table(kind: str, pieces: list[OutputRows], typed: bool) -> Any:
    """The part's Arrow table (module docstring's columns)."""
    import pyarrow as pa

    width = next((int(p.rows.shape[1]) for p in pieces if p.rows.ndim == 2), 0)
    ids = np.concatenate([np.zeros(0, np.int64), *(p.ids.astype(np.int64) for p in pieces)])
    if len(pieces) == 1:  # one type: the table as it is, no fresh [K, W] copy to fault in
        rows = np.ascontiguousarray(pieces[0].rows, dtype=np.float32)
    else:
        rows = np.concatenate([np.zeros((0, width), np.float32), *(p.rows for p in pieces)])
    columns: dict[str, Any] = {"id": pa.array(ids)}
    if typed:  # one code per piece, decoded in Arrow (no Python string per row)
        codes = np.repeat(np.arange(len(pieces), dtype=np.int32), [p.ids.shape[0] for p in pieces])
        names = pa.array([p.node_type or "" for p in pieces], pa.string())
        typed_column = pa.DictionaryArray.from_arrays(pa.array(codes), names)
        columns["node_type"] = typed_column.cast(pa.string())
    if kind == "predict":
        probs, pred = rows, ids[:0]
        if rows.shape[0]:
            probs = np.exp(rows - rows.max(axis=1, keepdims=True))
            probs /= probs.sum(axis=1, keepdims=True)
            pred = rows.argmax(axis=1).astype(np.int64)
        columns["pred"] = pa.array(pred)
        columns["probs"] = _fixed_list(probs, width)
    else:
        columns["embedding"] = _fixed_list(rows, width)
    return pa.table(columns)


def _fixed_list(rows: np.ndarray, width: int) -> Any:
    import pyarrow as pa

    flat = pa.array(np.ascontiguousarray(rows, dtype=np.float32).reshape(-1))
    return pa.FixedSizeListArray.from_arrays(flat, width)


def write_part(request: OutputRequest, rank: int, pieces: list[OutputRows]) -> PartFile:
    """Write rank ``rank``'s part into ``request.staging`` atomically; its manifest entry.

    ``pieces`` carry a node type on typed graphs (then the part has a ``node_type`` column).
    """
    import pyarrow.parquet as pq

    start = time.perf_counter()
    typed = any(p.node_type is not None for p in pieces)
    table = _table(request.kind, _selected(pieces, request), typed)
    name = f"part-{rank:05d}.parquet"
    path = Path(request.staging) / name
    tmp = path.with_name(f".{name}.tmp")
    # Dictionary encoding only where values repeat: tried on every float column it costs more
    # than the write (2.6 s -> 1.1 s for 512 k rows of 128 floats, the same bytes). Written
    # straight to the file (an in-memory buffer grows by copies), then hashed as it is read
    # back from the page cache.
    pq.write_table(table, str(tmp), use_dictionary=["node_type"])
    digest = xxhash.xxh3_128()
    with tmp.open("r+b") as f:
        for chunk in iter(lambda: f.read(8 << 20), b""):
            digest.update(chunk)
        nbytes = f.tell()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    import resource

    return PartFile(
        name=name,
        rows=int(table.num_rows),
        nbytes=nbytes,
        xxh3_128=digest.hexdigest(),
        seconds=time.perf_counter() - start,
        peak_rss_bytes=int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024,
    )


def staging_dir(out: str | os.PathLike[str], *, overwrite: bool) -> Path:
    """A fresh, empty staging directory beside ``out`` (``.NAME.partial``).

    Raises:
        ValueError: ``out`` exists and is not empty, and ``overwrite`` is false.
    """
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise ValueError(f"{out} exists and is not empty; pass --overwrite or choose another --out")
    staging = out.with_name(f".{out.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)  # a staging dir left by a killed run
    staging.mkdir(parents=True)
    return staging


def publish(staging: Path, out: Path, manifest: dict[str, Any], parts: list[PartFile]) -> Path:
    """Write the manifest into ``staging``, then make ``staging`` the directory ``out``."""
    from gnnsys.store.diskio import atomic_write

    manifest = {
        **manifest,
        "format": FORMAT,
        "num_rows": sum(p.rows for p in parts),
        "files": [asdict(p) for p in parts],
    }
    atomic_write(staging / MANIFEST, (json.dumps(manifest, indent=1) + "\n").encode())
    old = out.with_name(f".{out.name}.old")
    if out.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(out, old)
    os.replace(staging, out)
    shutil.rmtree(old, ignore_errors=True)
    return out


class Outputs:
    """A written outputs directory, checked (:func:`open`).

    Attributes:
        directory: The directory.
        manifest: ``manifest.json``.
    """

    def __init__(self, directory: Path, manifest: dict[str, Any]) -> None:
        self.directory, self.manifest = directory, manifest

    @property
    def parts(self) -> list[str]:
        """The part files' names, rank order."""
        return [f["name"] for f in self.manifest["files"]]

    def read(self, part: int | None = None, columns: list[str] | None = None) -> Any:
        """One part (``part``) or every part as one ``pyarrow.Table``, checksums verified.

        Raises:
            ValueError: A file is missing or differs from the manifest's checksum.
        """
        import pyarrow as pa

        files = self.manifest["files"] if part is None else [self.manifest["files"][part]]
        return pa.concat_tables([self._read(f, columns) for f in files])

    def iter_parts(self, columns: list[str] | None = None) -> Iterator[Any]:
        """Every part's table in turn (one part in memory at a time)."""
        for entry in self.manifest["files"]:
            yield self._read(entry, columns)

    def rows(self, ids: Any, node_type: str | None = None) -> np.ndarray:
        """``[K, W]`` output rows of ``ids`` (of ``node_type`` on a typed graph), in that order.

        Reads one part at a time (``embedding``, or ``probs`` for predictions).

        Raises:
            ValueError: An id without a row here (named), or ``node_type`` missing where needed.
        """
        if self.manifest.get("typed") and node_type is None:
            raise ValueError("these outputs are typed; pass node_type=")
        want = np.asarray(ids, dtype=np.int64)
        column = "embedding" if self.manifest["kind"] == "embed" else "probs"
        out: np.ndarray | None = None
        found = np.zeros(want.shape[0], dtype=bool)
        names = ["id", column] + (["node_type"] if node_type is not None else [])
        for table in self.iter_parts(names):
            have, rows = table["id"].to_numpy(), _matrix(table[column])
            if node_type is not None:
                keep = np.asarray(table["node_type"].to_numpy(zero_copy_only=False) == node_type)
                have, rows = have[keep], rows[keep]
            if not have.shape[0]:
                continue
            order = np.argsort(have)
            at = np.searchsorted(have, want, sorter=order).clip(0, have.shape[0] - 1)
            hit = have[order[at]] == want
            if out is None:
                out = np.zeros((want.shape[0], rows.shape[1]), dtype=np.float32)
            out[hit] = rows[order[at[hit]]]
            found |= hit
        if out is None or not found.all():
            missing = want[~found][:5].tolist()
            raise ValueError(f"ids {missing} have no row in {self.directory} (of {node_type!r})")
        return out

    def score(
        self,
        src: Any,
        dst: Any,
        *,
        src_type: str | None = None,
        dst_type: str | None = None,
    ) -> np.ndarray:
        """``[K]`` link logits of the pairs ``(src[k], dst[k])`` with the run's decoder.

        Embeddings of a link run only (``gnnsys embed`` writes its decoder beside them).

        Raises:
            ValueError: Outputs without a decoder, or ids without rows.
        """
        import torch

        from gnnsys.models.link import build_decoder

        entry = self.manifest.get("decoder")
        if entry is None:
            raise ValueError(f"{self.directory} has no decoder: embed a --task link run")
        h_src, h_dst = self.rows(src, src_type), self.rows(dst, dst_type)
        data = (self.directory / entry["file"]).read_bytes()
        if xxhash.xxh3_128(data).hexdigest() != entry["xxh3_128"]:
            raise ValueError(f"{self.directory / entry['file']}: checksum mismatch")
        decoder = build_decoder(entry["name"], int(h_src.shape[1]))
        decoder.load_state_dict(torch.load(io.BytesIO(data), weights_only=True, map_location="cpu"))
        with torch.no_grad():
            got = decoder.eval()(torch.from_numpy(h_src), torch.from_numpy(h_dst))
        out: np.ndarray = got.numpy()
        return out

    def _read(self, entry: dict[str, Any], columns: list[str] | None) -> Any:
        import pyarrow.parquet as pq

        path = self.directory / entry["name"]
        try:
            data = path.read_bytes()
        except OSError as err:
            raise ValueError(f"{path}: cannot read ({err}); the outputs are incomplete") from err
        if xxhash.xxh3_128(data).hexdigest() != entry["xxh3_128"]:
            raise ValueError(f"{path}: checksum mismatch (corrupt or replaced); write it again")
        return pq.read_table(io.BytesIO(data), columns=columns)


def _matrix(column: Any) -> np.ndarray:
    """``[K, W]`` float32 view of a ``fixed_size_list<float32>[W]`` column (no per-row lists)."""
    values = column.combine_chunks()
    out: np.ndarray = values.flatten().to_numpy().reshape(-1, values.type.list_size)
    return out


def open(directory: str | os.PathLike[str]) -> Outputs:  # noqa: A001 -- gnnsys.outputs.open
    """The outputs in ``directory`` (``gnnsys predict`` / ``gnnsys embed``).

    Raises:
        ValueError: No manifest (not an outputs directory, or one still being written) or a
            manifest of another format.
    """
    directory = Path(directory)
    path = directory / MANIFEST
    if not path.is_file():
        raise ValueError(
            f"{path} is missing: {directory} is not (yet) an outputs directory of gnnsys "
            "predict/embed"
        )
    manifest = json.loads(path.read_text())
    if manifest.get("format") != FORMAT:
        raise ValueError(f"{path}: format {manifest.get('format')!r}; this gnnsys reads {FORMAT}")
    return Outputs(directory, manifest)
