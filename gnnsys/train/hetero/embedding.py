"""Learnable embeddings of featureless node types, held by the rank that owns the rows.

Rank ``p`` keeps the rows of the featureless nodes part ``p`` owns (``OwnedEmbeddings``), each
type a ``[M_t, D]`` table updated by ``torch.optim.SparseAdam`` (only rows with a gradient
change; Adam moments kept per row). A batch reads its own rows from the table and the others
from their owners (``TrainWorker.serve_embedding`` through a peer client, like any remote row,
in the type's codec), as a leaf tensor; after backward every rank sends the gradient rows of
the embeddings it does not own to every rank (one variable-length ``all_gather`` of ids and one
of rows over the gloo group), and each owner adds the contributions to its rows **in rank
order** (rank 0's first, its own at its rank), divides by ``P`` like the dense allreduce does,
and takes one sparse step. Every owner therefore applies the same sums in the same order on any
executor: the update is deterministic.

**Consistency.** A row request carries the requester's step count ``s``; the owner answers only
once it has applied ``s`` steps (``rows``). It cannot have applied more: applying step ``s``
needs every rank's ``all_gather`` of step ``s``, which the requester joins after this fetch. So
every rank reads the rows as they are after exactly ``s`` updates.

**Initialisation** depends only on ``(seed, node type, type-local id)``: rows are drawn in
chunks of 65,536 ids, each from its own generator, so a table is the same rows whichever part
owns them (1 part and ``P`` parts start alike).

Shape legend: ``M_t`` owned rows of type ``t``, ``K`` requested or updated rows, ``D`` width.
"""

from __future__ import annotations

import copy
import threading
import zlib
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor, nn

from gnnsys.cache.codecs import Codec, EncodedRows
from gnnsys.train.remote.client import get_within

__all__ = ["EmbeddingPeers", "LocalEmbeddingPeers", "OwnedEmbeddings", "RayEmbeddingPeers"]

_CHUNK = 1 << 16


def init_rows(seed: int, node_type: str, lid: np.ndarray, dim: int) -> Tensor:
    """``[K, D]`` initial rows of type-local ``lid`` (ascending): N(0, 1), per-id deterministic."""
    out = torch.empty(int(lid.shape[0]), dim)
    chunk_K = lid // _CHUNK
    type_key = zlib.crc32(node_type.encode())
    for chunk in np.unique(chunk_K):
        gen = torch.Generator().manual_seed(seed * 1_000_003 + type_key * 65_537 + int(chunk))
        block = torch.randn(_CHUNK, dim, generator=gen)
        at = np.flatnonzero(chunk_K == chunk)
        out[torch.from_numpy(at)] = block[torch.from_numpy(lid[at] - int(chunk) * _CHUNK)]
    return out


class OwnedEmbeddings:
    """This rank's rows of every featureless type, their sparse optimizer and a step count.

    Args:
        owned_lid: Featureless type -> ``[M_t]`` owned type-local ids (ascending).
        dim: ``D``.
        seed: Run seed (fixes the initial rows).
        lr: SparseAdam learning rate.
    """

    def __init__(self, owned_lid: dict[str, np.ndarray], dim: int, *, seed: int, lr: float):
        self.dim = dim
        self.tables = {
            t: nn.Parameter(init_rows(seed, t, np.asarray(lid), dim))
            for t, lid in owned_lid.items()
        }
        self.optimizers = {t: torch.optim.SparseAdam([p], lr=lr) for t, p in self.tables.items()}
        self.steps = 0
        self._cond = threading.Condition()

    def local_rows(self, node_type: str) -> np.ndarray:
        """``[M_t, D]`` float32 numpy view of the live table (read by the rank's own thread)."""
        view: np.ndarray = self.tables[node_type].detach().numpy()
        return view

    def rows(self, node_type: str, pos_K: np.ndarray, step: int, timeout_s: float) -> Tensor:
        """Rows at owned positions ``pos_K`` once ``step`` updates are applied (module doc).

        Raises:
            TimeoutError: The owner did not reach ``step`` within ``timeout_s``.
        """
        with self._cond:
            if not self._cond.wait_for(lambda: self.steps >= step, timeout=timeout_s):
                raise TimeoutError(
                    f"embedding rows of step {step} asked, owner at step {self.steps} after "
                    f"{timeout_s}s; a peer rank is stuck (raise --deadline or check its log)"
                )
            return self.tables[node_type].detach()[torch.from_numpy(pos_K)].clone()

    def apply(self, contributions: dict[str, list[tuple[Tensor, Tensor]]], world: int) -> None:
        """Add each type's contributions in list (= rank) order, ``/ world``, one sparse step.

        Args:
            contributions: Type -> per rank ``(pos_K, grad_KD)`` of owned rows.
            world: ``P`` (the dense gradients are averaged over ranks; so are these).
        """
        for node_type, parts in contributions.items():
            pos = torch.cat([p for p, _ in parts]) if parts else torch.zeros(0, dtype=torch.long)
            if not pos.numel():
                continue
            rows, inverse = torch.unique(pos, return_inverse=True)
            acc_KD = torch.zeros(int(rows.numel()), self.dim)
            start = 0
            for p, grad in parts:  # rank order: the same float sums on every executor
                acc_KD.index_add_(0, inverse[start : start + p.numel()], grad)
                start += p.numel()
            table = self.tables[node_type]
            table.grad = torch.sparse_coo_tensor(
                rows[None], acc_KD / world, tuple(table.shape), check_invariants=False
            )
            self.optimizers[node_type].step()  # type: ignore[no-untyped-call]
            table.grad = None
        with self._cond:
            self.steps += 1
            self._cond.notify_all()

    def state(self) -> dict[str, Any]:
        """Tables, optimizer states and the step count (a checkpoint's per-rank part)."""
        return {
            "tables": {t: p.detach().clone() for t, p in self.tables.items()},
            "optimizers": {t: o.state_dict() for t, o in self.optimizers.items()},
            "steps": self.steps,
        }

    def load(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state` returned."""
        for t, table in state["tables"].items():
            self.tables[t].data.copy_(table)  # in place: local_rows views stay valid
            # a copy: torch would keep the checkpoint's tensors as this optimizer's own
            self.optimizers[t].load_state_dict(copy.deepcopy(state["optimizers"][t]))
        with self._cond:
            self.steps = int(state["steps"])
            self._cond.notify_all()


class EmbeddingServer(Protocol):
    """What a peer answers (``HeteroTrainWorker`` implements it)."""

    def serve_embedding(
        self, node_type: str, lid: np.ndarray, step: int, codec: Codec
    ) -> EncodedRows:
        """Rows of owned type-local ``lid`` after ``step`` updates, encoded with ``codec``."""
        ...


class EmbeddingPeers(Protocol):
    """Sends one embedding-row request to each owning peer, answers keyed by part."""

    def rows_many(
        self, node_type: str, step: int, lid_by_part: dict[int, np.ndarray], codec: Codec
    ) -> dict[int, EncodedRows]:
        """Rows of ``lid_by_part[p]`` from peer ``p`` after ``step`` updates, every ``p``."""
        ...


class LocalEmbeddingPeers:
    """:class:`EmbeddingPeers` over in-process ranks (filled in after they are built)."""

    def __init__(self, peers: list[EmbeddingServer] | None = None) -> None:
        self.peers: list[EmbeddingServer] = peers if peers is not None else []

    def rows_many(
        self, node_type: str, step: int, lid_by_part: dict[int, np.ndarray], codec: Codec
    ) -> dict[int, EncodedRows]:
        """Each peer's ``serve_embedding``, in turn."""
        return {
            p: self.peers[p].serve_embedding(node_type, lid, step, codec)
            for p, lid in lid_by_part.items()
        }


class RayEmbeddingPeers:
    """:class:`EmbeddingPeers` over trainer actor handles, a deadline on every wait."""

    def __init__(self, peers: list[Any], deadline_s: float) -> None:
        self.peers, self.deadline_s = peers, deadline_s

    def rows_many(
        self, node_type: str, step: int, lid_by_part: dict[int, np.ndarray], codec: Codec
    ) -> dict[int, EncodedRows]:
        """One ``serve_embedding`` call per peer, all in flight together."""
        refs = {
            p: self.peers[p].serve_embedding.remote(node_type, lid, step, codec)
            for p, lid in lid_by_part.items()
        }
        return get_within(refs, self.deadline_s, "serve_embedding to ranks", "workers'")


class _EmbeddingClient:
    """The homogeneous ``OwnerClient.fetch_encoded_many`` of one type's embedding rows."""

    def __init__(
        self, peers: Callable[[], EmbeddingPeers], node_type: str, step: Callable[[], int]
    ) -> None:
        self.peers, self.node_type, self.step = peers, node_type, step

    def fetch_encoded_many(
        self, gid_by_part: dict[int, np.ndarray], codec: Codec
    ) -> dict[int, EncodedRows]:
        """Rows from their owning peers, at the requester's current step."""
        return self.peers().rows_many(self.node_type, self.step(), gid_by_part, codec)


def embedding_client(
    peers: Callable[[], EmbeddingPeers], node_type: str, step: Callable[[], int]
) -> Any:
    """The current ``peers()`` bound to ``node_type`` and the step count ``step()``.

    Presents the ``OwnerClient.fetch_encoded_many`` that ``RoutedFeatureSource`` calls; the
    peer client is looked up per call (the Ray executor hands it over after construction).
    """
    return _EmbeddingClient(peers, node_type, step)
