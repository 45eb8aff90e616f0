"""Stage 8, models: single-device GNNs over ``Block`` lists, built on ``gnnsys.kernels``.

``MODELS`` maps a name to a class constructed as ``cls(in_dim, hidden_dim, out_dim, num_layers,
dropout)``; every model has ``forward(x_NF, blocks)``, ``forward_layer(i, x_src, block)`` and
``num_layers``. ``ModelConfig`` is the run setting (name, width, dropout) and ``build_model``
the one place that turns it into a model.
"""

from __future__ import annotations

from gnnsys.models.base import BlockModel
from gnnsys.models.config import ModelConfig, build_model
from gnnsys.models.gat import GAT, GATLayer
from gnnsys.models.gcn import GCN
from gnnsys.models.layers import GCNLayer, SAGELayer
from gnnsys.models.link import DECODERS, LinkModel, build_decoder
from gnnsys.models.sage import SAGE

__all__ = [
    "DECODERS",
    "GAT",
    "GCN",
    "MODELS",
    "SAGE",
    "BlockModel",
    "GATLayer",
    "GCNLayer",
    "LinkModel",
    "ModelConfig",
    "SAGELayer",
    "build_decoder",
    "build_model",
]

MODELS: dict[str, type[BlockModel]] = {"sage": SAGE, "gcn": GCN, "gat": GAT}
"""Model registry: name -> class."""
