"""Kernel benchmark: gnnsys ``aggregate`` against plain-torch and PyG paths, as JSON lines.

CPU (default): synthetic R-MAT graph (2**scale nodes, about 20 M edges at scale 20), F = 128,
mean reduce. Forward and forward+backward for fp32; forward for int8 (fp16 scale/zero rows).
Every line carries ``seconds`` (median of ``--repeats`` after one warm-up), counted bytes and
GB/s, and ``frac_copy_bw``: GB/s over a numpy copy bandwidth measured in the same run.
Counted bytes per pass: ``E * (F*b + m + 4) + rows_out * F * 4 + rows * 8`` (b = bytes per feature,
m = 4 for int8 fp16 scale+zero, 4 = an int32 column index); the backward counts the same over the
transposed CSR. PyG's scatter path materialises ``[E, F]`` messages (10 GB at full size), so it
runs on the first destinations holding ``--pyg-edges`` edges; its line says ``"subset": true``
and its ``seconds_full`` scales the time to all edges.

``--device cuda`` runs the compiled Triton kernel against ``torch.sparse.mm`` (CSR),
``embedding_bag`` and PyG scatter, with GB/s against a device copy measured in the same run.

Usage (heavy: ~3.5 GiB RSS, a few minutes):
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


def load_rmat(scale: int, edge_factor: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """In-edge CSR of a seeded R-MAT graph, cached as an .npz in the temp dir."""
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


def timeit(fn: Callable[[], Any], repeats: int, sync: Callable[[], None]) -> float:
    """Median wall seconds of ``fn`` over ``repeats`` runs after one warm-up."""
    fn()
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def copy_bandwidth(device: str, nbytes: int = 1 << 30) -> float:
    """GB/s of a plain copy (read + write counted) on ``device``."""
    if device == "cpu":
        src, dst = np.ones(nbytes // 8), np.empty(nbytes // 8)
        secs = timeit(lambda: np.copyto(dst, src), 3, lambda: None)
    else:
        a = torch.ones(nbytes // 4, device=device)
        b = torch.empty_like(a)
        secs = timeit(lambda: b.copy_(a), 5, torch.cuda.synchronize)
    return 2 * nbytes / secs / 1e9


def counted_bytes(
    num_edges: int, rows_in: int, rows_out: int, feat: int, elem: int, meta: int
) -> int:
    """Bytes one CSR pass must move at least: gathered rows, indices, output rows, row pointer."""
    return num_edges * (feat * elem + meta + 4) + rows_out * feat * 4 + (rows_in + rows_out) * 4


def emit(record: dict[str, Any]) -> None:
    print(json.dumps(record), flush=True)


def pyg_scatter_mean(x: torch.Tensor, col: torch.Tensor, dst: torch.Tensor, m: int) -> torch.Tensor:
    from torch_geometric.utils import scatter

    return scatter(x.index_select(0, col), dst, dim=0, dim_size=m, reduce="mean")


def float_methods(x, rowptr, col, csr, m) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    rowptr32 = rowptr.to(col.dtype)
    return {
        "gnnsys": lambda t: aggregate(t, rowptr, col, "mean"),
        "embedding_bag": lambda t: torch.nn.functional.embedding_bag(
            col, t, rowptr32, mode="mean", include_last_offset=True
        ),
        "sparse_mm_csr": lambda t: torch.sparse.mm(csr, t, reduce="mean"),
    }


def run_float(args: argparse.Namespace, g: dict[str, Any], copy_bw: float, sync: Any) -> None:
    x, rowptr, col, m, n, e = g["x"], g["rowptr"], g["col"], g["m"], g["n"], g["e"]
    f = x.shape[1]
    fwd_bytes = counted_bytes(e, n, m, f, 4, 0)
    bwd_bytes = counted_bytes(e, m, n, f, 4, 0)
    t0 = time.perf_counter()
    transpose_csr(rowptr, col, n)
    sync()
    emit({"bench": "transpose_csr", "seconds": time.perf_counter() - t0, "edges": e})
    grad = torch.randn(m, f, device=x.device)
    for name, fn in float_methods(x, rowptr, col, g["csr"], m).items():
        secs = timeit(lambda fn=fn: fn(x), args.repeats, sync)
        emit(_line(args, "fwd", "fp32", name, secs, fwd_bytes, copy_bw, e))
        xg = x.detach().requires_grad_(True)

        def step(fn=fn, xg=xg):
            xg.grad = None
            fn(xg).backward(grad)

        secs = timeit(step, args.repeats, sync)
        emit(_line(args, "fwd+bwd", "fp32", name, secs, fwd_bytes + bwd_bytes, copy_bw, e))
    run_pyg_subset(args, g, copy_bw, sync)


def run_pyg_subset(args: argparse.Namespace, g: dict[str, Any], copy_bw: float, sync: Any) -> None:
    x, rowptr, m, n, e = g["x"], g["rowptr"], g["m"], g["n"], g["e"]
    rows = int(torch.searchsorted(rowptr, torch.tensor(args.pyg_edges, device=rowptr.device)))
    rows = max(1, min(rows, m))
    e_sub = int(rowptr[rows])
    col = g["col"][:e_sub].long()
    dst = torch.repeat_interleave(
        torch.arange(rows, device=x.device), rowptr[1 : rows + 1] - rowptr[:rows]
    )
    f = x.shape[1]
    fwd_bytes = counted_bytes(e_sub, n, rows, f, 4, 0)
    secs = timeit(lambda: pyg_scatter_mean(x, col, dst, rows), args.repeats, sync)
    rec = _line(args, "fwd", "fp32", "pyg_scatter", secs, fwd_bytes, copy_bw, e_sub)
    emit({**rec, "subset": True, "seconds_full": secs * e / e_sub})
    xg = x.detach().requires_grad_(True)
    grad = torch.randn(rows, f, device=x.device)

    def step() -> None:
        xg.grad = None
        pyg_scatter_mean(xg, col, dst, rows).backward(grad)

    secs = timeit(step, args.repeats, sync)
    both = fwd_bytes + counted_bytes(e_sub, rows, n, f, 4, 0)
    rec = _line(args, "fwd+bwd", "fp32", "pyg_scatter", secs, both, copy_bw, e_sub)
    emit({**rec, "subset": True, "seconds_full": secs * e / e_sub})


def run_int8(args: argparse.Namespace, g: dict[str, Any], copy_bw: float, sync: Any) -> None:
    x, rowptr, col, m, n, e = g["x"], g["rowptr"], g["col"], g["m"], g["n"], g["e"]
    f = x.shape[1]
    lo, hi = x.min(1).values, x.max(1).values
    scale = ((hi - lo) / 255).clamp(min=1e-6).half()
    zero = (-128 - lo / scale.float()).half()
    q = (
        torch.round(x / scale.float()[:, None] + zero.float()[:, None])
        .clamp(-128, 127)
        .to(torch.int8)
    )
    int8_bytes = counted_bytes(e, n, m, f, 1, 4)
    fp32_bytes = counted_bytes(e, n, m, f, 4, 0)
    emit({"bench": "bytes_ratio", "fp32_over_int8": fp32_bytes / int8_bytes})
    secs = timeit(
        lambda: aggregate(q, rowptr, col, "mean", scale=scale, zero=zero), args.repeats, sync
    )
    emit(_line(args, "fwd", "int8", "gnnsys", secs, int8_bytes, copy_bw, e))
    for name, dtype in (("fp32", torch.float32), ("fp16", torch.float16)):
        xt = x.to(dtype)
        secs = timeit(lambda xt=xt: aggregate(xt, rowptr, col, "mean"), args.repeats, sync)
        nbytes = counted_bytes(e, n, m, f, xt.element_size(), 0)
        emit(_line(args, "fwd", name, "gnnsys", secs, nbytes, copy_bw, e))


def _line(
    args: argparse.Namespace,
    passes: str,
    dtype: str,
    method: str,
    secs: float,
    nbytes: int,
    copy_bw: float,
    edges: int,
) -> dict[str, Any]:
    gbps = nbytes / secs / 1e9
    return {
        "bench": "aggregate", "device": args.device, "pass": passes, "dtype": dtype,
        "method": method, "feat": args.feat, "edges": edges, "seconds": round(secs, 4),
        "bytes": nbytes, "gbps": round(gbps, 2), "copy_gbps": round(copy_bw, 2),
        "frac_copy_bw": round(gbps / copy_bw, 3), "threads": torch.get_num_threads(),
    }  # fmt: skip


def build_graph(args: argparse.Namespace) -> dict[str, Any]:
    indptr, indices = load_rmat(args.scale, args.edge_factor, args.seed)
    n, e = indptr.shape[0] - 1, indices.shape[0]
    dev = args.device
    rowptr = torch.from_numpy(indptr).to(dev)
    col = torch.from_numpy(indices.astype(np.int32)).to(dev)
    gen = torch.Generator().manual_seed(args.seed)
    x = torch.randn(n, args.feat, generator=gen).to(dev)
    values = torch.ones(e, device=dev)
    csr = torch.sparse_csr_tensor(rowptr, col.long(), values, (n, n))
    return {"x": x, "rowptr": rowptr, "col": col, "csr": csr, "m": n, "n": n, "e": e}


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--scale", type=int, default=20, help="log2 of the node count")
    p.add_argument("--edge-factor", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--feat", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--pyg-edges", type=int, default=2_500_000, help="edges in the PyG subset")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--skip", default="", help="comma list of parts to skip: float,int8")
    args = p.parse_args()
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    copy_bw = copy_bandwidth(args.device)
    emit({"bench": "copy", "device": args.device, "gbps": round(copy_bw, 2)})
    g = build_graph(args)
    emit({"bench": "graph", "nodes": g["n"], "edges": g["e"], "feat": args.feat})
    backend = "triton" if args.device == "cuda" else "torch"
    with use_backend(backend):
        if "float" not in args.skip:
            run_float(args, g, copy_bw, sync)
        if "int8" not in args.skip:
            run_int8(args, g, copy_bw, sync)


if __name__ == "__main__":
    main()
