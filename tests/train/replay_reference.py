"""An independent reference for a one-type run: plain PyG layers replaying the run's batches.

A homogeneous store trains through the typed runtime (``RankRuntime``, ``Trainer``) as its one
node type. What that must compute is plain GraphSAGE / GCN / GAT on the sampled blocks with
Adam and the gradient of the mean loss over every rank's seeds of a step. This module records
what the runtime did that is not floating point — each rank's sampled blocks and node ids,
its seeds' labels, and the dropout masks it drew — and replays those steps through PyG's own
``SAGEConv``, ``GCNConv`` and ``GATConv`` (loaded with the run's initial weights) over the
store's whole feature matrix, with its own ``torch.optim.Adam``. Both sides are computed in the
same test run, on the same machine, so the comparison holds on any CPU; they differ only in
float summation order (the runtime sums CSR segments, PyG scatters), which the tests absorb with
a stated tolerance.

What the runtime does between the sampled ids and the logits — owners, routed fetches, the halo
cache, codecs, owner-side partial sums, fused int8 sums, gradient averaging over ranks, the
dropout stream per rank — is thereby checked against a computation that uses none of it. Halo
rows (owned by another part) pass through the run's codec here (``decode(encode(x))``, per row:
the codecs' own tests pin their math), owned rows stay float32.

Exact evaluation is held to the same reference: plain PyG layers over the whole graph with the
replayed weights of each epoch give each split's accuracy and macro-F1.
"""

from __future__ import annotations

import contextlib
import copy
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch
from sklearn.metrics import f1_score
from torch import Tensor, nn
from torch.nn import functional
from torch_geometric.nn import GATConv, GCNConv, SAGEConv

from gnnsys.cache.codecs import make_codec
from gnnsys.train.link.trainer import LinkBatch
from gnnsys.train.trainer import Trainer
from gnnsys.types import ONE_RELATION, ONE_TYPE, Block

_ORIGINAL_DROPOUT = functional.dropout


@dataclass
class StepRecord:
    """What one rank's step consumed that is not floating point (plus its loss, to compare)."""

    rank: int
    num_items: int
    n_id: Tensor | None = None
    blocks: list[Block] = field(default_factory=list)
    y_B: Tensor | None = None
    masks: list[Tensor] = field(default_factory=list)
    pairs: LinkBatch | None = None
    loss: float = 0.0
    grads: dict[str, Tensor] = field(default_factory=dict)
    """The step's gradient after the all-reduce (the mean over every rank's items)."""


class Recording:
    """The steps of every rank, in order, and each rank's weights before its first step."""

    def __init__(self) -> None:
        self.steps: dict[int, list[StepRecord]] = {}
        self.initial: dict[int, dict[str, Tensor]] = {}
        self._local = threading.local()
        self._lock = threading.Lock()
        self._replay: list[Tensor] | None = None

    def dropout(
        self, x: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False
    ) -> Tensor:
        """Dropout with a recorded (or, replaying, a recorded-then-reused) keep mask."""
        if not training or p == 0.0:
            return x
        if self._replay is not None:
            keep = self._replay.pop(0)
        else:
            rec = getattr(self._local, "rec", None)
            if rec is None:
                return _ORIGINAL_DROPOUT(x, p, training, inplace)
            keep = torch.rand_like(x) >= p  # the rank's own RNG stream (the runtime's rng_lock)
            rec.masks.append(keep)
        return x * keep.to(x.dtype) / (1.0 - p)

    @contextlib.contextmanager
    def replaying(self, masks: list[Tensor]) -> Iterator[None]:
        """Dropout calls take ``masks`` in order (all of them, checked on exit)."""
        self._replay = list(masks)
        try:
            yield
            assert not self._replay, f"{len(self._replay)} recorded dropout masks left unused"
        finally:
            self._replay = None


@contextlib.contextmanager
def recording(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recording]:
    """Patch ``Trainer._step`` and ``functional.dropout`` to record a run (see the module)."""
    out = Recording()
    step = Trainer._step

    def recorded_step(self: Trainer, batch: Any, clock: Any) -> tuple[float, int]:
        with out._lock:
            if self.rank not in out.initial:
                out.initial[self.rank] = copy.deepcopy(self.model.state_dict())
        rec = StepRecord(rank=self.rank, num_items=int(batch.pos_B.numel()))
        if batch.sub is not None:
            sub = batch.sub
            rec.n_id = sub.n_id[ONE_TYPE].clone()
            rec.blocks = [layer[ONE_RELATION] for layer in sub.blocks]
            if isinstance(batch.extra, LinkBatch):
                rec.pairs = batch.extra
            else:
                rec.y_B = self.train_y[batch.pos_B].clone()
        out._local.rec = rec
        try:
            result = step(self, batch, clock)
        finally:
            out._local.rec = None
        rec.loss = result[0]
        with out._lock:
            out.steps.setdefault(self.rank, []).append(rec)
        return result

    sync = Trainer._sync_grads

    def recorded_sync(self: Trainer, weight: float) -> None:
        sync(self, weight)
        rec = getattr(out._local, "rec", None)
        if rec is not None:
            rec.grads = {  # under the checkpoint's names (the one relation's module dropped)
                re.sub(r"convs\.<[^>]*>\.", "", n): p.grad.detach().clone()
                for n, p in self.model.named_parameters()
                if p.grad is not None
            }

    monkeypatch.setattr(Trainer, "_step", recorded_step)
    monkeypatch.setattr(Trainer, "_sync_grads", recorded_sync)
    monkeypatch.setattr(functional, "dropout", out.dropout)
    yield out


@dataclass(frozen=True)
class WholeGraph:
    """The store's graph, read back whole: features, labels, splits, in-edges, owners."""

    x: Tensor
    y: np.ndarray
    masks: dict[str, np.ndarray]
    indptr: np.ndarray
    indices: np.ndarray
    part_N: np.ndarray

    @classmethod
    def of_store(cls, store: Any) -> WholeGraph:
        from gnnsys.store import assemble_hetero, load_books

        graph = assemble_hetero(store)
        nodes = graph.nodes[ONE_TYPE]
        rel = graph.relations[ONE_RELATION]
        books = load_books(store)
        book = books.get(ONE_TYPE, books.get(None))  # type: ignore[call-overload]
        assert nodes.x is not None and nodes.y is not None
        return cls(
            x=torch.from_numpy(np.asarray(nodes.x, dtype=np.float32)),
            y=np.asarray(nodes.y, dtype=np.int64),
            masks={
                s: np.asarray(getattr(nodes, f"{s}_mask"), dtype=bool)
                for s in ("train", "val", "test")
            },
            indptr=np.asarray(rel.indptr, dtype=np.int64),
            indices=np.asarray(rel.indices, dtype=np.int64),
            part_N=np.asarray(book.part_N),
        )

    @property
    def in_degree(self) -> Tensor:
        return torch.from_numpy(np.diff(self.indptr))


def pyg_layers(model: str, state: dict[str, Tensor], dropout: float) -> nn.ModuleList:
    """PyG's own convolutions with the run's weights (the checkpoint's SAGE/GCN/GAT names)."""
    heads = _heads(state)
    num_layers = 1 + max(int(k.split(".")[1]) for k in state)
    convs = nn.ModuleList()
    for i in range(num_layers):
        last = i == num_layers - 1
        if model == "sage":
            w = state[f"layers.{i}.lin_l.weight"]
            conv: nn.Module = SAGEConv(w.shape[1], w.shape[0])
        elif model == "gcn":
            w = state[f"layers.{i}.lin.weight"]
            conv = GCNConv(w.shape[1], w.shape[0], normalize=False, add_self_loops=False)
        else:
            w = state[f"layers.{i}.lin.weight"]
            k = 1 if last else heads
            conv = GATConv(
                w.shape[1], w.shape[0] // k, heads=k, concat=not last, dropout=dropout,
                add_self_loops=False,
            )  # fmt: skip
        convs.append(conv)
    load(convs, state)
    return convs


def load(convs: nn.ModuleList, state: dict[str, Tensor]) -> None:
    """Copy the checkpoint-named ``state`` into the PyG convolutions (every tensor used)."""
    own = {f"layers.{k}": v for k, v in convs.state_dict().items()}
    assert set(own) == set(state), (sorted(own), sorted(state))
    convs.load_state_dict({k.removeprefix("layers."): v.clone() for k, v in state.items()})


def to_state(convs: nn.ModuleList) -> dict[str, Tensor]:
    return {f"layers.{k}": v.detach().clone() for k, v in convs.state_dict().items()}


def _edges(rowptr: Tensor, col: Tensor, num_dst: int) -> tuple[Tensor, Tensor]:
    dst = torch.repeat_interleave(torch.arange(num_dst), rowptr.diff())
    return col.long(), dst


def layer_forward(
    model: str, conv: nn.Module, x: Tensor, src: Tensor, dst: Tensor, num_dst: int, deg_N: Tensor
) -> Tensor:
    """One PyG layer from ``x [N, F]`` over edges ``src -> dst`` to ``[num_dst, H]``."""
    n = int(x.shape[0])
    if model == "sage":
        return conv((x, x[:num_dst]), torch.stack([src, dst]), size=(n, num_dst))  # type: ignore[no-any-return]
    loops = torch.arange(num_dst)
    edge_index = torch.stack([torch.cat([src, loops]), torch.cat([dst, loops])])
    if model == "gcn":  # whole-graph in-degrees: s_j t_i per edge, 1 / (deg_i + 1) per self loop
        s = (deg_N.double() + 1.0).rsqrt()
        weight = torch.cat([s[src] * s[dst], s[loops] ** 2]).float()
        return conv(x, edge_index, weight)[:num_dst]  # type: ignore[no-any-return]
    return conv((x, x[:num_dst]), edge_index, size=(n, num_dst))  # type: ignore[no-any-return]


def stack_forward(
    model: str,
    convs: nn.ModuleList,
    x: Tensor,
    layers: list[tuple[Tensor, Tensor, int, Tensor]],
    dropout: float,
    training: bool,
) -> Tensor:
    """PyG's layers in order, ReLU and dropout between them (``layers``: src, dst, M, degrees)."""
    for i, (conv, (src, dst, num_dst, deg_N)) in enumerate(zip(convs, layers, strict=True)):
        conv.train(training)
        x = layer_forward(model, conv, x, src, dst, num_dst, deg_N)
        if i < len(convs) - 1:
            x = functional.dropout(x.relu(), dropout, training)
    return x


@dataclass
class Replay:
    """The reference's results: per-rank step losses, each step's gradient, epochs' weights."""

    losses: dict[int, list[float]]
    grads: list[dict[str, Tensor]]
    epoch_states: list[dict[str, Tensor]]


def replay(
    rec: Recording,
    graph: WholeGraph,
    *,
    model: str,
    epochs: int,
    lr: float,
    weight_decay: float,
    dropout: float,
    codec: str,
    partitioned: bool,
) -> Replay:
    """Train PyG's layers on the recorded batches, step for step, from the run's first weights.

    Node steps: cross-entropy summed over the rank's seeds. Link steps (an ``encoder.``-named
    checkpoint with the dot decoder): binary cross-entropy of each positive and its
    negatives, summed and divided by ``1 + q``. Either way the step's gradient is the sum over
    ranks divided by the step's items over all ranks, and Adam takes it.
    """
    ranks = sorted(rec.steps)
    first = rec.initial[ranks[0]]
    for r in ranks:  # every rank starts from the same weights
        for name, t in rec.initial[r].items():
            assert torch.equal(t, first[name]), name
    prefix = "encoder." if any(k.startswith("encoder.") for k in first) else ""
    assert all(k.startswith(prefix + "layers.") for k in first), sorted(first)  # dot decoder
    convs = pyg_layers(model, {k.removeprefix(prefix): v for k, v in first.items()}, dropout)
    params = [p for p in convs.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    num_steps = {len(rec.steps[r]) for r in ranks}
    assert len(num_steps) == 1, f"ranks ran unequal step counts: {num_steps}"
    total = num_steps.pop()
    assert total % epochs == 0, (total, epochs)
    lossy = make_codec(codec) if partitioned and codec not in ("fp32", "none") else None
    deg = graph.in_degree
    losses: dict[int, list[float]] = {r: [] for r in ranks}
    states, grads = [], []
    for s in range(total):
        optimizer.zero_grad(set_to_none=False)
        items = 0
        for r in ranks:
            step = rec.steps[r][s]
            items += step.num_items
            if step.n_id is None:
                losses[r].append(0.0)
                continue
            x = graph.x[step.n_id[: step.blocks[0].num_src]]
            if lossy is not None:  # rows another part owns arrive through the codec
                halo = torch.from_numpy(graph.part_N[step.n_id[: x.shape[0]].numpy()] != r)
                x = x.clone()
                x[halo] = lossy.decode(lossy.encode(x[halo]))
            layers = []
            for i, b in enumerate(step.blocks):
                if i:
                    assert b.num_src == step.blocks[i - 1].num_dst
                src, dst = _edges(b.rowptr, b.col, b.num_dst)
                layers.append((src, dst, b.num_dst, deg[step.n_id[: b.num_src]]))
            with rec.replaying(step.masks):
                out = stack_forward(model, convs, x, layers, dropout, True)
            loss = _step_loss(out, step)
            loss.backward()
            losses[r].append(float(loss.detach()))
        for p in params:  # the gradient of the mean over every rank's items of the step
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            elif items:
                p.grad /= items
        grads.append({f"{prefix}layers.{n}": p.grad.clone() for n, p in convs.named_parameters()})
        optimizer.step()
        if (s + 1) % (total // epochs) == 0:
            states.append({prefix + k: v for k, v in to_state(convs).items()})
    return Replay(losses, grads, states)


def _step_loss(out: Tensor, step: StepRecord) -> Tensor:
    """The step's summed loss from the last layer's outputs (its seeds first)."""
    if step.pairs is None:
        assert step.y_B is not None
        return functional.cross_entropy(out[: step.y_B.numel()], step.y_B, reduction="sum")
    p = step.pairs
    h = out[: p.seeds[ONE_TYPE].numel()]
    h_src = h[p.src_B]
    pos = (h_src * h[p.dst_B]).sum(-1)
    neg = (h_src.unsqueeze(1) * h[p.neg_Bq]).sum(-1)
    logits = torch.cat([pos, neg.reshape(-1)])
    labels = torch.cat([torch.ones_like(pos), torch.zeros_like(neg.reshape(-1))])
    bce = functional.binary_cross_entropy_with_logits(logits, labels, reduction="sum")
    return bce / (1 + neg.shape[1])


def whole_graph_logits(model: str, state: dict[str, Tensor], graph: WholeGraph) -> Tensor:
    """Every node's logits from PyG's layers over the whole graph (evaluation mode)."""
    prefix = "encoder." if any(k.startswith("encoder.") for k in state) else ""
    convs = pyg_layers(model, {k.removeprefix(prefix): v for k, v in state.items()}, 0.0)
    n = int(graph.x.shape[0])
    src, dst = _edges(
        torch.from_numpy(graph.indptr), torch.from_numpy(graph.indices), n
    )  # fmt: skip
    layers = [(src, dst, n, graph.in_degree)] * len(convs)
    with torch.no_grad():
        return stack_forward(model, convs, graph.x, layers, 0.0, False)


def _heads(state: dict[str, Tensor]) -> int:
    att = state.get("layers.0.att_src")
    return 1 if att is None else int(att.shape[1])


def split_metrics(logits: Tensor, graph: WholeGraph, near: float = 1e-4) -> dict[str, Any]:
    """Per split: accuracy, macro-F1 and how many nodes' top two logits lie within ``near``.

    A near-tie's prediction can go either way under another summation order; the tests allow
    one differing prediction per near-tie and no other.
    """
    top2 = logits.topk(2, dim=1).values
    tie = (top2[:, 0] - top2[:, 1]).abs().numpy() < near
    pred = logits.argmax(1).numpy()
    out: dict[str, Any] = {}
    for split, mask in graph.masks.items():
        y, p = graph.y[mask], pred[mask]
        out[split] = {
            "n": int(mask.sum()),
            "correct": int((y == p).sum()),
            "ties": int(tie[mask].sum()),
            "f1": float(f1_score(y, p, average="macro", zero_division=0)),
        }
    return out


def link_metrics(
    h: Tensor, pos_2K: np.ndarray, neg_KQ: np.ndarray, near: float = 1e-4
) -> dict[str, float]:
    """MRR and Hits@K (OGB's: a tie counts half) of held-out links under the dot decoder.

    Also ``ties``: links with a negative scoring within ``near`` of the positive, whose rank
    another summation order may move (by at most one place each).
    """
    src = torch.from_numpy(pos_2K[0])
    pos = (h[src] * h[torch.from_numpy(pos_2K[1])]).sum(-1, keepdim=True).double()
    neg = (h[src].unsqueeze(1) * h[torch.from_numpy(neg_KQ)]).sum(-1).double()
    rank = 1.0 + 0.5 * ((neg > pos).sum(1) + (neg >= pos).sum(1)).double()
    out = {"mrr": float((1.0 / rank).mean()), "ties": int(((neg - pos).abs() < near).any(1).sum())}
    for k in (20, 50, 100):
        out[f"hits@{k}"] = float((rank <= k).double().mean())
    return out
