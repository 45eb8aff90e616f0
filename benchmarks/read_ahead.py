"""What ``store.pages.ReadAhead`` costs an in-memory run, and what it saves a cold one.

Default: draws over a cached, file-mapped CSR. The sampler's reads go through
``ReadAhead.take``; where every page is resident its checks back off to one in 64 calls. This
times the same draws with the read-ahead objects live and with plain ones (gathers only), in
alternating rounds, and prints one JSON line.

``--spilled-mb N``: a peer serving rows of a cold spilled evaluation table (an ``N`` MiB
``LayerTables`` table, 128 float32 columns, its pages pushed out with ``MADV_PAGEOUT`` before
every round): requests of 16 MiB of sorted rows at each ``--density`` (rows asked / rows in
the table), served by ``LayerTables.rows`` (``ReadAhead``) and by ``table_rows`` (a dense
request's range read ahead, a sparse one left to its 4 KiB faults), alternating; one JSON line
per density. Needs Linux >= 5.4 (``MADV_PAGEOUT``).

``--cold-draws``: the sampler's draws over a cold file-mapped shard-like CSR (``indptr`` int64,
``indices`` int32, ``e_id`` int64; every page pushed out before each round), reading each drawn
edge's id (``edge_ids=True``, what a shard source did before) and not reading it
(``edge_ids=False``, the distributed runtime's sources), alternating; one JSON line.

Usage::

    python benchmarks/read_ahead.py [--nodes 1000000] [--rounds 6]
    python benchmarks/read_ahead.py --spilled-mb 1024 --density 0.01 0.04 0.2 --rounds 3
    python benchmarks/read_ahead.py --cold-draws --nodes 4000000 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from gnnsys.sampler.csr_source import CSRNeighborSource
from gnnsys.store.pages import ReadAhead, glibc
from gnnsys.train.eval.memory import LayerTables, table_rows

_WIDTH = 128
_MADV_PAGEOUT = getattr(mmap, "MADV_PAGEOUT", 21)  # Linux >= 5.4; Python 3.11 lacks the name


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=1_000_000)
    p.add_argument("--degree", type=int, default=20)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--spilled-mb", type=float, default=0.0, help="time a cold spilled table")
    p.add_argument("--density", type=float, nargs="+", default=[0.01, 0.04, 0.2])
    p.add_argument("--cold-draws", action="store_true", help="time draws over a cold shard")
    args = p.parse_args()
    if args.cold_draws:
        print(json.dumps(cold_draws(args.nodes, args.degree, args.rounds)), flush=True)
        return
    if args.spilled_mb > 0:
        for density in args.density:
            print(json.dumps(spilled(args.spilled_mb, density, args.rounds)), flush=True)
        return
    in_memory(args)


def spilled(size_mb: float, density: float, rounds: int) -> dict[str, object]:
    """Serve 16 MiB requests of a cold spilled table, with and without ``ReadAhead``."""
    rows = int(size_mb * 2**20) // (_WIDTH * 4)
    tables = LayerTables(spill_mb=1)
    out = tables.buffer(1, rows, _WIDTH)
    for lo in range(0, rows, 1 << 16):
        hi = min(rows, lo + (1 << 16))
        out[lo:hi] = torch.arange(lo, hi, dtype=torch.float32)[:, None]
    tables.publish(1)
    mapped = tables._maps[1]
    rng = np.random.default_rng(0)
    per = (16 << 20) // (_WIDTH * 4)  # rows per request
    asked = rng.choice(rows, min(rows, int(rows * density)), replace=False)
    requests = [np.sort(asked[i : i + per]) for i in range(0, asked.shape[0], per)]
    readers = {
        "read_ahead": lambda pos: tables.rows(1, pos),
        "faults": lambda pos: table_rows(tables[1], pos),
    }
    times: dict[str, list[float]] = {k: [] for k in readers}
    resident: list[float] = []
    for _ in range(rounds):
        for name, read in readers.items():
            mapped.flush()
            mapped.madvise(_MADV_PAGEOUT)
            resident.append(_resident(out))
            start = time.perf_counter()
            for pos in requests:
                got = read(pos)
                assert got[0, 0] == pos[0]  # the rows asked for
            times[name].append(time.perf_counter() - start)
    med = {k: float(np.median(v)) for k, v in times.items()}
    return {
        "bench": "read_ahead_spilled", "table_mb": size_mb, "rows": rows, "width": _WIDTH,
        "density": density, "requests": len(requests), "rows_asked": int(asked.shape[0]),
        "max_resident_before": max(resident), "seconds": times, "median": med,
        "speedup": med["faults"] / med["read_ahead"],
    }  # fmt: skip


def cold_draws(n: int, deg: int, rounds: int) -> dict[str, object]:
    """Draws over a cold mapped CSR, reading the drawn edges' ids and not, alternating."""
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(dir=".") as tmp:  # a disk, not a tmpfs
        arrays = {
            "ip": np.arange(0, (n + 1) * deg, deg, dtype=np.int64),
            "ix": rng.integers(0, n, n * deg).astype(np.int32),
            "ei": rng.permutation(n * deg).astype(np.int64),
        }
        for name, a in arrays.items():
            np.save(Path(tmp) / f"{name}.npy", a)
        del arrays
        os.sync()  # dirty pages cannot be paged out
        maps = {
            k: np.load(Path(tmp) / f"{k}.npy", mmap_mode="r", allow_pickle=False)
            for k in ("ip", "ix", "ei")
        }
        sources = {
            "edge_ids": CSRNeighborSource(maps["ip"], maps["ix"], maps["ei"]),
            "no_edge_ids": CSRNeighborSource(maps["ip"], maps["ix"], maps["ei"], edge_ids=False),
        }
        dst = [torch.from_numpy(rng.integers(0, n, 4096)) for _ in range(20)]
        times: dict[str, list[float]] = {k: [] for k in sources}
        resident: list[float] = []
        for _ in range(rounds):
            for name, source in sources.items():
                for k, m in maps.items():  # out of this process's page tables, then the cache
                    m._mmap.madvise(_MADV_PAGEOUT)
                    fd = os.open(Path(tmp) / f"{k}.npy", os.O_RDONLY)
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    os.close(fd)
                resident += [
                    _resident(torch.from_numpy(np.asarray(m).view(np.int32))) for m in maps.values()
                ]
                start = time.perf_counter()
                for i, d in enumerate(dst):
                    source.sample_neighbors(d, 10, seed=i, hop=0)
                times[name].append(time.perf_counter() - start)
        del sources, maps
    med = {k: float(np.median(v)) for k, v in times.items()}
    return {
        "bench": "cold_draws", "nodes": n, "degree": deg, "draws": 20, "dst_per_draw": 4096,
        "fanout": 10, "bytes": {"indices": 4 * n * deg, "e_id": 8 * n * deg},
        "max_resident_before": max(resident), "seconds": times, "median": med,
        "speedup": med["edge_ids"] / med["no_edge_ids"],
    }  # fmt: skip


def _resident(table: torch.Tensor) -> float:
    """The resident fraction of a mapped table's pages (``mincore``)."""
    libc = glibc()
    assert libc is not None
    page = mmap.PAGESIZE
    lo = table.data_ptr() // page * page
    hi = table.data_ptr() + table.numel() * 4
    vec = np.empty((hi - lo + page - 1) // page, dtype=np.uint8)
    assert libc.mincore(lo, hi - lo, vec.ctypes.data) == 0
    return float((vec & 1).mean())


def in_memory(args: argparse.Namespace) -> None:
    """Draws over a cached mapped CSR, read-ahead objects live and plain, alternating."""
    n, deg = args.nodes, args.degree
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        np.save(Path(tmp) / "ip.npy", np.arange(0, (n + 1) * deg, deg, dtype=np.int64))
        np.save(Path(tmp) / "ix.npy", rng.integers(0, n, n * deg).astype(np.int32))
        indptr = np.load(Path(tmp) / "ip.npy", mmap_mode="r", allow_pickle=False)
        indices = np.load(Path(tmp) / "ix.npy", mmap_mode="r", allow_pickle=False)
        source = CSRNeighborSource(indptr, indices)
        live = source._ahead
        plain = {k: ReadAhead(np.asarray(v.array)) for k, v in live.items()}  # views: no map
        dst = [torch.from_numpy(rng.integers(0, n, 15_000)) for _ in range(50)]

        def run() -> float:
            start = time.perf_counter()
            for i, d in enumerate(dst):
                source.sample_neighbors(d, 10, seed=i, hop=0)
            return time.perf_counter() - start

        run()  # every page resident
        times: dict[str, list[float]] = {"read_ahead": [], "plain": []}
        for _ in range(args.rounds):
            for name, aheads in (("read_ahead", live), ("plain", plain)):
                source._ahead = aheads
                times[name].append(run())
    med = {k: float(np.median(v)) for k, v in times.items()}
    print(json.dumps({
        "bench": "read_ahead", "nodes": n, "degree": deg, "draws": 50, "dst_per_draw": 15_000,
        "fanout": 10, "seconds": times, "median": med,
        "overhead": med["read_ahead"] / med["plain"] - 1,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
