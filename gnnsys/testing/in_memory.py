"""A homogeneous graph's trainer in one process, from a ``Graph`` in memory (no store, no Ray).

The runtime's ``Trainer`` over the graph's one node type, built as ``RankRuntime`` builds it from
a store: the typed sampler over the whole CSR (``ONE_RELATION``), a row source over the whole
feature matrix and a typed model whose checkpoint names are the homogeneous model's (``SAGE``'s,
``GCN``'s). Tests and the accuracy-parity benchmark use it as the single-process reference.
"""

from __future__ import annotations

import time
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor, nn

from gnnsys.models import LinkModel, build_decoder
from gnnsys.models.relational import RelationalGCN, RelationalSAGE
from gnnsys.sampler import CSRNeighborSource
from gnnsys.sampler.neighbor import RelationalSampler
from gnnsys.train.inputs import BoundSampler, PerTypeInputs
from gnnsys.train.link.config import LinkConfig
from gnnsys.train.link.trainer import LinkTrainer
from gnnsys.train.trainer import Trainer
from gnnsys.types import ONE_RELATION, ONE_TYPE, Graph

__all__ = [
    "Rows",
    "one_type_inputs",
    "one_type_link_trainer",
    "one_type_model",
    "one_type_sampler",
    "one_type_trainer",
]


class Rows:
    """Whole-matrix rows in place of a routed feature source, optionally answering slowly."""

    def __init__(self, x: np.ndarray | Tensor, delay_s: float = 0.0) -> None:
        self.x = torch.as_tensor(np.asarray(x, dtype=np.float32))
        self.delay_s = delay_s

    def fetch_distinct(self, lid: Tensor) -> Tensor:
        """Rows ``lid`` (after ``delay_s``, like a loaded owner)."""
        if self.delay_s:
            time.sleep(self.delay_s)
        return self.x[lid]

    fetch = fetch_distinct

    def counters(self) -> None:
        """No cache here."""
        return None

    def warm_up(self) -> None:
        """Nothing to warm."""
        return None


def one_type_model(
    num_features: int,
    hidden: int,
    out: int,
    layers: int,
    *,
    model: str = "sage",
    dropout: float = 0.5,
) -> nn.Module:
    """The typed encoder the runtime builds for a one-type store (``SAGE``'s or ``GCN``'s names)."""
    stack = {"sage": RelationalSAGE, "gcn": RelationalGCN}[model]
    return stack({ONE_TYPE: num_features}, hidden, out, [ONE_RELATION], layers, dropout)


def one_type_sampler(graph: Graph, fanouts: tuple[int, ...]) -> BoundSampler:
    """The typed sampler over the whole graph with the one type bound."""
    sampler = RelationalSampler(
        RelationalSampler.Config(fanouts={ONE_RELATION: fanouts}),
        sources={ONE_RELATION: CSRNeighborSource.from_graph(graph)},
        node_types=[ONE_TYPE],
    )
    return BoundSampler(sampler, ONE_TYPE)


def one_type_inputs(rows: Rows) -> PerTypeInputs:
    """``PerTypeInputs`` over one featured type."""
    return PerTypeInputs({ONE_TYPE: cast(Any, rows)}, {})


def one_type_trainer(
    graph: Graph,
    config: Trainer.Config,
    *,
    hidden: int = 16,
    fanouts: tuple[int, ...] = (5, 5),
    rows: Rows | None = None,
    model_seed: int = 0,
    **handles: Any,
) -> Trainer:
    """A node-classification trainer on the graph's train nodes (``handles``: ``Trainer``'s)."""
    assert graph.x is not None and graph.y is not None and graph.train_mask is not None
    torch.manual_seed(model_seed)
    model = one_type_model(graph.num_features, hidden, graph.num_classes, len(fanouts))
    train = torch.from_numpy(np.flatnonzero(graph.train_mask))
    return Trainer(
        config,
        model=model,
        sampler=one_type_sampler(graph, fanouts),
        inputs=one_type_inputs(rows if rows is not None else Rows(graph.x)),
        train_lid=train,
        train_y=torch.from_numpy(graph.y[train.numpy()]),
        **handles,
    )


def one_type_link_trainer(
    graph: Graph,
    config: Trainer.Config,
    link: LinkConfig,
    *,
    encoder: nn.Module,
    decoder: str,
    width: int,
    train_2E: Tensor,
    fanouts: tuple[int, ...] = (-1, -1),
    **handles: Any,
) -> LinkTrainer:
    """A link trainer on ``train_2E`` of the one relation, the encoder given."""
    assert graph.x is not None
    return LinkTrainer(
        config,
        link,
        edge_type=ONE_RELATION,
        train_2E=train_2E,
        num_dst=graph.num_nodes,
        model=LinkModel(cast(Any, encoder), build_decoder(decoder, width)),
        sampler=one_type_sampler(graph, fanouts),
        inputs=one_type_inputs(Rows(graph.x)),
        **handles,
    )
