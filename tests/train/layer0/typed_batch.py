"""One rank's typed batch on a one-type store, built as the runtime builds it (``build_sources``).

The layer-0 tests sample part ``part``'s seeds through the rank's routed sources (whole-graph
GCN degrees included) and fetch rows through ``RoutedFeatureSource``s of the one type; their
homogeneous reference models get a typed copy (:func:`typed_copy`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from gnnsys.cache.codecs import make_codec
from gnnsys.sampler.neighbor import RelationalSubgraph
from gnnsys.store import load_book
from gnnsys.testing.in_memory import one_type_model
from gnnsys.train.inputs import BoundSampler
from gnnsys.train.remote.features import RoutedFeatureSource
from gnnsys.train.remote.ledger import Ledger
from gnnsys.types import ONE_RELATION, ONE_TYPE, Block
from tests.train.conftest import rank_sources


@dataclass
class TypedBatch:
    """One sampled batch of one part and the handles that produced it."""

    sub: RelationalSubgraph
    features: RoutedFeatureSource
    part_N: np.ndarray
    client: Any
    sampler: BoundSampler
    train_lid: Tensor
    features_with: Callable[..., RoutedFeatureSource]
    """Another no-cache source of the part: ``features_with(ledger, codec="fp32")``."""

    @property
    def n_id(self) -> Tensor:
        """The batch's sampled nodes of the one type."""
        return self.sub.n_id[ONE_TYPE]

    def block(self, layer: int = 0) -> Block:
        """The one relation's block of ``layer``."""
        return self.sub.blocks[layer][ONE_RELATION]

    def homogeneous_blocks(self) -> list[Block]:
        """Every layer's block of the one relation (what ``SAGE``/``GCN`` take)."""
        return [layer[ONE_RELATION] for layer in self.sub.blocks]


def typed_batch(
    store: Path,
    part: int,
    client: Any,
    *,
    fanouts: tuple[int, ...],
    num_seeds: int,
    seed: int,
    codec: str = "fp32",
) -> TypedBatch:
    """Part ``part``'s first ``num_seeds`` owned nodes sampled with ``seed``, rows in ``codec``.

    The sampler is a GCN rank's (``rank_sources``): its blocks carry whole-graph in-degrees,
    which SAGE ignores.
    """
    from gnnsys.sampler import NeighborSampler

    sampler_config = NeighborSampler.Config(fanouts=fanouts)
    sources, _, shard = rank_sources(
        store, part, model="gcn", client=client, sampler=sampler_config
    )
    book = load_book(store)
    nodes = shard.nodes[ONE_TYPE]
    x = nodes.data["x"]

    def features_with(ledger: Ledger, codec: str = codec) -> RoutedFeatureSource:
        return RoutedFeatureSource(
            part, book.part_N, book.lid_N, x, client, ledger, codec=make_codec(codec),
            node_type=ONE_TYPE,
        )  # fmt: skip

    train_lid = torch.from_numpy(np.asarray(nodes.owned_lid, dtype=np.int64))[:num_seeds]
    sub = sources.sampler.sample(train_lid, seed=seed)
    return TypedBatch(
        sub, features_with(Ledger()), book.part_N, client, sources.sampler, train_lid,
        features_with,
    )  # fmt: skip


def typed_copy(model: nn.Module, name: str) -> Any:
    """The runtime's one-type stack with a homogeneous ``model``'s weights (the same names)."""
    typed = one_type_model(16, 8, 4, 2, model=name)
    typed.load_state_dict(model.state_dict())
    return typed.eval()


def runtime_inputs(store: Path, part: int, *, model: str, codec: str, **stages: Any) -> Any:
    """Part ``part``'s ``PerTypeInputs`` as the runtime builds them (``stages``: ``layer0=``...)."""
    from gnnsys.cache import CodecConfig

    sources, _, _ = rank_sources(store, part, model=model, codec=CodecConfig(name=codec), **stages)
    return sources.inputs
