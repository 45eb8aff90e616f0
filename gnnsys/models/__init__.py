"""Stage 8, models: single-device GNNs over ``Block`` lists, built on ``gnnsys.kernels``.

``REGISTRY`` (``gnnsys.models.registry``) is the one table of the built-in models: each name's
typed builder (what the runtime trains), PyG export class and single-process ``BlockModel``
(``forward(x_NF, blocks)``, ``forward_layer(i, x_src, block)``, ``num_layers``).
``ModelConfig`` is the run setting (name, width, dropout) and ``build_model`` builds its
single-process model. ``sparse_embedding`` holds the owner-side tables of
learnable embeddings for featureless node types and their sparse optimizers (``sparse_optim``).
"""

from __future__ import annotations

from gnnsys.models.base import BlockModel
from gnnsys.models.config import ModelConfig, build_model
from gnnsys.models.gat import GAT, GATLayer
from gnnsys.models.gcn import GCN
from gnnsys.models.layers import GCNLayer, SAGELayer
from gnnsys.models.link import DECODERS, LinkModel, build_decoder
from gnnsys.models.registry import REGISTRY, ModelKind
from gnnsys.models.sage import SAGE
from gnnsys.models.sparse_embedding import (
    EmbeddingConfig,
    EmbeddingShard,
    LocalEmbeddingGroup,
    SparseGrad,
    coalesce,
    embedding_leaf,
    init_rows,
    leaf_grads,
    split_grad,
)
from gnnsys.models.sparse_optim import SPARSE_OPTIMIZERS, SparseAdagrad, SparseAdam

__all__ = [
    "DECODERS",
    "GAT",
    "GCN",
    "REGISTRY",
    "SAGE",
    "SPARSE_OPTIMIZERS",
    "BlockModel",
    "EmbeddingConfig",
    "EmbeddingShard",
    "GATLayer",
    "GCNLayer",
    "LinkModel",
    "LocalEmbeddingGroup",
    "ModelConfig",
    "ModelKind",
    "SAGELayer",
    "SparseAdagrad",
    "SparseAdam",
    "SparseGrad",
    "build_decoder",
    "build_model",
    "coalesce",
    "embedding_leaf",
    "init_rows",
    "leaf_grads",
    "split_grad",
]
