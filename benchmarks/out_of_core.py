"""Out of core: write synthetic:rmat to Parquet, build a 4-part store, train one epoch, evaluate,
with the whole job inside one memory cgroup. One JSON line per graph size.

Each step is a ``gnnsys`` command started inside the cgroup (v1 memory controller at
``/sys/fs/cgroup/memory``; needs root), so every process it starts (driver, Ray's GCS, raylet
and object store, trainers, owners, Ray Data tasks) and the page cache of every file it reads or
writes are charged to the one limit::

    gnnsys export synthetic:rmat -D num_nodes=2**s -D num_features=128 --format parquet
    gnnsys partition parquet:DIR --parts 4 --method ldg --memory-budget LIMIT --json
    gnnsys train --store STORE --parts 4 --epochs 1 --hidden 128 --fanouts 15,10

A sampler outside the cgroup reads the group's processes every ``--interval`` seconds and keeps
each one's peak RSS per stage (``construction`` = Parquet -> on-disk CSR, ``partition``,
``store`` = writing the shards, ``epoch``, ``evaluation``; stage windows come from the commands'
own timings), and the group's peak usage (page cache included) per command. A command killed by
the OOM killer or failing ends the size with ``completed: false`` and the reason.

Usage (root)::

    python benchmarks/out_of_core.py --log2-nodes 20 --work /tmp/ooc \
        --out docs/results/out-of-core-2p20.jsonl

``--limit`` defaults to half the graph's size (CSR + features, float32); ``--limit-of-log2 24``
uses the limit of the 2**24 graph at a smaller size, so the growth with size is visible under
one fixed limit. ``--runs capped,uncapped`` (default) trains each size twice in one sitting,
under the limit and with the machine's memory (the second on the first's store), so the capped
epoch is compared with its own uncapped run. Each line also has ``train_seeds``, the epoch's
seconds per seed and evaluation's per node, ``balance`` (``node`` and ``edge`` of the
partition, ``work``: the ranks' sampled edges, max over mean, with every figure of the run's
``metrics.jsonl`` ``balance`` under ``ranks``) and ``seq_read_seconds``, the time to read the
store's files once in order from a dropped page cache on the same disk.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

_CG_ROOT = Path("/sys/fs/cgroup/memory")
_REPO = Path(__file__).resolve().parent.parent


def graph_bytes(num_nodes: int, avg_degree: float, num_features: int) -> int:
    """CSR (int64 indptr, int32 indices over ~``avg_degree * N`` edges) plus float32 features."""
    return int(8 * (num_nodes + 1) + 4 * avg_degree * num_nodes + 4 * num_features * num_nodes)


class Group:
    """A memory cgroup of its own, limited to ``limit`` bytes, removed on exit."""

    def __init__(self, name: str, limit: int) -> None:
        self.path = _CG_ROOT / name
        self.limit = limit

    def __enter__(self) -> Group:
        if self.path.exists():
            self._kill_all()
            self.path.rmdir()
        self.path.mkdir()
        (self.path / "memory.limit_in_bytes").write_text(str(self.limit))
        (self.path / "memory.swappiness").write_text("0")
        return self

    def __exit__(self, *exc: object) -> None:
        self._kill_all()
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.1)

    def pids(self) -> list[int]:
        text = (self.path / "cgroup.procs").read_text()
        return [int(p) for p in text.split()]

    def _kill_all(self) -> None:
        for pid in self.pids():
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass

    def reset_peak(self) -> None:
        (self.path / "memory.max_usage_in_bytes").write_text("0")

    def peak(self) -> int:
        return int((self.path / "memory.max_usage_in_bytes").read_text())

    def stat(self) -> dict[str, int]:
        """``memory.stat`` of the group (``total_rss``: anonymous memory of all its processes;
        ``total_cache``: page cache and shared memory charged to it)."""
        out = {}
        for line in (self.path / "memory.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            out[key] = int(value)
        return out

    def oom_kills(self) -> int:
        for line in (self.path / "memory.oom_control").read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
        return 0


class Sampler:
    """RSS of every process of the group, every ``interval`` seconds, with timestamps."""

    def __init__(self, group: Group, interval: float) -> None:
        self.group, self.interval = group, interval
        self.samples: list[tuple[float, int, str, int, int]] = []  # (time, pid, name, rss, anon)
        self.group_samples: list[tuple[float, int, int, int]] = []  # (time, anon, shmem, cache)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        import psutil

        names: dict[int, str] = {}
        while not self._stop.wait(self.interval):
            now = time.time()
            try:
                stat = self.group.stat()
                self.group_samples.append(
                    (
                        now,
                        stat.get("total_rss", 0),
                        stat.get("total_shmem", 0),
                        stat.get("total_cache", 0),
                    )
                )
            except OSError:
                pass
            for pid in self.group.pids():
                try:
                    proc = psutil.Process(pid)
                    if names.get(pid, "ray-worker") in ("ray-worker", "ray::IDLE"):
                        names[pid] = _process_name(proc)  # Ray titles its workers later
                    rss, anon = _rss(pid)
                    self.samples.append((now, pid, names[pid], rss, anon))
                except (psutil.NoSuchProcess, psutil.AccessDenied, OSError):
                    continue

    def group_peaks(self, start: float, end: float) -> dict[str, int]:
        """Peak anonymous memory, shared memory and page cache of the whole group in a window."""
        inside = [s for s in self.group_samples if start <= s[0] <= end]
        keys = ("anon_bytes", "shmem_bytes", "cache_bytes")
        return {k: max((s[i + 1] for s in inside), default=0) for i, k in enumerate(keys)}

    def peaks(self, start: float, end: float) -> dict[str, dict[str, int]]:
        """Per process (``name[pid]``), peak RSS and peak anonymous RSS in ``[start, end]``.

        ``rss`` counts the file pages a process maps (the store's features, read through the
        page cache and shared by every process that maps them); ``anon`` is its own memory.
        """
        out: dict[str, dict[str, int]] = {}
        for t, pid, name, rss, anon in self.samples:
            if start <= t <= end:
                peak = out.setdefault(f"{name}[{pid}]", {"rss": 0, "anon": 0})
                peak["rss"], peak["anon"] = max(peak["rss"], rss), max(peak["anon"], anon)
        return dict(sorted(out.items(), key=lambda kv: -kv[1]["anon"]))


def _rss(pid: int) -> tuple[int, int]:
    """``(VmRSS, RssAnon)`` of a process, in bytes (``/proc/PID/status``)."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon"):
            fields[key] = int(value.split()[0]) * 1024
    return fields.get("VmRSS", 0), fields.get("RssAnon", 0)


def _process_name(proc: Any) -> str:
    cmd = proc.cmdline()
    title = cmd[0] if cmd else proc.name()
    if title.startswith("ray::"):
        return title.split()[0]
    if any("default_worker.py" in c for c in cmd):
        return "ray-worker"  # its ray::<actor or task> title is set after it starts
    if "gnnsys" in cmd:
        at = cmd.index("gnnsys")
        return "gnnsys " + (cmd[at + 1] if at + 1 < len(cmd) else "")
    base = os.path.basename(title)
    if base.startswith("python") and len(cmd) > 1:
        return os.path.basename(cmd[1])
    return base


def run_in(group: Group, cmd: list[str], log: Path, timeout: float) -> tuple[int, float, float]:
    """Run ``cmd`` inside ``group``; returns (exit code, start, end) unix times."""
    group.reset_peak()
    shell = f'echo $$ > {group.path}/cgroup.procs && exec "$@"'
    start = time.time()
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            ["sh", "-c", shell, "sh", *cmd], stdout=fh, stderr=subprocess.STDOUT, cwd=_REPO
        )
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()  # its children (Ray) are killed with the group on exit
            proc.wait()
            rc = 124
    return rc, start, time.time()


def drop_page_cache() -> bool:
    """Write back and drop the machine's clean page cache (root); ``False`` where refused.

    Before every step, so no file a step reads is resident already: pages cached by an
    earlier process (an earlier run's store, a removed group's reads) are charged to no
    group of this run and would serve the step from outside the limit.
    """
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("1\n")
    except OSError:
        return False
    return True


def _tail(path: Path, n: int = 6) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-n:])
    except OSError:
        return ""


def _last_json(path: Path) -> dict[str, Any]:
    for line in reversed(path.read_text().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                out: dict[str, Any] = json.loads(line)
                return out
            except ValueError:
                continue
    return {}


def bench_size(args: argparse.Namespace, log2: int, capped: bool = True) -> dict[str, Any]:
    n = 1 << log2
    gbytes = graph_bytes(n, args.avg_degree, args.features)
    limit = (
        args.limit
        or graph_bytes(1 << (args.limit_of_log2 or log2), args.avg_degree, args.features) // 2
    )
    if not capped:  # the same job with the machine's memory (the cgroup still measures it)
        limit = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    work = Path(args.work) / f"2p{log2}"
    reuse = args.reuse_parquet and (work / "parquet" / "gnnsys.json").is_file()
    built = work / "build.json"  # the export and partition steps' record, kept for --reuse-store
    reuse_store = (
        args.reuse_store and built.is_file() and (work / "store" / "manifest.json").is_file()
    )
    keep = {"parquet", "store", "build.json"} if reuse_store else {"parquet"} if reuse else set()
    for old in work.iterdir() if work.is_dir() else []:
        if old.name not in keep:
            shutil.rmtree(old) if old.is_dir() else old.unlink()
    work.mkdir(parents=True, exist_ok=True)
    gn = [sys.executable, "-m", "gnnsys"]
    record: dict[str, Any] = {
        "bench": "out_of_core",
        "log2_nodes": log2,
        "num_nodes": n,
        "num_features": args.features,
        "avg_degree_drawn": args.avg_degree,
        "graph_bytes": gbytes,
        "cgroup_limit_bytes": limit,
        "capped": capped,
        "parts": args.parts,
        "method": args.method,
        "completed": False,
        "commands": {},
        "stages": {},
    }
    steps = [
        (
            "export",
            gn
            + [
                "export",
                "synthetic:rmat",
                "-D",
                f"num_nodes={n}",
                "-D",
                f"num_features={args.features}",
            ]
            + [
                "-D",
                f"avg_degree={args.avg_degree}",
                "--format",
                "parquet",
                "--out",
                str(work / "parquet"),
            ],
        ),
        (
            "partition",
            gn
            + [
                "partition",
                f"parquet:{work / 'parquet'}",
                "--parts",
                str(args.parts),
                "--method",
                args.method,
            ]
            + [
                "--memory-budget",
                str(int(limit * args.budget_fraction)),
                "--out",
                str(work / "store"),
                "--json",
            ]
            + args.partition_arg,
        ),
        (
            "train",
            gn
            + ["train", "--store", str(work / "store"), "--parts", str(args.parts), "--epochs", "1"]
            + ["--hidden", "128", "--fanouts", "15,10", "--batch-size", "1024", "--no-progress"]
            + ["--topology", "partitioned"]
            + ["--deadline", "3600"]  # an evaluation layer is one call: minutes at these sizes
            + ["--startup-deadline", "900"]  # each rank checks its shard, read cold from disk
            + ["--out", str(work / "run")]
            + args.train_arg,
        ),
    ]
    if reuse_store:
        earlier = json.loads(built.read_text())
        for key in ("commands", "stages", "partition_summary", "num_edges", "reused_parquet"):
            if key in earlier:
                record[key] = earlier[key]
        record["reused_store"] = True
        steps = steps[2:]
    elif reuse:
        steps = steps[1:]
        record["reused_parquet"] = True
    if args.build_only:
        steps = [step for step in steps if step[0] != "train"]
        record["build_only"] = True
    with (
        Group(f"gnnsys-ooc-{os.getpid()}", limit) as group,
        Sampler(group, args.interval) as sampler,
    ):
        for name, cmd in steps:
            log = work / f"{name}.log"
            timeout = args.train_timeout if name == "train" and args.train_timeout else args.timeout
            record.setdefault("page_cache_dropped", {})[name] = drop_page_cache()
            rc, start, end = run_in(group, cmd, log, timeout)
            record["commands"][name] = {
                "seconds": round(end - start, 2),
                "cgroup_peak_bytes": group.peak(),
                "exit_code": rc,
                "oom_kills": group.oom_kills(),
                "group": sampler.group_peaks(start, end),
                "peak_rss": sampler.peaks(start, end),
            }
            if rc != 0:
                record["failed"] = f"{name}: exit {rc}; {_tail(log)}"
                if name == "train":
                    record["train_progress"] = _train_progress(log)
                break
            if name == "partition":
                summary = _last_json(log)
                record["partition_summary"] = summary
                record["num_edges"] = summary.get("num_edges")
                for stage, (s, e) in summary.get("stage_windows", {}).items():
                    record["stages"][stage] = _stage(sampler, s, e)
                built.write_text(json.dumps(record))
            if name == "train":
                _train_stages(record, work / "run", sampler)
        else:
            record["completed"] = not args.build_only  # completed means trained and evaluated
    _figures(record, work / "store")
    record["disk_bytes"] = {
        d.name: sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
        for d in work.iterdir()
        if d.is_dir()
    }
    if not (args.keep or args.build_only):
        shutil.rmtree(work, ignore_errors=True)
    return record


def seq_read_seconds(store: Path, block: int = 1 << 20) -> float | None:
    """Seconds to read every file of ``store`` once, in order, from a dropped page cache."""
    if not store.is_dir() or not drop_page_cache():
        return None
    start = time.perf_counter()
    for path in sorted(f for f in store.rglob("*") if f.is_file()):
        with path.open("rb", buffering=0) as fh:
            while fh.read(block):
                pass
    return round(time.perf_counter() - start, 3)


def _figures(record: dict[str, Any], store: Path) -> None:
    """Train seeds, time per seed, node/edge/work balance and the store's sequential read."""
    summary, sec = record.get("partition_summary", {}), record.get("train_seconds", {})
    seeds = sum(int(r.get("seeds", 0)) for r in record.get("ranks", ()))
    record["train_seeds"] = seeds or None
    if seeds and sec:
        record["epoch_seconds_per_seed"] = float(sec["total"]) / seeds
        record["eval_seconds_per_node"] = float(sec.get("eval", 0.0)) / record["num_nodes"]
    work = record.get("rank_balance", {})
    record["balance"] = {
        "node": summary.get("node_balance"),
        "edge": summary.get("edge_balance"),
        "work": work.get("sampled_edges"),  # max over mean of the ranks' sampled edges
        "ranks": work,
    }
    record["seq_read_seconds"] = seq_read_seconds(store)


def _stage(sampler: Sampler, start: float, end: float) -> dict[str, Any]:
    return {
        "seconds": round(end - start, 2),
        "group": sampler.group_peaks(start, end),
        "peak_rss": sampler.peaks(start, end),
    }


def _train_stages(record: dict[str, Any], run: Path, sampler: Sampler) -> None:
    """Epoch and evaluation windows from the metrics line's time and its own durations."""
    metrics = run / "metrics.jsonl"
    if not metrics.is_file():
        return
    line = json.loads(metrics.read_text().splitlines()[0])
    end = metrics.stat().st_mtime
    sec = line["seconds"]
    eval_s, epoch_s = float(sec.get("eval", 0.0)), float(sec["total"])
    record["train_seconds"] = sec
    record["test_acc"] = line.get("test_acc")
    record["ranks"], record["rank_balance"] = line.get("ranks", []), line.get("balance", {})
    windows = {"evaluation": (end - eval_s, end), "epoch": (end - eval_s - epoch_s, end - eval_s)}
    for stage, (s, e) in windows.items():
        record["stages"][stage] = _stage(sampler, s, e)


def _train_progress(log: Path) -> dict[str, Any]:
    """The driver's last progress line in ``log`` (``epoch E: D/N batches after Ts``, logged
    every minute when no terminal shows a bar): how far a stopped train step got."""
    import re

    text = log.read_text(errors="replace") if log.is_file() else ""
    out: dict[str, Any] = {}
    lines = re.findall(r"epoch (\d+): (\d+)/(\d+) batches after (\d+)s", text)
    if lines:
        epoch, done, total, sec = lines[-1]
        out = {"epoch": int(epoch), "batches": int(done), "of": int(total), "seconds": int(sec)}
    layers = re.findall(r"evaluation: layer (\d+)/(\d+) done after (\d+)s", text)
    if layers:
        out["eval_layers"] = [[int(a), int(b), int(c)] for a, b, c in layers]
    restarts = re.findall(r"failure \(([^)]*)\): (.*?); restart (\d+)/(\d+)", text)
    if restarts:
        out["restarts"] = [f"{kind}: {what}" for kind, what, _, _ in restarts]
    return out


def _progress_text(r: dict[str, Any]) -> str:
    """How far a stopped train step got, from its ``train_progress``."""
    got = r.get("train_progress") or {}
    parts = []
    if "batches" in got:
        parts.append(f"epoch {got['batches']}/{got['of']} batches after {got['seconds']} s")
    for layer, total, sec in got.get("eval_layers", []):
        parts.append(f"evaluation layer {layer}/{total} after {sec} s")
    parts += [f"restart after {what}" for what in got.get("restarts", [])]
    oom = r["commands"].get("train", {}).get("oom_kills")
    if oom:
        parts.append(f"{oom} OOM kill(s)")
    return "train step stopped: " + ", ".join(parts) if parts else ""


def _label(who: str) -> str:
    """``ray::gnnsys-worker-0-...:TrainWorker.__init__[123]`` -> ``TrainWorker``, etc."""
    name = who.rsplit("[", 1)[0]
    if name.startswith("ray::Map"):
        return "Ray Data task"
    if ":" in name.removeprefix("ray::"):
        return name.rsplit(":", 1)[1].split(".")[0]
    return name.removeprefix("ray::")


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value >> 20:,}"


def table(paths: list[str]) -> str:
    """A markdown table of result lines: per stage its seconds, the group's peak anonymous
    memory, and the largest anonymous peak of one process (MiB)."""
    rows = ["| nodes | edges | graph | limit | stage | s | group anon | max process anon (who) |"]
    rows.append("|---|---|---|---|---|---|---|---|")
    mib = 1 << 20
    for path in paths:
        for line in Path(path).read_text().splitlines():
            r = json.loads(line)
            head = (
                f"| 2^{r['log2_nodes']} | {r.get('num_edges') or 0:,} | "
                f"{r['graph_bytes'] / 2**30:.2f} GiB | {r['cgroup_limit_bytes'] / 2**30:.2f} GiB |"
            )
            stages = dict(r["commands"].get("export", {}) and {"export": r["commands"]["export"]})
            stages |= r["stages"]
            if "train" in r["commands"] and "epoch" not in stages:  # stopped: its whole window
                stages["train (stopped)"] = r["commands"]["train"]
            for name, st in stages.items():
                procs = st["peak_rss"]
                who, top = max(procs.items(), key=lambda kv: kv[1]["anon"], default=("-", {}))
                group = _mib(st.get("group", {}).get("anon_bytes"))
                rows.append(
                    f"{head} {name} | {st['seconds']:.0f} | {group} | "
                    f"{top.get('anon', 0) // mib:,} ({_label(who)}) |"
                )
                head = "| | | | |"
            failed = r.get("note") or _progress_text(r) or r.get("failed", "")
            done = "completed" if r["completed"] else f"not completed: {failed[:240]}"
            rows.append(f"| | | | | {done} | | | |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--log2-nodes", type=int, nargs="+", default=[20])
    p.add_argument("--features", type=int, default=128)
    p.add_argument("--avg-degree", type=float, default=20.0)
    p.add_argument("--parts", type=int, default=4)
    p.add_argument("--method", default="fennel")
    p.add_argument("--limit", type=int, help="cgroup limit in bytes (default: half the graph)")
    p.add_argument("--limit-of-log2", type=int, help="use the default limit of this size instead")
    p.add_argument("--budget-fraction", type=float, default=0.9, help="--memory-budget / limit")
    p.add_argument("--interval", type=float, default=0.25)
    p.add_argument("--timeout", type=float, default=7200, help="seconds per step")
    p.add_argument("--train-timeout", type=float, help="seconds for the train step (killed after)")
    p.add_argument("--work", default="/tmp/gnnsys-ooc")
    p.add_argument("--train-arg", action="append", default=[], help="extra flag for gnnsys train")
    p.add_argument(
        "--partition-arg",
        action="append",
        default=[],
        help="extra flag for gnnsys partition (--partition-arg=-O --partition-arg=edge_weight=1)",
    )
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    p.add_argument(
        "--reuse-parquet", action="store_true", help="skip the export when WORK has its tables"
    )
    p.add_argument(
        "--reuse-store",
        action="store_true",
        help="skip export and partition when WORK has the store a completed partition step "
        "wrote (its record is carried into the line); only the train step runs",
    )
    p.add_argument(
        "--build-only",
        action="store_true",
        help="export and partition only, keep WORK (a later --reuse-store run trains on it)",
    )
    p.add_argument(
        "--runs",
        default="capped,uncapped",
        help="runs per size, in order: capped (the cgroup limit) and/or uncapped (the machine's "
        "memory), each one JSON line with 'capped'; a later run trains on the first one's store",
    )
    p.add_argument("--out", help="append the JSON lines here too")
    p.add_argument(
        "--table", nargs="+", metavar="JSONL", help="print a markdown table, run nothing"
    )
    args = p.parse_args(argv)
    if args.table:
        print(table(args.table))
        return 0
    # SIGTERM as Ctrl-C: the group's ``with`` exits, killing what it started (no strays).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    runs = [c == "capped" for c in args.runs.split(",")]
    for log2 in args.log2_nodes:
        for k, capped in enumerate(runs):
            later = argparse.Namespace(**vars(args))
            if k < len(runs) - 1:  # the next run of the size trains on this run's store
                later.keep = True
            if k > 0:
                later.reuse_store = True
            record = bench_size(later, log2, capped)
            line = json.dumps(record)
            print(line, flush=True)
            if args.out:
                with open(args.out, "a") as fh:
                    fh.write(line + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
