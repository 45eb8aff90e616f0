"""Learnable embeddings of featureless node types, held by the rank that owns the rows.

Rank ``p`` keeps, per featureless type, the rows of the nodes part ``p`` owns: one
``gnnsys.models.sparse_embedding.EmbeddingShard`` (initial rows a function of ``(seed, type, id)``
only, so any part count starts alike; SparseAdam or SparseAdagrad on the touched rows). A batch
reads its own rows from the table and the others from their owners (``serve_embedding``
through the run's ``PeerClient``, like any remote row, in the type's codec), as a leaf tensor;
after backward every rank sends the gradient rows of the embeddings it does not own to every
rank (one variable-length ``all_gather`` of ids and one of rows over the gloo group), and each
owner calls ``EmbeddingShard.apply`` once with every rank's contribution **in rank order** (its
own at its rank), divided by the step's seeds over all ranks as the dense allreduce does (the
losses are summed over seeds). Every owner therefore applies the same sums in the same order on
any executor: the update is deterministic.

**Consistency.** A row request carries the requester's step count ``s``; the owner answers only
once it has applied ``s`` steps (:meth:`OwnedEmbeddings.rows`). It cannot have applied more:
applying step ``s`` needs every rank's ``all_gather`` of step ``s``, which the requester joins
after this fetch. So every rank reads the rows as they are after exactly ``s`` updates (the
synchronous rule ``EmbeddingShard`` asks for). ``rows`` and ``apply`` hold one lock, since a
shard is not thread-safe and peers call ``rows`` from other threads.

Shape legend: ``M_t`` owned rows of type ``t``, ``K`` requested or updated rows, ``D`` width.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor

from gnnsys.cache.codecs import Codec, EncodedRows
from gnnsys.models.sparse_embedding import EmbeddingConfig, EmbeddingShard, SparseGrad
from gnnsys.train.remote.peers import PeerClient

__all__ = ["OwnedEmbeddings", "assembled", "embedding_client", "reshard"]


class OwnedEmbeddings:
    """This rank's ``EmbeddingShard`` of every featureless type, and the step count.

    Args:
        owned_lid: Featureless type -> ``[M_t]`` owned type-local ids (ascending).
        config: Width, initial rows and sparse optimizer.
    """

    def __init__(self, owned_lid: dict[str, np.ndarray], config: EmbeddingConfig) -> None:
        self.dim = config.dim
        self.shards = {
            t: EmbeddingShard(
                config, node_type=t, owned_lid=torch.from_numpy(np.asarray(lid, dtype=np.int64))
            )
            for t, lid in owned_lid.items()
        }
        self.steps = 0
        self._cond = threading.Condition()

    @property
    def types(self) -> list[str]:
        """The featureless types, in a fixed order (the gradient exchange's)."""
        return list(self.shards)

    def local_rows(self, node_type: str) -> np.ndarray:
        """``[M_t, D]`` float32 numpy view of the live table (``apply``/``load`` are in place)."""
        view: np.ndarray = self.shards[node_type].weight_ND.numpy()
        return view

    def rows(self, node_type: str, lid_K: np.ndarray, step: int, timeout_s: float) -> Tensor:
        """Rows of owned type-local ``lid_K`` once ``step`` updates are applied (module doc).

        Raises:
            TimeoutError: The owner did not reach ``step`` within ``timeout_s``.
        """
        with self._cond:
            if not self._cond.wait_for(lambda: self.steps >= step, timeout=timeout_s):
                raise TimeoutError(
                    f"embedding rows of step {step} asked, owner at step {self.steps} after "
                    f"{timeout_s}s; a peer rank is stuck (raise --deadline or check its log)"
                )
            return self.shards[node_type].rows(torch.from_numpy(np.asarray(lid_K, np.int64)))

    def apply(self, contributions: dict[str, list[SparseGrad]], divide_by: int) -> None:
        """One step of every type's shard from the ranks' contributions (rank order).

        ``divide_by``: the step's seeds over all ranks (the contributions are gradients of
        summed losses), so the rows take the same mean as the dense allreduce.
        """
        with self._cond:
            for node_type, shard in self.shards.items():
                shard.apply(contributions.get(node_type, []), divide_by=divide_by)
            self.steps += 1
            self._cond.notify_all()

    def state(self) -> dict[str, Any]:
        """Every shard's tensors and the step count (a checkpoint's per-rank part).

        The live tensors, not copies: the coordinator writes the checkpoint before the next
        step, and reloads checkpoints from disk; copying the tables and moments (3 x 302 MB for
        590 k authors at width 128) each epoch grew the peak RSS by as much.
        """
        with self._cond:
            return {
                "shards": {t: s.state_dict() for t, s in self.shards.items()},
                "steps": self.steps,
            }

    def load(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state` returned (copied into the live tables)."""
        with self._cond:
            for t, shard_state in state["shards"].items():
                self.shards[t].load_state_dict(shard_state)
            self.steps = int(state["steps"])
            self._cond.notify_all()


class _EmbeddingClient:
    """The ``OwnerClient.fetch_encoded_many`` of embedding rows, answered by their ranks."""

    def __init__(self, peers: Callable[[], PeerClient], step: Callable[[], int]) -> None:
        self.peers, self.step = peers, step

    def fetch_encoded_many(
        self, gid_by_part: dict[int, np.ndarray], codec: Codec, node_type: str | None = None
    ) -> dict[int, EncodedRows]:
        """Rows of ``node_type`` from their owning peers, at the requester's current step."""
        if node_type is None:
            raise ValueError("embedding rows are asked per node type; name it")
        return self.peers().embedding_many(node_type, self.step(), gid_by_part, codec)


def embedding_client(peers: Callable[[], PeerClient], step: Callable[[], int]) -> Any:
    """An owner client whose owners are the ranks holding the embedding rows.

    Presents the ``OwnerClient.fetch_encoded_many`` that ``RoutedFeatureSource`` calls (with the
    row source's node type), at the step count ``step()``; the peer client ``peers()`` is looked
    up per call (the Ray executor hands it over after construction).
    """
    return _EmbeddingClient(peers, step)


def assembled(
    states: list[dict[str, Any]],
) -> dict[str, tuple[dict[str, Tensor], dict[str, Tensor]]]:
    """Every rank's checkpoint share of the embedding state, put back in id order.

    Per featureless type ``(rows, scalars)``: the learned rows (``weight``) and every per-row
    optimizer tensor as one ``[N_t, ...]`` table each, and the scalars (step counts). Each
    rank holds the rows of the nodes it owns (``owned_lid``); together they cover every node
    of the type once.

    Args:
        states: ``Checkpoint.rng_by_rank`` of a typed run (those with ``"owned"``).

    Raises:
        ValueError: The ranks' ids do not cover ``0 .. N_t - 1`` exactly once.
    """
    owned = [s["owned"] for s in states if "owned" in s]
    out: dict[str, tuple[dict[str, Tensor], dict[str, Tensor]]] = {}
    for node_type in owned[0]["shards"] if owned else ():
        shares = [o["shards"][node_type] for o in owned]
        lid = torch.cat([sh["owned_lid"] for sh in shares]).long()
        if not torch.equal(torch.sort(lid).values, torch.arange(lid.numel())):
            raise ValueError(f"the checkpoint's {node_type!r} rows do not cover 0..N-1 once")
        rows, scalars = {}, {}
        for key, first in shares[0].items():
            if key == "owned_lid":
                continue
            if first.dim() >= 1 and first.shape[0] == shares[0]["owned_lid"].numel():
                table = first.new_empty((lid.numel(), *first.shape[1:]))
                table[lid] = torch.cat([sh[key] for sh in shares])
                rows[key] = table
            else:
                scalars[key] = first
        out[node_type] = (rows, scalars)
    return out


def reshard(
    states: list[dict[str, Any]], owned_by_rank: list[dict[str, np.ndarray]]
) -> list[dict[str, Any]]:
    """Every rank's checkpoint share of the embedding rows, moved onto another partition.

    The shares are put back in id order (:func:`assembled`), and each new rank takes the rows
    (and per-row optimizer tensors) of the ids it owns; scalars (step counts) are kept. The
    torch RNG state of new rank ``r`` is old rank ``r mod P_old``'s.

    Args:
        states: ``Checkpoint.rng_by_rank`` of a typed run (each with ``"owned"``).
        owned_by_rank: Per new rank, featureless type -> its owned type-local ids, ascending.

    Raises:
        ValueError: The old ranks' ids do not cover ``0 .. N_t - 1`` exactly once.
    """
    full = assembled(states)
    steps = states[0]["owned"]["steps"]
    out = []
    for rank, owned in enumerate(owned_by_rank):
        shards = {}
        for node_type, ids in owned.items():
            index = torch.from_numpy(np.asarray(ids, dtype=np.int64))
            tables, scalars = full[node_type]
            rows = {key: table[index].clone() for key, table in tables.items()}
            shards[node_type] = {"owned_lid": index, **rows, **scalars}
        base = {k: v for k, v in states[rank % len(states)].items() if k != "owned"}
        out.append({**base, "owned": {"shards": shards, "steps": steps}})
    return out
