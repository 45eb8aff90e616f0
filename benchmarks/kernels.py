"""Kernel benchmark: gnnsys ``aggregate`` against plain-torch and PyG paths, as JSON lines.

CPU (default): synthetic R-MAT graph (2**scale nodes, about 20 M edges at scale 20), F = 128,
mean reduce. Forward and forward+backward for fp32; forward for int8 (fp16 scale/zero rows).

The machine is shared, so every group of cases is timed round-robin (one run of each case per
round, ``--repeats`` rounds after a warm-up) together with a plain copy, and each line reports the
fastest round (``seconds``) and the median (``seconds_median``). ``frac_copy_bw`` is counted GB/s
over the copy GB/s of the same rounds.

Counted bytes per CSR pass: ``E * (F*b + m + 4) + rows_out * F * 4 + (rows_in + rows_out) * 4``
(b = bytes per feature, m = 4 for the int8 rows' fp16 scale + zero, 4 = an int32 column index);
the backward counts the same over the transposed CSR. PyG's scatter path materialises ``[E, F]``
messages (10 GB at full size), so it runs, next to gnnsys, on the first destinations holding
``--pyg-edges`` edges (``"subset": true``).

``--device cuda`` runs the compiled Triton kernel against ``torch.sparse.mm`` (CSR),
``embedding_bag`` and PyG scatter, with GB/s against a device copy timed in the same rounds.

Usage (heavy: ~4 GiB RSS, several minutes):
    flock /tmp/gnnsys-heavy.lock .venv/bin/python benchmarks/kernels.py --scale 20
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gnnsys.kernels import aggregate, transpose_csr, use_backend

MAKE_RMAT = Path(__file__).resolve().parents[2] / "shared" / "baselines" / "make_rmat.py"
COPY_BYTES = 1 << 30


def load_rmat(scale: int, edge_factor: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """In-edge CSR of a seeded R-MAT graph (shared/baselines/make_rmat.py), cached in /tmp."""
    path = Path(tempfile.gettempdir()) / f"gnnsys-rmat-s{scale}-ef{edge_factor}-seed{seed}.npz"
    if not path.exists():
        spec = importlib.util.spec_from_file_location("make_rmat", MAKE_RMAT)
        assert spec is not None and spec.loader is not None, f"missing {MAKE_RMAT}"
        rmat = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(rmat)
        src, dst = rmat.rmat_edges(scale, edge_factor << scale, seed)
        indptr, indices = rmat.to_csr(1 << scale, src, dst)
        np.savez(path, indptr=indptr, indices=indices)
    with np.load(path) as z:
        return z["indptr"], z["indices"]


def copy_case(device: str) -> Callable[[], Any]:
    """A plain copy of ``COPY_BYTES`` (read + write counted as ``2 * COPY_BYTES``)."""
    if device == "cpu":
        src, dst = np.ones(COPY_BYTES // 8), np.empty(COPY_BYTES // 8)
        return lambda: np.copyto(dst, src)
    a = torch.ones(COPY_BYTES // 4, device=device)
    b = torch.empty_like(a)
    return lambda: b.copy_(a)


def round_robin(
    cases: dict[str, Callable[[], Any]], repeats: int, sync: Callable[[], None]
) -> dict[str, list[float]]:
    """Seconds of every case per round, after one warm-up run of each."""
    for fn in cases.values():
        fn()
        sync()
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, fn in cases.items():
            t0 = time.perf_counter()
            fn()
            sync()
            times[name].append(time.perf_counter() - t0)
    return times


def counted_bytes(edges: int, rows_in: int, rows_out: int, feat: int, elem: int, meta: int) -> int:
    """Bytes one CSR pass must move at least: gathered rows, indices, output rows, row pointer."""
    return edges * (feat * elem + meta + 4) + rows_out * feat * 4 + (rows_in + rows_out) * 4


def emit(record: dict[str, Any]) -> None:
    print(json.dumps(record), flush=True)


def report(
    args: argparse.Namespace,
    times: dict[str, list[float]],
    specs: dict[str, tuple[str, str, str, int, int]],
    extra: dict[str, Any] | None = None,
) -> dict[str, float]:
    """Emit one line per case; ``specs[name] = (pass, dtype, method, bytes, edges)``."""
    copy_gbps = 2 * COPY_BYTES / min(times["copy"]) / 1e9
    best: dict[str, float] = {"copy": min(times["copy"])}
    for name, (passes, dtype, method, nbytes, edges) in specs.items():
        secs = min(times[name])
        best[name] = secs
        gbps = nbytes / secs / 1e9
        emit({
            "bench": "aggregate", "device": args.device, "pass": passes, "dtype": dtype,
            "method": method, "feat": args.feat, "edges": edges, "seconds": round(secs, 4),
            "seconds_median": round(statistics.median(times[name]), 4), "bytes": nbytes,
            "gbps": round(gbps, 2), "copy_gbps": round(copy_gbps, 2),
            "frac_copy_bw": round(gbps / copy_gbps, 3), "threads": torch.get_num_threads(),
            **(extra or {}),
        })  # fmt: skip
    return best


Op = Callable[[torch.Tensor], torch.Tensor]


def gather_case(x: torch.Tensor, col: torch.Tensor, chunk: int = 1 << 20) -> Callable[[], Any]:
    """``index_select`` of every gathered row, ``chunk`` edges at a time into a reused buffer.

    The plain gather of the same rows (no reduce): the best a gather-based kernel can do here.
    """
    buf = torch.zeros(chunk, x.shape[1], dtype=x.dtype, device=x.device)
    num_edges = int(col.shape[0])

    def step() -> None:
        for e0 in range(0, num_edges, chunk):
            idx = col[e0 : e0 + chunk]
            torch.index_select(x, 0, idx, out=buf[: idx.shape[0]])

    return step


def fwd_bwd(fn: Op, x: torch.Tensor, grad: torch.Tensor) -> Callable[[], None]:
    xg = x.detach().requires_grad_(True)

    def step() -> None:
        xg.grad = None
        fn(xg).backward(grad)

    return step


def run_float(args: argparse.Namespace, g: dict[str, Any], sync: Any) -> dict[str, float]:
    x, rowptr, col, m, n, e = g["x"], g["rowptr"], g["col"], g["m"], g["n"], g["e"]
    f = x.shape[1]
    t0 = time.perf_counter()
    transpose_csr(rowptr, col, n)  # built once per graph, then cached
    sync()
    emit({"bench": "transpose_csr", "seconds": round(time.perf_counter() - t0, 3), "edges": e})
    rowptr_c = rowptr.to(col.dtype)
    methods: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
        "gnnsys": lambda t: aggregate(t, rowptr, col, "mean"),
        "embedding_bag": lambda t: torch.nn.functional.embedding_bag(
            col, t, rowptr_c, mode="mean", include_last_offset=True
        ),
        "sparse_mm_csr": lambda t: (
            torch.sparse.mm(g["csr"], t, reduce="mean")  # reduce= exists only on CPU
            if args.device == "cpu"
            else torch.sparse.mm(g["csr_mean"], t)
        ),
    }
    grad = torch.randn(m, f, device=x.device)
    fwd_bytes = counted_bytes(e, n, m, f, 4, 0)
    both_bytes = fwd_bytes + counted_bytes(e, m, n, f, 4, 0)
    cases: dict[str, Callable[[], Any]] = {"copy": copy_case(args.device)}
    specs: dict[str, tuple[str, str, str, int, int]] = {}
    for name, fn in methods.items():
        cases[f"{name}/fwd"] = lambda fn=fn: fn(x)
        specs[f"{name}/fwd"] = ("fwd", "fp32", name, fwd_bytes, e)
        cases[f"{name}/fwd+bwd"] = fwd_bwd(fn, x, grad)
        specs[f"{name}/fwd+bwd"] = ("fwd+bwd", "fp32", name, both_bytes, e)
    if args.device == "cpu":  # gnnsys's previous mean forward (sum, then divide in place)
        deg = rowptr.diff().clamp(min=1).to(x.dtype)[:, None]
        cases["sum_div/fwd"] = lambda: torch.embedding_bag(
            x, col, rowptr_c, False, 0, False, None, True
        )[0].div_(deg)
        specs["sum_div/fwd"] = ("fwd", "fp32", "embedding_bag_sum_div", fwd_bytes, e)
    if args.device == "cpu":  # the plain gather (read E rows + write them) as a reference
        cases["gather/ref"] = gather_case(x, col)
        specs["gather/ref"] = ("gather", "fp32", "index_select", e * (2 * f * 4 + 4), e)
    return report(args, round_robin(cases, args.repeats, sync), specs)


def pyg_scatter_mean(x: torch.Tensor, col: torch.Tensor, dst: torch.Tensor, m: int) -> torch.Tensor:
    from torch_geometric.utils import scatter

    return scatter(x.index_select(0, col), dst, dim=0, dim_size=m, reduce="mean")


def run_pyg_subset(args: argparse.Namespace, g: dict[str, Any], sync: Any) -> dict[str, float]:
    x, rowptr, n = g["x"], g["rowptr"], g["n"]
    limit = torch.tensor(args.pyg_edges, device=rowptr.device)
    rows = max(1, min(int(torch.searchsorted(rowptr, limit)), g["m"]))
    e_sub = int(rowptr[rows])
    sub_rowptr, sub_col = rowptr[: rows + 1].clone(), g["col"][:e_sub].clone()
    col64 = sub_col.long()
    dst = torch.repeat_interleave(torch.arange(rows, device=x.device), sub_rowptr.diff())
    methods: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
        "gnnsys": lambda t: aggregate(t, sub_rowptr, sub_col, "mean"),
        "pyg_scatter": lambda t: pyg_scatter_mean(t, col64, dst, rows),
    }
    transpose_csr(sub_rowptr, sub_col, n)
    grad = torch.randn(rows, x.shape[1], device=x.device)
    fwd_bytes = counted_bytes(e_sub, n, rows, x.shape[1], 4, 0)
    both_bytes = fwd_bytes + counted_bytes(e_sub, rows, n, x.shape[1], 4, 0)
    cases: dict[str, Callable[[], Any]] = {"copy": copy_case(args.device)}
    specs: dict[str, tuple[str, str, str, int, int]] = {}
    for name, fn in methods.items():
        cases[f"{name}/fwd"] = lambda fn=fn: fn(x)
        specs[f"{name}/fwd"] = ("fwd", "fp32", name, fwd_bytes, e_sub)
        cases[f"{name}/fwd+bwd"] = fwd_bwd(fn, x, grad)
        specs[f"{name}/fwd+bwd"] = ("fwd+bwd", "fp32", name, both_bytes, e_sub)
    return report(args, round_robin(cases, args.repeats, sync), specs, {"subset": True})


def quantize_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    lo, hi = x.min(1).values, x.max(1).values
    scale = ((hi - lo) / 255).clamp(min=1e-6).half()
    zero = (-128 - lo / scale.float()).half()
    q = torch.round(x / scale.float()[:, None] + zero.float()[:, None]).clamp(-128, 127)
    return q.to(torch.int8), scale, zero


def run_int8(args: argparse.Namespace, g: dict[str, Any], sync: Any) -> dict[str, float]:
    x, rowptr, col, m, n, e = g["x"], g["rowptr"], g["col"], g["m"], g["n"], g["e"]
    f = x.shape[1]
    q, scale, zero = quantize_int8(x)
    x16 = x.half()
    cases: dict[str, Callable[[], Any]] = {
        "copy": copy_case(args.device),
        "int8": lambda: aggregate(q, rowptr, col, "mean", scale=scale, zero=zero),
        "fp32": lambda: aggregate(x, rowptr, col, "mean"),
        "fp16": lambda: aggregate(x16, rowptr, col, "mean"),
    }
    specs = {
        name: ("fwd", name, "gnnsys", counted_bytes(e, n, m, f, elem, meta), e)
        for name, elem, meta in (("int8", 1, 4), ("fp32", 4, 0), ("fp16", 2, 0))
    }
    best = report(args, round_robin(cases, args.repeats, sync), specs)
    emit({
        "bench": "int8_vs_fp32", "bytes_ratio": round(specs["fp32"][3] / specs["int8"][3], 3),
        "time_ratio_int8_over_fp32": round(best["int8"] / best["fp32"], 3),
    })  # fmt: skip
    return best


def build_graph(args: argparse.Namespace) -> dict[str, Any]:
    indptr, indices = load_rmat(args.scale, args.edge_factor, args.seed)
    n, e = indptr.shape[0] - 1, indices.shape[0]
    dev = args.device
    rowptr = torch.from_numpy(indptr).to(dev)
    col = torch.from_numpy(indices.astype(np.int32)).to(dev)
    gen = torch.Generator().manual_seed(args.seed)
    x = torch.randn(n, args.feat, generator=gen).to(dev)
    values = torch.ones(e, device=dev)
    csr = torch.sparse_csr_tensor(rowptr, col.long(), values, (n, n), check_invariants=False)
    deg = rowptr.diff().clamp(min=1).to(torch.float32)
    weights = torch.repeat_interleave(1.0 / deg, rowptr.diff())
    csr_mean = torch.sparse_csr_tensor(rowptr, col.long(), weights, (n, n), check_invariants=False)
    return {
        "x": x, "rowptr": rowptr, "col": col, "csr": csr, "csr_mean": csr_mean,
        "m": n, "n": n, "e": e,
        # rows the forward gathers (distinct sources) and the backward gathers (dsts with edges)
        "src_rows": int(np.unique(indices).shape[0]), "dst_rows": int((np.diff(indptr) > 0).sum()),
    }  # fmt: skip


def unique_bytes(g: dict[str, Any], feat: int) -> int:
    """Forward+backward bytes if every gathered row came from DRAM once (perfect reuse).

    The counted bytes assume no reuse (every edge re-reads its row); a power-law graph re-reads
    hot rows from cache, so the DRAM traffic lies between the two figures.
    """
    rows = g["src_rows"] + g["dst_rows"]  # rows gathered by the forward and the backward
    outputs = (g["m"] + g["n"]) * feat * 4  # the forward's [M, F] and the backward's [N, F]
    return rows * feat * 4 + 2 * g["e"] * 4 + outputs + 2 * (g["m"] + g["n"]) * 4


def summarize(best: dict[str, float], both_bytes: int, gather_bytes: int, uniq: int) -> None:
    """The acceptance numbers of the fp32 group: speed-up over plain torch, copy fraction."""
    best_plain = min(best["embedding_bag/fwd+bwd"], best["sparse_mm_csr/fwd+bwd"])
    gbps = both_bytes / best["gnnsys/fwd+bwd"] / 1e9
    copy_gbps = 2 * COPY_BYTES / best["copy"] / 1e9
    gather: dict[str, float] = {}  # the index_select reference is only timed on CPU
    if "gather/ref" in best:
        gather_gbps = gather_bytes / best["gather/ref"] / 1e9
        gather = {"gather_ref_frac_copy_bw": round(gather_gbps / copy_gbps, 3)}
    emit({
        "bench": "summary", "pass": "fwd+bwd", "dtype": "fp32",
        "speedup_vs_best_plain_torch": round(best_plain / best["gnnsys/fwd+bwd"], 3),
        "gbps": round(gbps, 2), "copy_gbps": round(copy_gbps, 2),
        "frac_copy_bw": round(gbps / copy_gbps, 3),
        **gather,
        "unique_bytes": uniq,
        "frac_copy_bw_unique": round(uniq / best["gnnsys/fwd+bwd"] / 1e9 / copy_gbps, 3),
    })  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--scale", type=int, default=20, help="log2 of the node count")
    p.add_argument("--edge-factor", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--feat", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3, help="timed rounds per group")
    p.add_argument("--pyg-edges", type=int, default=2_500_000, help="edges in the PyG subset")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--skip", default="", help="comma list of groups to skip: float,pyg,int8")
    args = p.parse_args()
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    g = build_graph(args)
    emit({"bench": "graph", "nodes": g["n"], "edges": g["e"], "feat": args.feat})
    with use_backend("triton" if args.device == "cuda" else "torch"):
        if "float" not in args.skip:
            best = run_float(args, g, sync)
            both_bytes = counted_bytes(g["e"], g["n"], g["m"], args.feat, 4, 0) * 2
            gather_bytes = g["e"] * (2 * args.feat * 4 + 4)
            summarize(best, both_bytes, gather_bytes, unique_bytes(g, args.feat))
        if "pyg" not in args.skip:
            run_pyg_subset(args, g, sync)
        if "int8" not in args.skip:
            run_int8(args, g, sync)


if __name__ == "__main__":
    main()
