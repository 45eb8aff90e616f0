"""Chaos: seeded runs that each suffer one fault, checked against a fault-free run.

Every run is ``gnnsys train`` as a user starts it (its own process, its own private Ray), on the
embedded synthetic:sbm graph and one store written first (so every run trains the same parts).
Each run draws one fault from its seed:

=================  ============================================================================
``kill-trainer``   SIGKILL of a random trainer process during a random epoch (from outside)
``freeze-trainer`` SIGSTOP of a random trainer during an epoch (never resumed)
``kill-owner``     SIGKILL of a random shard-owner process during an epoch
``freeze-owner``   SIGSTOP of a random shard owner during an epoch
``slow-owner``     a random owner stopped and resumed every 0.2 s for 6 s (half speed)
``kill-startup``   a random rank exits at the end of its constructor (``--inject-fault``)
``freeze-startup`` a random rank stops itself at the end of its constructor
``kill-eval``      a random rank exits as a random epoch's evaluation starts
``freeze-eval``    a random rank stops itself as an epoch's evaluation starts
``kill-driver``    SIGKILL of the driver during an epoch, then the same command with ``--resume``
=================  ============================================================================

Checks per run (``ok`` needs all): the fault was injected (an outside fault lands while at least
two epochs of work remain, so a freeze is noticed before the run would end anyway); it was
handled (``summary.json`` names exactly one cause of the right kind, a trainer ``rank`` or an
``owner of part``, as ``died`` or ``unresponsive``, and the group restarted; a slow owner causes
no restart; a killed driver's run resumes); exit code 0; every epoch exactly once in
``metrics.jsonl``; every line's loss and evaluation metrics identical to the fault-free run's;
after exit, no process of the run left (any process of its Ray session, or its watchdog) and no new
``/dev/shm`` entry. *Time to detect*: from the fault (the signal sent, or the moment a
watcher saw a rank's process stop or vanish) to the coordinator's failure record, against the
bound of its kind: ``heartbeat + 1 s`` for a freeze (in start-up too: a stopped process of this
node is seen), ``1 s`` plus the ranks' grace and the census for a kill.

One JSON line per run, then a summary line. Usage::

    python benchmarks/chaos.py --n 50 --seed 0 --out /tmp/chaos > docs/results/chaos.jsonl
    python benchmarks/chaos.py --n 3 --kinds kill-trainer,freeze-eval   # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

KINDS = (
    "kill-trainer",
    "freeze-trainer",
    "kill-owner",
    "freeze-owner",
    "slow-owner",
    "kill-startup",
    "freeze-startup",
    "kill-eval",
    "freeze-eval",
    "kill-driver",
)
TRAINER, OWNER = "TrainWorker", "ShardOwner"
"""Ray titles an actor's process ``ray::ShardOwner`` when idle and ``ray::<actor name>:<Class>.
<method>`` while it runs a method (its constructor included), so the class name is searched."""


@dataclass(frozen=True, slots=True)
class Setup:
    """The training command every run shares."""

    out: Path
    epochs: int
    parts: int
    deadline_s: float
    heartbeat_s: float
    startup_s: float
    batch_size: int

    def command(self, run_dir: Path, extra: list[str]) -> list[str]:
        return [
            sys.executable, "-m", "gnnsys", "train", "--store", str(self.out / "store"),
            "--parts", str(self.parts), "--fanouts", "5,5", "--hidden", "16",
            "--batch-size", str(self.batch_size), "--epochs", str(self.epochs), "--no-progress",
            "--deadline", str(self.deadline_s), "--heartbeat-timeout", str(self.heartbeat_s),
            "--startup-deadline", str(self.startup_s), "--max-restarts", "8",
            "--owner-reads", "remote",  # the faults hit owner actors, so trainers call them
            "--out", str(run_dir), *extra,
        ]  # fmt: skip


@dataclass(slots=True)
class Outcome:
    """One run's line."""

    seed: int
    fault: str
    target: str
    epoch: int
    rc: int = -1
    epochs_once: bool = False
    identical: bool = False
    leftover_pids: list[int] = field(default_factory=list)
    shm_left: list[str] = field(default_factory=list)
    restarts: int = 0
    causes: list[str] = field(default_factory=list)
    victims: list[int] = field(default_factory=list)
    kind: str | None = None
    detect_s: float | None = None
    bound_s: float | None = None
    wall_s: float = 0.0
    reason: str = ""
    injected: bool = False
    handled: bool = False
    extra: list[dict[str, Any]] = field(default_factory=list)
    """Later faults of the same run (``--extra-faults``): kind, target, epoch, detection."""

    @property
    def ok(self) -> bool:
        clean = not self.leftover_pids and not self.shm_left
        same = self.rc == 0 and self.epochs_once and self.identical
        extras = all(e["handled"] for e in self.extra)
        return same and clean and self.injected and self.handled and extras


# ---- processes ---------------------------------------------------------------------------------
def _ray_processes(drivers: tuple[int, ...]) -> dict[int, str]:
    """pid -> command of every process of the Ray sessions that ``drivers`` started.

    Ray names a session after its driver (``session_<time>_<driver pid>``); the watchdog names
    its driver in its command line. Nothing else on the machine counts (nor is ever signalled).
    """
    from gnnsys.train.control.watchdog import session_of

    out = {}
    marks = tuple(f"--driver {pid} " for pid in drivers)
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            cmd = " ".join(proc.info["cmdline"] or [])
            session = session_of(proc)
            mine = session is not None and session.endswith(tuple(f"_{p}" for p in drivers))
            if mine or any(m in cmd + " " for m in marks):
                out[proc.pid] = cmd[:120]
        except psutil.Error:
            continue
    return out


def _pids(role: str, drivers: tuple[int, ...]) -> list[int]:
    return sorted(p for p, cmd in _ray_processes(drivers).items() if f"{role}" in cmd)


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


class Watcher:
    """Samples a run's trainers and owners every 50 ms; remembers when one first stopped or
    vanished."""

    def __init__(self, driver: int) -> None:
        self.driver = driver
        self.first_event: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        seen: set[int] = set()
        while not self._stop.is_set() and self.first_event is None:
            found = _ray_processes((self.driver,))
            now = {p for p, cmd in found.items() if TRAINER in cmd or OWNER in cmd}
            for pid in now:
                try:
                    if psutil.Process(pid).status() == psutil.STATUS_STOPPED:
                        self.first_event = time.time()
                except psutil.Error:
                    continue
            if seen - now and self.first_event is None:
                self.first_event = time.time()
            seen |= now
            time.sleep(0.05)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


# ---- one run ------------------------------------------------------------------------------------
def _metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _essence(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per epoch: the loss and every evaluation metric (what must not change)."""
    keep = ("epoch", "loss", "batch_train_acc")
    return [
        {k: v for k, v in m.items() if k in keep or k.endswith(("_acc", "_f1", "_auc"))}
        for m in lines
    ]


def _wait_lines(run_dir: Path, count: int, proc: subprocess.Popen[bytes], limit: float) -> bool:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if len(_metrics(run_dir)) >= count:
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.05)
    return False


def _slow(pid: int, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        _signal(pid, signal.SIGSTOP)
        time.sleep(0.2)
        _signal(pid, signal.SIGCONT)
        time.sleep(0.2)


def run_one(
    setup: Setup,
    seed: int,
    reference: list[dict[str, Any]],
    kinds: tuple[str, ...],
    extra_faults: int = 0,
) -> Outcome:
    """One seeded run with one fault (plus ``extra_faults`` later kills or freezes of trainers
    and owners, each once the group recovered from the one before); see the module docstring."""
    rng = random.Random(seed)
    fault = kinds[rng.randrange(len(kinds))]
    # After a checkpoint exists (e - 1 is on disk), with >= 2 epochs of work left, so that a
    # freeze is noticed (heartbeat) before the run would have ended anyway.
    epoch = rng.randrange(1, max(2, setup.epochs - 2))
    rank = rng.randrange(setup.parts)
    delay = rng.uniform(0.0, 0.6)
    run_dir = setup.out / f"run-{seed:03d}"
    shutil.rmtree(run_dir, ignore_errors=True)
    extra: list[str] = []
    target = {"kill-startup": "rank", "freeze-startup": "rank"}.get(fault, "")
    if fault in ("kill-startup", "freeze-startup"):
        verb = "exit" if fault.startswith("kill") else "freeze"
        extra = ["--inject-fault", f"{verb}:{rank}:-1:0"]
        target, epoch = f"rank {rank}", -1
    elif fault in ("kill-eval", "freeze-eval"):
        verb = "exit" if fault.startswith("kill") else "freeze"
        extra = ["--inject-fault", f"{verb}:{rank}:{epoch}:-1"]
        target = f"rank {rank}"
    out = Outcome(seed=seed, fault=fault, target=target, epoch=epoch)
    shm_before = set(os.listdir("/dev/shm"))
    log = (setup.out / f"run-{seed:03d}.log").open("w")
    start = time.time()
    proc = subprocess.Popen(
        setup.command(run_dir, extra), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    drivers: tuple[int, ...] = (proc.pid,)
    watcher = Watcher(proc.pid)
    fault_at: float | None = None
    limit = 600.0
    if fault in ("kill-startup", "freeze-startup", "kill-eval", "freeze-eval"):
        out.injected = True  # inside the rank; the watcher times it
    elif _wait_lines(run_dir, epoch, proc, limit):
        time.sleep(delay)
        prefix = OWNER if "owner" in fault else TRAINER
        candidates = _pids(prefix, drivers)
        if fault == "kill-driver":
            _signal(proc.pid, signal.SIGKILL)
            fault_at, out.target, out.injected = time.time(), "driver", True
        elif candidates:
            out.injected = True
            pid = candidates[rng.randrange(len(candidates))]
            out.target = f"{prefix} pid {pid}"
            fault_at = time.time()
            if fault == "slow-owner":
                _slow(pid, 6.0)
            else:
                _signal(pid, signal.SIGKILL if fault.startswith("kill") else signal.SIGSTOP)
    if fault != "kill-driver":
        _extra_faults(setup, rng, out, proc, run_dir, drivers, extra_faults, limit)
    try:
        proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    out.rc = proc.returncode
    if fault == "kill-driver":
        time.sleep(2.0)  # the watchdog's poll, then the kills
        out.leftover_pids = sorted(_ray_processes(drivers))
        resumed = subprocess.Popen(
            setup.command(run_dir, ["--resume"]), stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        drivers += (resumed.pid,)
        out.rc = resumed.wait(timeout=limit)
    watcher.close()
    log.close()
    out.wall_s = time.time() - start
    if fault_at is None:
        fault_at = watcher.first_event
    lines = _metrics(run_dir)
    out.epochs_once = [m["epoch"] for m in lines] == list(range(setup.epochs))
    out.identical = _essence(lines) == _essence(reference)
    _settle(drivers, out)
    out.shm_left = sorted(set(os.listdir("/dev/shm")) - shm_before)
    summary_path = run_dir / "summary.json"
    failures: list[dict[str, Any]] = []
    if summary_path.exists():
        summary = json.loads(summary_path.read_text())
        out.restarts = int(summary.get("restarts", 0))
        failures = summary.get("failures", [])
    score(setup, out, failures, fault_at)
    return out


_WATCH_SLACK_S = 0.5


def score(
    setup: Setup, out: Outcome, failures: list[dict[str, Any]], fault_at: float | None
) -> None:
    """Pair each fault with the first failure recorded after it (and before the next fault),
    and judge it (``_handled``); a slow owner must have no failure in its window."""
    starts = [e["at"] for e in out.extra] + [float("inf")]
    # The watcher samples every ~0.1 s: a death it times may be recorded just before it saw it.
    main_from = fault_at - _WATCH_SLACK_S if fault_at is not None else 0.0
    record = _first_between(failures, main_from, starts[0])
    if out.fault == "slow-owner":
        out.handled = record is None
        record = None
    if record is not None:
        out.kind, out.causes, out.victims = record["kind"], record["causes"], record["victims"]
        out.reason = record["reason"]
        if fault_at is not None:
            out.detect_s = round(record["time"] - fault_at, 2)
    out.bound_s = _bound(out.fault, setup)
    if out.fault != "slow-owner":
        out.handled = _handled(out.fault, out.kind, out.causes, record is not None, out.rc)
    for i, extra in enumerate(out.extra):
        found = _first_between(failures, extra["at"], starts[i + 1])
        extra["kind"] = None if found is None else found["kind"]
        extra["causes"] = [] if found is None else found["causes"]
        extra["detect_s"] = None if found is None else round(found["time"] - extra["at"], 2)
        extra["bound_s"] = _bound(extra["fault"], setup)
        extra["handled"] = _handled(
            extra["fault"], extra["kind"], extra["causes"], found is not None, out.rc
        )


def rescore(spec: str, setup: Setup) -> list[Outcome]:
    """Outcomes of ``LINES=DIR`` scored again (the first version paired failures by order).

    The moment of an outside fault is recovered from the old line (``failures[0]`` time less
    its ``detect_s``); the rest is read back from each run's ``summary.json``.
    """
    lines_path, run_root = spec.split("=", 1)
    done = []
    for text in Path(lines_path).read_text().splitlines():
        line = json.loads(text)
        if line.pop("summary", False):
            continue
        line.pop("ok", None)
        out = Outcome(**line)
        summary_path = Path(run_root) / f"run-{out.seed:03d}" / "summary.json"
        failures: list[dict[str, Any]] = []
        if summary_path.exists():
            failures = json.loads(summary_path.read_text()).get("failures", [])
        fault_at = None
        if out.detect_s is not None and failures:
            fault_at = failures[0]["time"] - out.detect_s
        out.kind, out.causes, out.victims, out.reason, out.detect_s = None, [], [], "", None
        score(setup, out, failures, fault_at)
        done.append(out)
    return done


def _first_between(
    failures: list[dict[str, Any]], start: float, end: float
) -> dict[str, Any] | None:
    return next((f for f in failures if start <= f["time"] < end), None)


_EXTRA_KINDS = ("kill-trainer", "freeze-trainer", "kill-owner", "freeze-owner")


def _extra_faults(
    setup: Setup,
    rng: random.Random,
    out: Outcome,
    proc: subprocess.Popen[bytes],
    run_dir: Path,
    drivers: tuple[int, ...],
    count: int,
    limit: float,
) -> None:
    """Inject ``count`` more faults, each in a later epoch once the previous epoch's line is in.

    An epoch's line is written only after the group recovered and finished it, so each fault
    meets a healthy group; every fault leaves at least two epochs of work (see ``run_one``).
    """
    epoch = max(out.epoch, 0)
    for _ in range(count):
        epoch += 1
        if epoch > setup.epochs - 3 or not _wait_lines(run_dir, epoch + 1, proc, limit):
            return
        kind = _EXTRA_KINDS[rng.randrange(len(_EXTRA_KINDS))]
        role = OWNER if "owner" in kind else TRAINER
        time.sleep(rng.uniform(0.0, 0.6))
        candidates = _pids(role, drivers)
        if not candidates:
            return
        pid = candidates[rng.randrange(len(candidates))]
        at = time.time()
        _signal(pid, signal.SIGKILL if kind.startswith("kill") else signal.SIGSTOP)
        out.extra.append(
            {"fault": kind, "target": f"{role} pid {pid}", "epoch": epoch + 1, "at": at}
        )


def _handled(fault: str, kind: str | None, causes: list[str], failed: bool, rc: int) -> bool:
    """The fault had the effect it should: the right process kind named, the right reaction."""
    if fault == "kill-driver":
        return rc == 0  # resumed to the end
    role = "owner of part" if "owner" in fault else "rank"
    expected = "died" if fault.startswith("kill") else "unresponsive"
    return failed and kind == expected and len(causes) == 1 and causes[0].startswith(role)


def _settle(drivers: tuple[int, ...], out: Outcome) -> None:
    """Leftover Ray processes of the run, after up to 10 s for the killed ones to be reaped."""
    end = time.monotonic() + 10.0
    left = sorted(_ray_processes(drivers))
    while left and time.monotonic() < end:
        time.sleep(0.5)
        left = sorted(_ray_processes(drivers))
    out.leftover_pids = sorted(set(out.leftover_pids) | set(left))
    for pid in left:  # do not let one run's leftovers poison the next
        _signal(pid, signal.SIGKILL)


def _bound(fault: str, setup: Setup) -> float | None:
    """The documented detection bound of a fault kind (docs/training.md, Liveness)."""
    if fault.startswith("freeze"):  # in start-up too: a stopped local process is seen
        return setup.heartbeat_s + 1.0
    if fault.startswith("kill") and fault != "kill-driver":
        return 1.0 + 3.0  # one poll, the grace for the peers' outcome, and the census
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50, help="faulty runs")
    parser.add_argument("--seed", type=int, default=0, help="first run's seed")
    parser.add_argument("--out", default="/tmp/gnnsys-chaos", help="work directory (wiped)")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--parts", type=int, default=2)
    parser.add_argument("--num-nodes", type=int, default=4000)
    parser.add_argument("--deadline", type=float, default=30.0)
    parser.add_argument("--heartbeat", type=float, default=5.0)
    parser.add_argument("--startup-deadline", type=float, default=120.0)
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma list of fault kinds")
    parser.add_argument(
        "--rescore",
        nargs="+",
        metavar="LINES=DIR",
        help="score again the JSON lines of earlier runs (their run directories in DIR) with "
        "this version's pairing of faults and failures; prints the lines and one summary",
    )
    parser.add_argument(
        "--extra-faults",
        type=int,
        default=0,
        help="per run, this many more kills/freezes of trainers and owners in later epochs",
    )
    args = parser.parse_args()
    kinds = tuple(args.kinds.split(","))
    unknown = set(kinds) - set(KINDS)
    if unknown:
        parser.error(f"--kinds {sorted(unknown)}: choose from {', '.join(KINDS)}")
    if args.rescore:
        setup = Setup(
            Path(args.out), args.epochs, args.parts, args.deadline, args.heartbeat,
            args.startup_deadline, args.batch_size,
        )  # fmt: skip
        done = [o for spec in args.rescore for o in rescore(spec, setup)]
        for o in done:
            print(json.dumps({"ok": o.ok, **asdict(o)}), flush=True)
        print(json.dumps(summarize(done, setup, kinds)), flush=True)
        return
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    subprocess.run(
        [sys.executable, "-m", "gnnsys", "partition", "synthetic:sbm", "-D",
         f"num_nodes={args.num_nodes}", "--parts", str(args.parts), "--method", "random",
         "--hops", "2", "--out", str(out / "store")],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    setup = Setup(
        out,
        args.epochs,
        args.parts,
        args.deadline,
        args.heartbeat,
        args.startup_deadline,
        args.batch_size,
    )
    clean = subprocess.run(setup.command(out / "clean", []), capture_output=True, text=True)
    if clean.returncode != 0:
        raise SystemExit(f"the fault-free run failed:\n{clean.stderr[-3000:]}")
    reference = _metrics(out / "clean")
    outcomes = []
    for seed in range(args.seed, args.seed + args.n):
        outcome = run_one(setup, seed, reference, kinds, args.extra_faults)
        outcomes.append(outcome)
        print(json.dumps({"ok": outcome.ok, **asdict(outcome)}), flush=True)
    print(json.dumps(summarize(outcomes, setup, kinds)), flush=True)


def summarize(outcomes: list[Outcome], setup: Setup, kinds: tuple[str, ...]) -> dict[str, Any]:
    """The summary line: counts of every check and detection times per fault kind."""
    by_kind: dict[str, list[float]] = {}
    for o in outcomes:
        if o.detect_s is not None:
            by_kind.setdefault(o.fault, []).append(o.detect_s)
        for e in o.extra:
            if e["detect_s"] is not None:
                by_kind.setdefault(e["fault"], []).append(e["detect_s"])
    return {
        "summary": True,
        "runs": len(outcomes),
        "faults_total": len(outcomes) + sum(len(o.extra) for o in outcomes),
        "extra_handled": sum(e["handled"] for o in outcomes for e in o.extra),
        "ok": sum(o.ok for o in outcomes),
        "rc0": sum(o.rc == 0 for o in outcomes),
        "injected": sum(o.injected for o in outcomes),
        "handled": sum(o.handled for o in outcomes),
        "identical": sum(o.identical for o in outcomes),
        "leftovers": sum(bool(o.leftover_pids) for o in outcomes),
        "shm_left": sum(bool(o.shm_left) for o in outcomes),
        "faults": {k: sum(o.fault == k for o in outcomes) for k in kinds},
        "detect_s": {
            k: {
                "min": min(v),
                "median": sorted(v)[len(v) // 2],
                "max": max(v),
                "bound": _bound(k, setup),
            }
            for k, v in sorted(by_kind.items())
        },  # fmt: skip
        "heartbeat_s": setup.heartbeat_s,
        "deadline_s": setup.deadline_s,
        "startup_deadline_s": setup.startup_s,
    }


if __name__ == "__main__":
    main()
