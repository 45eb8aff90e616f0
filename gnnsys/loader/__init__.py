"""Stage 6, loader: PyG-compatible mini-batches (``torch_geometric.data.Data``) and inference.

``NeighborLoader`` and ``LinkNeighborLoader`` are drop-ins for their ``torch_geometric.loader``
namesakes, on homogeneous graphs (``Data`` batches) and heterogeneous ones (``HeteroData``
batches: ``hetero_loader``, ``hetero_link_loader``); ``layerwise_inference`` computes exact
full-neighborhood outputs layer by layer.
"""

from __future__ import annotations

from gnnsys.loader.graph_view import edge_index_of, to_pyg_data
from gnnsys.loader.inference import layerwise_inference
from gnnsys.loader.link_loader import LinkNeighborLoader
from gnnsys.loader.node_loader import NeighborLoader

__all__ = [
    "LinkNeighborLoader",
    "NeighborLoader",
    "edge_index_of",
    "layerwise_inference",
    "to_pyg_data",
]
