"""``pymetis.part_graph`` on plain arrays, in this process or as a child's script.

:func:`gnnsys.partitioners.metis.run_pymetis` calls :func:`part_graph` here, or, when other
threads of the process may draw from libc's ``rand()`` (METIS's random stream), runs this file
in a child Python process of its own: ``python metis_call.py`` reads one directory per line on
stdin (``DIR/{xadj,adjncy[,vwgt]}.npy`` and ``DIR/args.json``), writes ``DIR/parts.npy`` and
answers ``ok`` (or ``error: ...``) on stdout, and exits at end of input, so it ends with its
parent. Run as a script it imports numpy and pymetis only, not gnnsys.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


def part_graph(
    xadj: np.ndarray,
    adjncy: np.ndarray,
    num_parts: int,
    vwgt: np.ndarray | None,
    *,
    recursive: bool | None,
    imbalance: float | None,
    seed: int,
) -> np.ndarray:
    """``[N]`` int64 parts from METIS with ``Options(seed=seed)`` (arrays passed zero-copy)."""
    import pymetis

    dtype = pymetis.zero_copy_dtype()
    options = pymetis.Options(seed=int(seed) % (2**31))
    if imbalance is not None:
        options.ufactor = max(1, round(1000 * imbalance))
    result = pymetis.part_graph(
        num_parts,
        pymetis.CSRAdjacency(xadj.astype(dtype, copy=False), adjncy.astype(dtype, copy=False)),
        vweights=None if vwgt is None else vwgt.astype(dtype, copy=False),
        recursive=recursive,
        options=options,
    )
    return np.asarray(result.vertex_part, dtype=np.int64)


def main(work_dir: str) -> None:
    """The child's work: the arrays and arguments of ``work_dir`` in, ``parts.npy`` out."""
    work = Path(work_dir)
    args = json.loads((work / "args.json").read_text())
    vwgt = work / "vwgt.npy"
    parts = part_graph(
        np.load(work / "xadj.npy", allow_pickle=False),
        np.load(work / "adjncy.npy", allow_pickle=False),
        int(args["num_parts"]),
        np.load(vwgt, allow_pickle=False) if vwgt.exists() else None,
        recursive=args["recursive"],
        imbalance=args["imbalance"],
        seed=int(args["seed"]),
    )
    np.save(work / "parts.npy", parts)


def serve() -> None:
    """Answer one line per work directory on stdin until it closes."""
    for line in sys.stdin:
        try:
            main(line.strip())
            answer = "ok"
        except Exception as err:  # reported to the parent, which raises it
            answer = f"error: {type(err).__name__}: {err}".replace("\n", " ")
        sys.stdout.write(answer + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    serve()
