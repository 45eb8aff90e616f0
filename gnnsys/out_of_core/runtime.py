"""What every out-of-core step shares: the memory plan, and Ray Data task maps under it.

``Plan.of(budget, N, cpus)`` splits a memory budget between Ray's object store, the driver's
O(N) arrays and the tasks (how many run at once, how much each may hold). ``run_tasks`` runs
a function over a list of small work records as a Ray Data pipeline under that plan and
streams back the tasks' small result records; a ``GnnsysError`` a task raises (a bad row
group, a full disk) comes back as itself. ``start_ray`` joins a cluster or starts a private,
loopback-only instance whose object store follows the budget.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from gnnsys.errors import GnnsysError

__all__ = [
    "Plan",
    "cluster_cpus",
    "parse_bytes",
    "plan_dict",
    "run_tasks",
    "start_ray",
    "stop_ray",
]

log = logging.getLogger(__name__)

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_bytes(text: str) -> int:
    """``"4G"``, ``"512M"``, ``"1.5g"``, ``"1000000"`` -> bytes (binary units, optional ``iB``).

    Raises:
        ValueError: Not a positive size, naming the text and the expected form.
    """
    raw = text.strip().lower().removesuffix("ib").removesuffix("b")
    unit = raw[-1:] if raw[-1:] in _UNITS and raw[-1:].isalpha() else ""
    number = raw[: len(raw) - len(unit)]
    try:
        value = float(number) * _UNITS[unit]
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"size {text!r}: write a positive size such as 4G, 512M or 1.5G")
    return int(value)


@dataclass(frozen=True, slots=True)
class Plan:
    """How a memory budget is spent by :func:`build_disk_graph`.

    Attributes:
        budget: The whole job's bytes.
        object_store: Ray's object store (started here when Ray is not running yet).
        driver: The driver's O(N) arrays (``indptr``, the id-coverage check, labels, masks).
        concurrency: Tasks run at once.
        task_bytes: What one task may hold.
        sort_edges: Edges one sort task takes (it holds about 3 int64 arrays of them).
    """

    budget: int
    object_store: int
    driver: int
    concurrency: int
    task_bytes: int
    sort_edges: int

    @classmethod
    def of(cls, budget: int, num_nodes: int, cpus: int) -> Plan:
        """Split ``budget`` for a graph of ``num_nodes`` on ``cpus`` logical CPUs.

        Raises:
            ValueError: The budget cannot hold the driver's O(N) arrays plus one task.
        """
        object_store = max(budget // 8, 64 << 20)
        driver = 40 * num_nodes + (64 << 20)
        left = budget - object_store - driver
        task_min = 64 << 20
        if left < task_min:
            need = object_store + driver + task_min
            raise ValueError(
                f"--memory-budget {budget / 2**30:.2f} GiB is too small for {num_nodes:,} nodes: "
                f"the driver's per-node arrays and one task need ~{need / 2**30:.2f} GiB; raise it"
            )
        concurrency = max(1, min(cpus, left // (256 << 20)))
        task_bytes = left // concurrency
        return cls(budget, object_store, driver, concurrency, task_bytes, max(task_bytes // 32, 1))

    def concurrent(self, task_bytes: int | None, num_tasks: int) -> int:
        """Tasks to run at once when each holds ``task_bytes`` (``None``: the plan's share)."""
        fits = self.concurrency
        if task_bytes is not None and task_bytes > self.task_bytes:
            fits = max(1, self.concurrency * self.task_bytes // task_bytes)
        return max(1, min(fits, num_tasks))


def run_tasks(
    fn: Callable[..., dict[str, Any]],
    items: list[dict[str, Any]],
    kwargs: dict[str, Any],
    plan: Plan,
    desc: str,
    progress: bool,
    on_result: Callable[[dict[str, Any]], None] | None = None,
    task_bytes: int | None = None,
) -> list[dict[str, Any]]:
    """Run ``fn(item, **kwargs)`` over ``items`` as a Ray Data pipeline; the result records.

    ``fn`` must be a module-level function (the tasks import it); ``on_result`` is called in
    this process with each record as it arrives. ``task_bytes``, when a task needs more than
    the plan's share, lowers how many run at once (never below one).

    A task's ``GnnsysError`` (a bad row group) is raised here as itself, not as Ray's wrapper.
    """
    import ray.data
    from tqdm import tqdm

    if not items:
        return []
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False  # one tqdm bar per step instead of Ray Data's own
    ctx.enable_auto_log_stats = False
    ctx.print_on_execution_start = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    ctx.execution_options.resource_limits = ctx.execution_options.resource_limits.copy(
        object_store_memory=plan.object_store // 2
    )
    ds = ray.data.from_items(items, override_num_blocks=len(items)).map(
        _call,  # type: ignore[arg-type]  # fn_args supplies the two extra parameters
        fn_args=(fn, kwargs),
        compute=ray.data.TaskPoolStrategy(size=plan.concurrent(task_bytes, len(items))),
        num_cpus=1,
    )
    out: list[dict[str, Any]] = []
    try:
        with tqdm(total=len(items), desc=desc, unit="task", disable=not progress) as bar:
            for row in ds.iter_rows():
                out.append(dict(row))
                bar.update(1)
                if on_result is not None:
                    on_result(out[-1])
    except Exception as err:  # noqa: BLE001 - unwrapped below, re-raised otherwise
        cause = _gnnsys_cause(err)
        if cause is not None:
            raise cause from None
        raise
    return out


def _call(
    item: dict[str, Any], fn: Callable[..., dict[str, Any]], kwargs: dict[str, Any]
) -> dict[str, Any]:
    """Run one task, then hand its freed heap back to the OS.

    A Ray worker runs many tasks; Arrow's memory pool (mimalloc) and glibc keep the pages of
    freed buffers resident, which the next task, or the next step's tasks, would add to
    (measured: 6 row groups read at 2**22 nodes left 210 MiB more anonymous memory; releasing
    both pools gave back 155 MiB of it).
    """
    import pyarrow as pa

    from gnnsys.train.eval.evaluate import release_free_memory

    try:
        return fn(item, **kwargs)
    finally:
        pa.default_memory_pool().release_unused()
        release_free_memory()


def _gnnsys_cause(err: BaseException) -> GnnsysError | None:
    """The ``GnnsysError`` a Ray task raised, found through Ray's wrappers, or ``None``."""
    seen: set[int] = set()
    stack: list[BaseException | None] = [err]
    while stack:
        cur = stack.pop()
        if cur is None or id(cur) in seen:
            continue
        seen.add(id(cur))
        if isinstance(cur, GnnsysError):
            return cur
        stack += [cur.__cause__, cur.__context__, getattr(cur, "cause", None)]
    return None


# ---- Ray -----------------------------------------------------------------------------------------


def start_ray(memory_budget: int, address: str | None = None) -> bool:
    """Join ``address``, or start a private Ray whose object store is an eighth of the budget.

    Returns whether this call connected (the caller then calls ``ray.shutdown``); ``False``
    when Ray was already initialised in this process.
    """
    import ray

    if ray.is_initialized():
        return False
    from gnnsys.train.control.cluster import connect
    from gnnsys.train.control.cluster_config import ClusterConfig

    cluster = ClusterConfig(parts=os.cpu_count() or 1, address=address)
    return connect(cluster, object_store_memory=max(memory_budget // 8, 64 << 20))


def stop_ray() -> None:
    """``ray.shutdown`` (for callers that got ``True`` from :func:`start_ray`)."""
    import ray

    ray.shutdown()


def cluster_cpus() -> int:
    """Logical CPUs of the Ray cluster this process is connected to."""
    import ray

    resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
    return int(resources.get("CPU", 1))


def plan_dict(plan: Plan) -> dict[str, Any]:
    """The plan as a JSON-ready dict (for summaries)."""
    return asdict(plan)
