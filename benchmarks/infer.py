"""``gnnsys predict`` / ``gnnsys embed`` from a trained run: exactness, time, size and memory.

Per dataset: train a run with the CLI (``--executor local``), then

* ``predict`` and read the files back: the test accuracy computed from the written ``pred``
  column against the dataset's labels must equal the run's reported ``test_acc`` exactly;
* ``embed`` on the run's own store and on a 4-part store of the same graph (``gnnsys partition``,
  ``--store``): the largest difference of any embedding entry (<= 1e-5 is the claim; a run with
  learnable embedding rows, such as synthetic:mag's featureless types, is refused the other
  partition and its line says ``refused``);
* time, bytes written, rows, and per million nodes; the peak RSS of every process (each rank's,
  from the manifest's parts, and this driver's).

One JSON line per dataset and step on stdout (and ``--out``). Real datasets are read from
``--root`` (``../shared/datasets``); a dataset whose files are missing is reported as skipped.

Usage::

    python benchmarks/infer.py [--datasets cora,facebook,mag,rmat1m] [--executor local|ray]
        [--work /tmp/gnnsys-infer] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2] / "shared" / "datasets"
GNNSYS = [sys.executable, "-m", "gnnsys"]
DATASETS: dict[str, dict[str, Any]] = {
    "cora": {"args": ["planetoid:cora"], "train": ["--epochs", "20", "--batch-size", "64"]},
    "facebook": {"args": ["musae:facebook"], "train": ["--epochs", "5"]},
    "mag": {
        "args": ["synthetic:mag", "-D", "scale=0.01", "-D", "reverse=true"],
        "train": ["--epochs", "2"],
    },
    "rmat1m": {
        "args": ["synthetic:rmat", "-D", "num_nodes=1048576"],
        "train": ["--epochs", "1", "--hidden", "128"],
    },
}


PEAKS: dict[str, int] = {}
"""The last command's peak RSS (its own process; ``os.wait4``)."""


def _gnnsys(*argv: str) -> float:
    start = time.perf_counter()
    proc = subprocess.Popen([*GNNSYS, *argv], stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, argv)
    PEAKS["command"] = usage.ru_maxrss * 1024
    return time.perf_counter() - start


def _labels(name: str, args: list[str], root: str) -> tuple[np.ndarray, np.ndarray]:
    """Labels and test mask of the scored nodes (the labelled type on a typed graph)."""
    from gnnsys.datasets import is_heterogeneous, load, load_hetero
    from gnnsys.options import parse_kv

    params = parse_kv([args[i + 1] for i, a in enumerate(args) if a == "-D"])
    if is_heterogeneous(args[0], root):
        nodes = load_hetero(args[0], root=root, **params).nodes["paper"]
        assert nodes.y is not None and nodes.test_mask is not None
        return nodes.y, nodes.test_mask
    graph = load(args[0], root=root, **params)
    assert graph.y is not None
    return graph.y, graph.test_mask


def _sizes(out: Path) -> dict[str, Any]:
    import gnnsys.outputs as outputs

    manifest = outputs.open(out).manifest
    return {
        "rows": manifest["num_rows"],
        "bytes": sum(f["nbytes"] for f in manifest["files"]),
        "rank_seconds_write": [round(f["seconds"], 3) for f in manifest["files"]],
        "rank_peak_rss_bytes": [f["peak_rss_bytes"] for f in manifest["files"]],
        "command_peak_rss_bytes": PEAKS["command"],
    }


def bench(name: str, work: Path, root: str, executor: str, parts: int) -> list[dict[str, Any]]:
    """Train, predict, embed twice; the lines of one dataset."""
    import gnnsys.outputs as outputs

    spec = DATASETS[name]
    run, base = work / name / "run", [*spec["args"], "--root", root]
    lines: list[dict[str, Any]] = []
    if not (run / "summary.json").exists():
        train_s = _gnnsys("train", *base, "--parts", str(parts), "--executor", "local",
                          "--out", str(run), "--no-progress", *spec["train"])  # fmt: skip
        lines.append({"dataset": name, "step": "train", "parts": parts, "seconds": train_s})
    last = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    common = ["--executor", executor, "--overwrite"]
    pred_s = _gnnsys("predict", str(run), "--out", str(work / name / "pred"), *common)
    table = outputs.open(work / name / "pred").read(columns=["id", "pred"])
    y, test_mask = _labels(name, base, root)
    pred = np.full(y.shape[0], -1, dtype=np.int64)
    pred[table["id"].to_numpy()] = table["pred"].to_numpy()
    mask = test_mask & (y >= 0)
    acc = float((pred[mask] == y[mask]).mean())
    sizes = _sizes(work / name / "pred")
    lines.append({
        "dataset": name, "step": "predict", "parts": parts, "executor": executor,
        "seconds": pred_s, **sizes, "seconds_per_m_nodes": pred_s / sizes["rows"] * 1e6,
        "bytes_per_m_nodes": sizes["bytes"] / sizes["rows"] * 1e6,
        "run_test_acc": last["test_acc"], "outputs_test_acc": acc,
        "equal": acc == last["test_acc"],
    })  # fmt: skip
    store4 = work / name / "store4"
    if not (store4 / "manifest.json").exists():
        _gnnsys("partition", *base, "--parts", "4", "--method", "random", "--out", str(store4))
    rows = {}
    for label, extra in (("own", []), ("4parts", ["--store", str(store4)])):
        out = work / name / f"emb-{label}"
        try:
            secs = _gnnsys("embed", str(run), "--out", str(out), *common, *extra)
        except subprocess.CalledProcessError:  # refused: a run with per-rank embedding rows
            lines.append({"dataset": name, "step": f"embed-{label}", "refused": True})
            continue
        got = outputs.open(out)
        table = got.read()
        key = np.asarray(table["id"].to_numpy(), dtype=np.int64)
        if got.manifest["typed"]:
            types = np.asarray(table["node_type"].to_numpy(zero_copy_only=False))
            key = key + np.unique(types, return_inverse=True)[1].astype(np.int64) * (1 << 40)
        order = np.argsort(key)
        rows[label] = np.stack(table["embedding"].to_numpy(zero_copy_only=False))[order]
        sizes = _sizes(out)
        lines.append({
            "dataset": name, "step": f"embed-{label}", "parts": got.manifest["parts"],
            "executor": executor, "layer": got.manifest["layer"], "seconds": secs, **sizes,
            "seconds_per_m_nodes": secs / sizes["rows"] * 1e6,
            "bytes_per_m_nodes": sizes["bytes"] / sizes["rows"] * 1e6,
        })  # fmt: skip
    if len(rows) == 2:
        lines[-1]["max_abs_diff_vs_own"] = float(np.abs(rows["own"] - rows["4parts"]).max())
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default="cora,facebook,mag,rmat1m")
    p.add_argument("--root", default=str(ROOT))
    p.add_argument("--work", default="/tmp/gnnsys-infer")
    p.add_argument("--executor", default="local", choices=("local", "ray"))
    p.add_argument("--parts", type=int, default=2)
    p.add_argument("--out")
    args = p.parse_args()
    out = open(args.out, "a") if args.out else None  # noqa: SIM115
    for name in args.datasets.split(","):
        try:
            lines = bench(name, Path(args.work), args.root, args.executor, args.parts)
        except subprocess.CalledProcessError as err:
            lines = [{"dataset": name, "step": "skipped", "reason": str(err)}]
        for line in lines:
            text = json.dumps(line)
            print(text, flush=True)
            if out is not None:
                out.write(text + "\n")
                out.flush()


if __name__ == "__main__":
    main()
