"""The step's device: which one a rank trains on, and the copy of prepared batches onto it.

``--device cpu|cuda|auto`` (``ClusterConfig.device``) is decided once on the driver
(:func:`plan_devices`: how many GPUs each trainer asks Ray for, and whether the gradients
travel over NCCL or gloo), then each rank resolves its own ``torch.device``
(:func:`rank_device`): inside a Ray actor, the GPU Ray assigned it (``ray.get_gpu_ids()`` mapped
through ``CUDA_VISIBLE_DEVICES``, as Ray Train's ``get_device`` does; never a hard-coded
``cuda:0``); with the in-process executor, ``cuda:(rank % device_count)``, so ranks may share a
GPU.

:class:`StepDevice` is the transfer stage's one code path for every device. On a producer
thread it copies a prepared batch's tensors to the device on a side stream (pinned host
buffers, ``non_blocking`` copies) and records an event; the compute loop waits on that event
and marks each copied tensor as used by its own stream (``record_stream``) before the forward
pass reads it, so the caching allocator cannot hand the memory out while the compute still
reads it. On CPU the same calls go through ``torch.cpu``'s no-op ``Stream``/``Event`` shims
and ``Tensor.to`` returns the tensor itself: nothing is copied and the step stays bit-identical
to the synchronous one.

Checkpoints are device-independent: :func:`to_host` copies a state to CPU tensors before it is
saved, and a state is loaded into a model wherever that model lives (``load_state_dict`` copies
across devices), so a run trained on a GPU resumes on a CPU and the other way round.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "DEVICES",
    "DevicePlan",
    "StepDevice",
    "StepInputs",
    "map_tensors",
    "plan_devices",
    "rank_device",
    "to_host",
    "visible_index",
]

DEVICES = ("cpu", "cuda", "auto")
"""``--device`` choices: ``auto`` is ``cuda`` where the run sees a GPU, else ``cpu``."""


@dataclass(frozen=True, slots=True)
class DevicePlan:
    """The driver's decision for a run's trainers (decide, then execute).

    Attributes:
        kind: ``cpu`` or ``cuda`` (``auto`` resolved).
        gpus_per_trainer: GPUs each trainer actor asks Ray for (``0`` on CPU; below 1 when
            ``P`` trainers share fewer GPUs).
        backend: ``nccl`` when every trainer has a GPU of its own, else ``gloo`` (CPU, or ranks
            sharing a GPU: NCCL needs one device per rank).
    """

    kind: str
    gpus_per_trainer: float = 0.0
    backend: str = "gloo"


def plan_devices(choice: str, *, parts: int, gpus: float) -> DevicePlan:
    """Where ``parts`` trainers run, given the GPUs the run can use.

    Args:
        choice: ``cpu``, ``cuda`` or ``auto`` (``--device``).
        parts: Trainers of the run.
        gpus: GPUs the executor can hand out (Ray's ``GPU`` resource; the in-process
            executor's ``torch.cuda.device_count()``).

    Raises:
        ValueError: An unknown choice, or ``cuda`` with no GPU to use.
    """
    if choice not in DEVICES:
        raise ValueError(f"device={choice!r}; choose one of {', '.join(DEVICES)} (--device)")
    if choice == "cpu" or (choice == "auto" and gpus < 1):
        return DevicePlan("cpu")
    if gpus < 1:
        raise ValueError(
            f"--device cuda, but the run sees no GPU (torch {torch.__version__}, "
            f"{gpus:g} GPUs in the cluster); use --device cpu or auto, or a CUDA build of torch"
        )
    if gpus >= parts:
        return DevicePlan("cuda", 1.0, "nccl")
    sharing = -(-parts // int(gpus))  # trainers per GPU
    return DevicePlan("cuda", 1.0 / sharing, "gloo")


def rank_device(kind: str, rank: int) -> torch.device:
    """This rank's ``torch.device`` for a plan's ``kind``.

    Inside a Ray actor given GPUs: the first of them, as an index among the GPUs the process
    sees (Ray sets ``CUDA_VISIBLE_DEVICES``). Otherwise ``cuda:(rank % device_count)``.

    Raises:
        ValueError: ``cuda`` in a process where torch sees no GPU.
    """
    if kind == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ValueError(
            f"rank {rank} was placed on cuda but torch {torch.__version__} sees no GPU in its "
            "process; use --device cpu, or start the workers where CUDA is visible"
        )
    gpu_ids = _ray_gpu_ids()
    if gpu_ids:
        return torch.device("cuda", visible_index(gpu_ids, os.environ.get("CUDA_VISIBLE_DEVICES")))
    return torch.device("cuda", rank % torch.cuda.device_count())


def visible_index(gpu_ids: list[Any], cuda_visible: str | None) -> int:
    """The CUDA index, in this process, of the first GPU Ray assigned (``gpu_ids``).

    Ray sets ``CUDA_VISIBLE_DEVICES`` to the actor's GPUs, so the process sees them renumbered
    from 0; where it lists more (a shared GPU, or set by hand), the position of the first
    assigned id in that list is the index.
    """
    names = [v.strip() for v in (cuda_visible or "").split(",") if v.strip()]
    first = str(gpu_ids[0])
    return names.index(first) if first in names else 0


def _ray_gpu_ids() -> list[Any]:
    """GPU ids Ray assigned this actor (empty outside a Ray actor or without GPUs)."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return []
    if ray.get_runtime_context().get_actor_id() is None:
        return []
    return list(ray.get_gpu_ids())


def map_tensors(obj: Any, fn: Callable[[Tensor], Tensor]) -> Any:
    """``obj`` with ``fn`` applied to every tensor in it (tuples, lists, dicts, dataclasses).

    Dataclass records (``SampledSubgraph``, ``Block``, ``EncodedRows``, frozen or not) are
    copied shallowly with their tensor fields replaced; anything else is returned as it is.
    """
    if isinstance(obj, Tensor):
        return fn(obj)
    if isinstance(obj, tuple | list):
        return type(obj)(map_tensors(v, fn) for v in obj)
    if isinstance(obj, dict):
        return {k: map_tensors(v, fn) for k, v in obj.items()}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        new = copy.copy(obj)
        for f in dataclasses.fields(obj):
            object.__setattr__(new, f.name, map_tensors(getattr(obj, f.name), fn))
        return new
    return obj


def to_host(obj: Any) -> Any:
    """A copy of ``obj`` with every tensor a detached CPU tensor (what checkpoints keep)."""
    return map_tensors(obj, lambda t: t.detach().to("cpu", copy=True))


@dataclass(slots=True, eq=False)
class StepInputs:
    """A batch's forward pass, as data plus the function that runs over it.

    The transfer stage moves ``args`` to the step's device; the compute loop calls
    ``run(*args)`` there (``StepDevice.forward``).

    Attributes:
        args: The forward pass's inputs (tensors, blocks, records).
        run: The forward pass over ``args``.
        ready: Event recorded after ``args`` were copied (``None``: not copied yet).
    """

    args: tuple[Any, ...]
    run: Callable[..., Tensor]
    ready: Any = field(default=None)


class StepDevice:
    """Copies prepared batches to one device on a side stream; see the module docstring.

    Args:
        device: The step's device (``torch.device("cpu")``: every copy is a no-op).
    """

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.module: Any = torch.get_device_module(self.device)  # torch.cpu or torch.cuda
        # page-locked host buffers make the copies asynchronous; a CPU step has nothing to pin
        self._pin = self.device.type != "cpu"
        self._stream: Any = None  # made on first use, on the thread that copies

    def put(self, obj: Any) -> Any:
        """``obj`` on the device, synchronously (models, labels: once, not per batch)."""
        return map_tensors(obj, lambda t: t.to(self.device))

    def copy(self, inputs: StepInputs) -> StepInputs:
        """Start copying ``inputs.args`` to the device (producer thread); returns the copy.

        The copies run on a side stream; the returned record's ``ready`` event fires when they
        are done (``forward`` waits for it). Host tensors are pinned first, one extra host copy
        each: the price of a copy that does not block the producer.
        """
        stream = self._side()
        with self.module.stream(stream):
            args = map_tensors(inputs.args, self._to_device)
            ready = self.module.Event()
            ready.record(stream)
        return StepInputs(args, inputs.run, ready)

    def _side(self) -> Any:
        """The side stream (a GPU's; on CPU the current no-op stream)."""
        if self._stream is None:
            self._stream = self.module.Stream(device=self.device) if self._pin else None
        return self._stream if self._stream is not None else self.module.current_stream()

    @contextlib.contextmanager
    def producing(self) -> Iterator[None]:
        """Run the fetch stage's own device work on the side stream (a device cache's slots).

        Without it, that work would queue on the default stream behind the compute loop's
        kernels, and a blocking host-to-device copy in it would wait for them. What it makes
        is ready for the compute loop with the transfer's event (recorded after it, on the
        same stream).
        """
        with self.module.stream(self._side()):
            yield

    def _to_device(self, t: Tensor) -> Tensor:
        if t.requires_grad:  # learnable rows: the copy must stay on the autograd graph
            return t.to(self.device)
        if self._pin and t.device.type == "cpu" and not t.is_pinned():
            t = t.pin_memory()
        return t.to(self.device, non_blocking=True)

    def forward(self, inputs: StepInputs) -> Tensor:
        """Run ``inputs`` on the compute stream once their copies are done.

        ``record_stream``: the copies were allocated on the side stream; marking them as used
        by the compute stream keeps the allocator from reusing their memory while it reads
        them (a CPU tensor has no stream to record).
        """
        stream = self.module.current_stream()
        if inputs.ready is not None:
            stream.wait_event(inputs.ready)
            if self._pin:
                map_tensors(inputs.args, lambda t: _record(t, stream))
        return inputs.run(*inputs.args)

    def rng_state(self) -> Tensor | None:
        """This device's RNG state (dropout on the device draws from it); ``None`` on CPU."""
        if self.device.type == "cpu":
            return None
        state: Tensor = self.module.get_rng_state(self.device)
        return state

    def set_rng_state(self, state: Tensor | None) -> None:
        """Restore what :meth:`rng_state` returned (``None``: nothing to restore)."""
        if state is not None and self.device.type != "cpu":
            self.module.set_rng_state(state, self.device)

    def peak_bytes(self) -> int:
        """Peak memory allocated on the device so far (0 on CPU: see ``peak_rss``)."""
        if self.device.type == "cpu":
            return 0
        return int(self.module.max_memory_allocated(self.device))


def _record(t: Tensor, stream: Any) -> Tensor:
    if t.device.type != "cpu":
        t.record_stream(stream)
    return t
