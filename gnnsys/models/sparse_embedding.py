"""Learnable embeddings for featureless node types, held by their owners, updated sparsely.

DistDGL's ``DistEmbedding`` design: each part *owns* the embedding rows of the nodes it owns;
a trainer fetches the rows of its batch's nodes from their owners, uses them as an input leaf,
and after backward sends each owner the gradient rows of its nodes; the owner sums the
contributions and runs one sparse-optimizer step on the touched rows only. Nothing here moves
bytes between processes: the runtime (``gnnsys.train``) chooses the transport (an all-gather
over gloo, Ray calls to the owner) and calls these pieces on each side.

API (the runtime wires these)::

    EmbeddingConfig(dim=64, optimizer="sparse_adam", lr=0.01, seed=0, init_scale=1.0,
                    betas=(0.9, 0.999), eps=None)           # frozen; validated
    init_rows(config, node_type: str, lid_B: Tensor) -> Tensor [B, D] float32

    # owner side: one per (part, featureless node type)
    shard = EmbeddingShard(config, node_type=t, owned_lid=owned_lid_N, device="cpu")
    shard.rows(lid_B) -> Tensor [B, D]                        # copies, request order
    shard.apply(contributions: Mapping[int, SparseGrad] | Sequence[SparseGrad],
                *, divide_by: int = 1) -> int                 # rows touched; ONE step
    shard.to_row(lid_B) -> Tensor [B]                         # positions; raises if not owned
    shard.step -> int   shard.nbytes -> int   shard.num_rows -> int
    shard.weight_ND, shard.owned_lid, shard.optimizer        # tensors / SparseAdam | SparseAdagrad
    shard.state_dict() -> dict[str, Tensor];  shard.load_state_dict(state)

    # requester side (pure; no transport)
    leaf = embedding_leaf(rows_BD)                            # detached, requires_grad
    ... x_dict[t] = leaf; loss.backward() ...
    split_grad(lid_B, leaf.grad, owner_of) -> dict[int, SparseGrad]   # owner part -> rows
    leaf_grads(lid_B, leaf, owner_of) -> dict[int, SparseGrad]        # {} if leaf unused
    coalesce(lid_B, grad_BD) -> SparseGrad                    # duplicates summed, ids ascending

    # in-process reference of P owners (tests; single-process runs)
    group = LocalEmbeddingGroup(config, node_type=t, owner_of=owner_N, num_owners=None)
    group.rows(lid_B) -> Tensor [B, D]
    group.step(grads_by_rank: Sequence[tuple[lid_B, grad_BD]], *, divide_by=1)  # rank order
    group.table() -> Tensor [N_t, D];  group.shards: list[EmbeddingShard];  group.nbytes

Semantics, which the tests pin down:

* **Initial rows** depend only on ``(config.seed, node type, type-local id, column)``: a
  splitmix64 counter hash of those, cut to 24 bits and scaled exactly to
  ``uniform(-init_scale, init_scale)``. Any partitioning gives identical initial rows.
* **Summation order.** ``split_grad`` sums a batch's duplicate ids in input order (per rank);
  ``apply`` sums the ranks' rows for one id in ascending *rank* order (a mapping is sorted by
  rank; a sequence is taken as ranks ``0..R-1``), never in arrival order. A row's sum is
  therefore the same whichever owner holds it, and the update itself is element-wise, so one
  table and the same rows split over any number of owners stay bit-identical.
* **One call of** ``apply`` **is one optimizer step**, touched rows or not: call it on every
  owner once per training step (with an empty mapping if no rank touched its rows), so every
  owner's global SparseAdam step equals the trainer's (torch's rule; see ``sparse_optim``).
* ``divide_by``: what the trainers divide the dense gradient by (the runtime: the step's seeds
  over all ranks, its losses being summed over seeds; a rank-mean trainer: the world size).
* **Synchronous steps.** Bit-identity also needs every owner's ``apply`` of step ``t`` to
  return before any rank fetches rows for step ``t + 1`` (DistDGL lets a trainer read rows one
  update stale; we do not). ``EmbeddingShard`` is not thread-safe: the runtime serialises
  ``rows`` and ``apply`` on one shard (a lock, or the owner's one thread).
* **Checkpoints**: ``state_dict()`` is tensors only (``torch.save``/``torch.load(...,
  weights_only=True)``); ``load_state_dict`` refuses another part's ids or another width.

Index spaces: ``lid`` is a *type-local* node id (``0 .. N_t - 1``, as in the heterogeneous
store's ``owned_lid``); ``row`` is a position in one owner's table (``owned_lid[row] == lid``).
Shape legend: ``N`` rows an owner holds, ``D`` embedding dim, ``B`` ids in a request or batch,
``U`` distinct ids, ``P`` owners.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor

from gnnsys.models.sparse_optim import SPARSE_OPTIMIZERS, SparseAdagrad, SparseAdam

__all__ = [
    "EmbeddingConfig",
    "EmbeddingShard",
    "LocalEmbeddingGroup",
    "SparseGrad",
    "coalesce",
    "embedding_leaf",
    "init_rows",
    "leaf_grads",
    "split_grad",
]

_DEFAULT_EPS = {"sparse_adam": 1e-8, "sparse_adagrad": 1e-10}


@dataclass(frozen=True, kw_only=True, slots=True)
class EmbeddingConfig:
    """Learnable embeddings of featureless node types: width, init and sparse optimizer."""

    dim: int = 64
    """Embedding width ``D`` of every featureless node type."""
    optimizer: str = "sparse_adam"
    """``sparse_adam`` (torch.optim.SparseAdam's rule) or ``sparse_adagrad`` (DGL's rule)."""
    lr: float = 0.01
    """Learning rate of the sparse optimizer (separate from the model's)."""
    seed: int = 0
    """Seed of the initial rows (with the node type and id; independent of partitioning)."""
    init_scale: float = 1.0
    """Initial rows are ``uniform(-init_scale, init_scale)``."""
    betas: tuple[float, float] = (0.9, 0.999)
    """SparseAdam's ``(beta1, beta2)``; unused by SparseAdagrad."""
    eps: float | None = None
    """Denominator term; ``None`` takes the optimizer's default (1e-8 Adam, 1e-10 Adagrad)."""

    def __post_init__(self) -> None:
        if self.optimizer not in SPARSE_OPTIMIZERS:
            raise ValueError(
                f"optimizer={self.optimizer!r}; choose one of {sorted(SPARSE_OPTIMIZERS)}"
            )
        if isinstance(self.dim, bool) or not isinstance(self.dim, int) or self.dim < 1:
            raise ValueError(f"dim={self.dim!r}; choose an integer dim >= 1")
        if not (self.lr > 0 and np.isfinite(self.lr)):
            raise ValueError(f"lr={self.lr!r}; choose a finite lr > 0")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"seed={self.seed!r}; choose an integer seed in [0, 2**63)")
        if not 0 <= self.seed < 2**63:
            raise ValueError(f"seed={self.seed}; choose a seed in [0, 2**63)")
        if not (self.init_scale > 0 and np.isfinite(self.init_scale)):
            raise ValueError(f"init_scale={self.init_scale!r}; choose a finite init_scale > 0")
        if len(self.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.betas):
            raise ValueError(f"betas={self.betas!r}; choose two values in [0, 1)")
        if self.eps is not None and not (self.eps >= 0 and np.isfinite(self.eps)):
            raise ValueError(f"eps={self.eps!r}; choose a finite eps >= 0, or None")

    @property
    def resolved_eps(self) -> float:
        """``eps``, or the optimizer's default when ``eps`` is ``None``."""
        return _DEFAULT_EPS[self.optimizer] if self.eps is None else self.eps

    def build_optimizer(
        self, num_rows: int, device: torch.device | str = "cpu"
    ) -> SparseAdam | SparseAdagrad:
        """The state of this config's sparse optimizer over an ``[num_rows, dim]`` table."""
        if self.optimizer == "sparse_adam":
            return SparseAdam(
                num_rows, self.dim, lr=self.lr, betas=self.betas, eps=self.resolved_eps,
                device=device,
            )  # fmt: skip
        return SparseAdagrad(num_rows, self.dim, lr=self.lr, eps=self.resolved_eps, device=device)


# ---- seeded initial rows ---------------------------------------------------------------------
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_INIT_CHUNK = 1 << 20
"""Elements hashed at once (8 MiB per uint64 temporary); the values do not depend on it."""


def _mix(z: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """splitmix64's finaliser on uint64 arrays (wraps mod 2**64, logical shifts)."""
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    out: npt.NDArray[np.uint64] = z ^ (z >> np.uint64(31))
    return out


def _type_key(seed: int, node_type: str) -> npt.NDArray[np.uint64]:
    """A 1-element uint64 key of ``(seed, node type)``; CRC-32 is stable across processes."""
    crc = np.array([zlib.crc32(node_type.encode())], dtype=np.uint64)
    return _mix(_mix(np.array([seed], dtype=np.uint64) * _GOLDEN + crc) ^ _GOLDEN)


def init_rows(config: EmbeddingConfig, node_type: str, lid_B: Tensor) -> Tensor:
    """The initial rows of type-local ids ``lid_B``: ``[B, D]`` float32, partition-independent.

    Element ``(lid, c)`` is ``h = mix(mix(key ^ lid * G) + c * G)`` (splitmix64, ``key`` from
    ``(seed, node_type)``); its top 24 bits ``u`` give ``(u - (2**23 - 0.5)) * init_scale /
    (2**23 - 0.5)`` in float64, rounded once to float32: integers and one IEEE rounding, so the
    value is the same on every machine and for every chunking. Vectorised in chunks of
    ``_INIT_CHUNK`` elements.

    Args:
        config: Seed, width and scale.
        node_type: The node type's name (part of the key).
        lid_B: Type-local ids, any order, int64 ``>= 0``.

    Returns:
        ``[B, D]`` float32 on CPU.

    Raises:
        ValueError: ``lid_B`` is not 1-d or holds a negative id.
    """
    lid = _as_lid(lid_B, "lid_B").numpy().astype(np.uint64)
    dim = config.dim
    out = np.empty((lid.shape[0], dim), dtype=np.float32)
    key = _type_key(config.seed, node_type)
    col_G = np.arange(dim, dtype=np.uint64) * _GOLDEN
    half = float(2**23) - 0.5
    scale = config.init_scale / half
    step = max(1, _INIT_CHUNK // dim)
    for start in range(0, lid.shape[0], step):  # chunks only bound the temporaries
        row_key = _mix(key ^ (lid[start : start + step] * _GOLDEN))
        h = _mix(row_key[:, None] + col_G[None, :])
        u = (h >> np.uint64(40)).astype(np.float64)
        out[start : start + step] = ((u - half) * scale).astype(np.float32)
    return torch.from_numpy(out)


# ---- gradient records ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SparseGrad:
    """Gradient rows of one rank for one owner: distinct type-local ids, ascending."""

    lid_U: Tensor
    """``[U]`` int64 type-local ids, strictly ascending (``coalesce`` makes them so)."""
    grad_UD: Tensor
    """``[U, D]`` float32, row ``i`` the summed gradient of ``lid_U[i]``."""

    @property
    def nbytes(self) -> int:
        """Payload bytes (ids and rows), for the runtime's ledger."""
        return sum(t.numel() * t.element_size() for t in (self.lid_U, self.grad_UD))


def _as_lid(lid: Tensor, name: str) -> Tensor:
    """``lid`` as a 1-d int64 CPU-or-device tensor of non-negative ids; raises otherwise."""
    if not isinstance(lid, Tensor) or lid.dim() != 1:
        raise ValueError(f"{name} must be a 1-d id tensor, got {_describe(lid)}")
    if lid.dtype.is_floating_point or lid.dtype == torch.bool:
        raise ValueError(f"{name} has dtype {lid.dtype}; pass integer ids (int64)")
    lid = lid.to(torch.int64)
    if lid.numel() and int(lid.min()) < 0:  # int() syncs a GPU tensor to the host
        raise ValueError(f"{name} holds a negative id ({int(lid.min())}); pass type-local ids")
    return lid


def _describe(x: object) -> str:
    return f"shape {tuple(x.shape)}" if isinstance(x, Tensor) else type(x).__name__


def _check_rows(lid: Tensor, grad: Tensor, dim: int | None = None) -> None:
    if not isinstance(grad, Tensor) or grad.dim() != 2 or grad.shape[0] != lid.shape[0]:
        raise ValueError(
            f"gradient rows have {_describe(grad)}, expected [{lid.shape[0]}, D] (one per id)"
        )
    if grad.dtype != torch.float32:
        raise ValueError(f"gradient rows have dtype {grad.dtype}; pass float32 (the table's)")
    if dim is not None and grad.shape[1] != dim:
        raise ValueError(f"gradient rows have width {grad.shape[1]}; the table's dim is {dim}")


def coalesce(lid_B: Tensor, grad_BD: Tensor) -> SparseGrad:
    """Sum the rows of duplicate ids in input order; ids ascending (deterministic on any device).

    ``torch.sparse`` coalescing and ``index_add_`` on CUDA may add duplicates in any order;
    here each id's rows are added in the order they appear, one vectorised round per
    multiplicity level (a sampler's batch has distinct ids: one round, a permutation).

    Args:
        lid_B: ``[B]`` type-local ids, duplicates allowed.
        grad_BD: ``[B, D]`` float32 gradient rows, one per id.

    Returns:
        The coalesced ``SparseGrad``.

    Raises:
        ValueError: mismatched shapes, a non-float32 gradient, or bad ids.
    """
    lid_B = _as_lid(lid_B, "lid_B")
    _check_rows(lid_B, grad_BD)
    lid_U, inverse_B, count_U = torch.unique(
        lid_B, sorted=True, return_inverse=True, return_counts=True
    )
    if lid_U.numel() == lid_B.numel():  # distinct ids: a permutation, no additions
        out_UD = torch.empty_like(grad_BD)
        out_UD[inverse_B] = grad_BD
        return SparseGrad(lid_U, out_UD)
    order_B = torch.argsort(inverse_B, stable=True)  # grouped by id, input order within
    start_U = torch.cumsum(count_U, 0) - count_U
    level_B = torch.arange(lid_B.numel(), device=lid_B.device) - start_U[inverse_B[order_B]]
    out_UD = torch.zeros(
        lid_U.numel(), grad_BD.shape[1], dtype=grad_BD.dtype, device=grad_BD.device
    )
    for level in range(int(count_U.max())):  # distinct targets per level; int() syncs a GPU
        pos = order_B[level_B == level]
        target = inverse_B[pos]
        out_UD[target] = out_UD[target] + grad_BD[pos]
    return SparseGrad(lid_U, out_UD)


def split_grad(lid_B: Tensor, grad_BD: Tensor, owner_of: Tensor) -> dict[int, SparseGrad]:
    """A rank's gradient rows grouped by owner, duplicates summed first (``coalesce``).

    Args:
        lid_B: ``[B]`` type-local ids whose rows the batch used (duplicates allowed).
        grad_BD: ``[B, D]`` float32, the leaf's gradient (``leaf.grad``).
        owner_of: ``[N_t]`` integer owner part of every type-local id of the type (e.g. the
            type's slice of ``node_to_part``); indexed by ``lid_B``.

    Returns:
        ``owner part -> SparseGrad`` for the owners of at least one id, in ascending part order;
        ids ascending within each.

    Raises:
        ValueError: bad shapes, or an id beyond ``owner_of``.
    """
    sparse = coalesce(lid_B, grad_BD)
    if sparse.lid_U.numel() and int(sparse.lid_U[-1]) >= owner_of.shape[0]:
        raise ValueError(
            f"id {int(sparse.lid_U[-1])} is beyond owner_of ({owner_of.shape[0]} ids); pass the "
            "node type's owner map"
        )
    part_U = owner_of.to(sparse.lid_U.device)[sparse.lid_U].to(torch.int64)
    out: dict[int, SparseGrad] = {}
    for part in torch.unique(part_U).tolist():  # sorted
        mask = part_U == part
        out[int(part)] = SparseGrad(sparse.lid_U[mask], sparse.grad_UD[mask])
    return out


def embedding_leaf(rows_BD: Tensor) -> Tensor:
    """Fetched rows as an autograd leaf (detached copy-free view, ``requires_grad``)."""
    return rows_BD.detach().requires_grad_(True)


def leaf_grads(lid_B: Tensor, leaf_BD: Tensor, owner_of: Tensor) -> dict[int, SparseGrad]:
    """``split_grad`` of ``leaf_BD.grad``; ``{}`` when the loss did not reach the leaf."""
    if leaf_BD.grad is None:
        return {}
    return split_grad(lid_B, leaf_BD.grad, owner_of)


# ---- owner side ------------------------------------------------------------------------------
class EmbeddingShard:
    """One owner's embedding rows of one node type, with its sparse optimizer's state.

    Holds ``weight_ND`` (``[N, D]`` float32, row ``i`` is type-local id ``owned_lid[i]``) and
    the optimizer state, all allocated once at construction. ``rows`` serves fetches;
    ``apply`` runs one optimizer step from every rank's contribution.
    """

    def __init__(
        self,
        config: EmbeddingConfig,
        *,
        node_type: str,
        owned_lid: Tensor,
        device: torch.device | str = "cpu",
    ) -> None:
        """Build the initial rows (``init_rows``) and the optimizer state.

        Args:
            config: Width, init and optimizer.
            node_type: The node type's name (part of the init key).
            owned_lid: ``[N]`` type-local ids this owner holds, strictly ascending (the store's
                ``owned_lid``).
            device: Where the table and state live.

        Raises:
            ValueError: ``owned_lid`` is not 1-d, strictly ascending and non-negative.
        """
        owned = _as_lid(owned_lid, "owned_lid").to(device)
        if owned.numel() > 1 and not bool((owned[1:] > owned[:-1]).all()):
            raise ValueError("owned_lid must be strictly ascending; pass the store's owned_lid")
        self.config, self.node_type, self.owned_lid = config, node_type, owned
        self.weight_ND = init_rows(config, node_type, owned.cpu()).to(device)
        self.optimizer = config.build_optimizer(owned.numel(), device)
        self.step = 0
        """``apply`` calls so far (each is one optimizer step)."""

    @property
    def num_rows(self) -> int:
        """``N``, the rows this owner holds."""
        return int(self.owned_lid.numel())

    def to_row(self, lid_B: Tensor) -> Tensor:
        """Positions in this table of type-local ids ``lid_B`` (a binary search per id).

        Raises:
            ValueError: an id is not owned here (names the first one).
        """
        lid_B = _as_lid(lid_B, "lid").to(self.owned_lid.device)
        row_B = torch.searchsorted(self.owned_lid, lid_B)
        clipped = row_B.clamp(max=max(self.num_rows - 1, 0))
        bad = row_B >= self.num_rows
        if self.num_rows:
            bad |= self.owned_lid[clipped] != lid_B
        if bool(bad.any()):  # a host sync per call on a GPU table; the price of the check
            first = int(lid_B[bad][0])
            raise ValueError(
                f"{self.node_type!r} id {first} is not owned here ({self.num_rows} rows); send "
                "each id to its owner (split_grad groups them by owner_of)"
            )
        return row_B

    def rows(self, lid_B: Tensor) -> Tensor:
        """Copies of the rows of owned type-local ids ``lid_B``: ``[B, D]``, request order."""
        return self.weight_ND.index_select(0, self.to_row(lid_B))

    def apply(
        self,
        contributions: Mapping[int, SparseGrad] | Sequence[SparseGrad],
        *,
        divide_by: int = 1,
    ) -> int:
        """One optimizer step from every rank's gradient rows for this owner.

        Each contribution is coalesced (a no-op for ``split_grad``'s output), then the ranks'
        rows of each id are summed in ascending rank order (a mapping is sorted by rank, a
        sequence is ranks ``0..R-1``), divided by ``divide_by`` and handed to the optimizer
        for the touched rows only. Untouched rows and their state do not change.

        Args:
            contributions: ``rank -> SparseGrad`` (or a rank-ordered sequence); empty is a
                step that touches nothing (SparseAdam still counts it).
            divide_by: Divide the summed rows by this (the step's seeds over all ranks for
                summed losses, or the world size for per-rank mean losses).

        Returns:
            The number of distinct rows touched.

        Raises:
            ValueError: an id not owned here, a wrong width or dtype, or ``divide_by < 1``.
        """
        if isinstance(divide_by, bool) or not isinstance(divide_by, int) or divide_by < 1:
            raise ValueError(
                f"divide_by={divide_by!r}; pass the step's item count or world size (an int >= 1)"
            )
        row_U, grad_UD = self._sum_by_rank(_by_rank(contributions))
        if divide_by != 1:
            grad_UD = grad_UD / divide_by
        self.optimizer.update(self.weight_ND, row_U, grad_UD)
        self.step += 1
        return int(row_U.numel())

    def _sum_by_rank(self, grads: list[SparseGrad]) -> tuple[Tensor, Tensor]:
        """Distinct rows touched and their gradients summed in list (rank) order."""
        device, dim = self.weight_ND.device, self.config.dim
        parts: list[SparseGrad] = []
        for grad in grads:
            lid_U = _as_lid(grad.lid_U, "lid_U").to(device)
            _check_rows(lid_U, grad.grad_UD, dim)
            grad_UD = grad.grad_UD.to(device)
            if lid_U.numel() > 1 and not bool((lid_U[1:] > lid_U[:-1]).all()):
                parts.append(coalesce(lid_U, grad_UD))  # split_grad's output skips this sort
            else:
                parts.append(SparseGrad(lid_U, grad_UD))
        if not parts:
            empty = torch.empty(0, dtype=torch.int64, device=device)
            return empty, torch.empty(0, dim, dtype=torch.float32, device=device)
        lid_U, inverse = torch.unique(torch.cat([p.lid_U for p in parts]), return_inverse=True)
        row_U = self.to_row(lid_U)
        sum_UD = torch.zeros(lid_U.numel(), dim, dtype=torch.float32, device=device)
        offset = 0
        for part in parts:  # ids are distinct within a part: a plain indexed add, no races
            target = inverse[offset : offset + part.lid_U.numel()]
            sum_UD.index_copy_(0, target, sum_UD.index_select(0, target).add_(part.grad_UD))
            offset += part.lid_U.numel()
        return row_U, sum_UD

    @property
    def nbytes(self) -> int:
        """Bytes of the table, its ids and the optimizer state."""
        own = sum(t.numel() * t.element_size() for t in (self.weight_ND, self.owned_lid))
        return own + self.optimizer.nbytes

    def state_dict(self) -> dict[str, Tensor]:
        """Tensors for a checkpoint (shared, not copied): weight, ids, step, optimizer state."""
        state = {"weight": self.weight_ND, "owned_lid": self.owned_lid}
        state["step"] = torch.tensor(self.step, dtype=torch.int64)
        state.update({f"optim.{k}": v for k, v in self.optimizer.state_dict().items()})
        return state

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        """Restore what :meth:`state_dict` returned (same ids, width and optimizer).

        Raises:
            ValueError: the checkpoint holds other ids, another width or another optimizer.
        """
        lid = state.get("owned_lid")
        if lid is None or not torch.equal(lid.to(self.owned_lid.device), self.owned_lid):
            raise ValueError(
                f"checkpoint of {self.node_type!r} holds other ids than this owner's "
                f"{self.num_rows}; load the checkpoint written by the same part"
            )
        weight = state.get("weight")
        if weight is None or weight.shape != self.weight_ND.shape:
            raise ValueError(
                f"checkpoint weight has {_describe(weight)}, expected "
                f"{tuple(self.weight_ND.shape)}; use the same EmbeddingConfig.dim"
            )
        self.optimizer.load_state_dict(
            {k.removeprefix("optim."): v for k, v in state.items() if k.startswith("optim.")}
        )
        self.weight_ND.copy_(weight)
        self.step = int(state["step"])


def _by_rank(contributions: Mapping[int, SparseGrad] | Sequence[SparseGrad]) -> list[SparseGrad]:
    """Contributions in ascending rank order (a mapping's insertion order does not matter)."""
    if isinstance(contributions, Mapping):
        items = sorted(contributions.items())
        return [grad for _, grad in items]
    return list(contributions)


# ---- in-process reference of P owners --------------------------------------------------------
class LocalEmbeddingGroup:
    """P owners of one node type's rows in one process, with the requester-side plumbing.

    The reference the runtime's transport must match: ``rows`` gathers from the owners,
    ``step`` splits each rank's gradient by owner (``split_grad``) and calls every owner's
    ``apply`` once with the ranks' contributions in rank order.
    """

    def __init__(
        self,
        config: EmbeddingConfig,
        *,
        node_type: str,
        owner_of: Tensor,
        num_owners: int | None = None,
    ) -> None:
        """Split the ``N_t`` ids over their owners.

        Args:
            config: Width, init and optimizer.
            node_type: The node type's name.
            owner_of: ``[N_t]`` owner part of every type-local id.
            num_owners: ``P`` (default ``max(owner_of) + 1``); an owner may hold no rows.
        """
        self.owner_of = _as_lid(owner_of, "owner_of")
        top = int(self.owner_of.max()) + 1 if self.owner_of.numel() else 1
        self.num_owners = top if num_owners is None else num_owners
        if self.num_owners < top:
            raise ValueError(f"num_owners={num_owners} but owner_of names part {top - 1}")
        self.config, self.node_type = config, node_type
        self.shards = [
            EmbeddingShard(
                config, node_type=node_type, owned_lid=torch.nonzero(self.owner_of == p)[:, 0]
            )
            for p in range(self.num_owners)
        ]

    def rows(self, lid_B: Tensor) -> Tensor:
        """Rows of ``lid_B`` from their owners, ``[B, D]`` in request order."""
        lid_B = _as_lid(lid_B, "lid_B")
        out = torch.empty(lid_B.numel(), self.config.dim, dtype=torch.float32)
        part_B = self.owner_of[lid_B]
        for part, shard in enumerate(self.shards):
            mask = part_B == part
            if bool(mask.any()):
                out[mask] = shard.rows(lid_B[mask])
        return out

    def step(self, grads_by_rank: Sequence[tuple[Tensor, Tensor]], *, divide_by: int = 1) -> None:
        """One step of every owner from the ranks' ``(lid_B, grad_BD)`` (rank order)."""
        inbox: list[dict[int, SparseGrad]] = [{} for _ in self.shards]
        for rank, (lid_B, grad_BD) in enumerate(grads_by_rank):
            for part, grad in split_grad(lid_B, grad_BD, self.owner_of).items():
                inbox[part][rank] = grad
        for shard, contributions in zip(self.shards, inbox, strict=True):
            shard.apply(contributions, divide_by=divide_by)

    def table(self) -> Tensor:
        """Every row, ``[N_t, D]`` in type-local id order (assembled from the owners)."""
        return self.rows(torch.arange(self.owner_of.numel()))

    @property
    def nbytes(self) -> int:
        """Bytes over all owners."""
        return sum(shard.nbytes for shard in self.shards)
