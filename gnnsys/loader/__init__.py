"""Stage 6, loader: PyG-compatible mini-batches (``torch_geometric.data.Data``) and inference.

``NeighborLoader`` is a drop-in for ``torch_geometric.loader.NeighborLoader`` on homogeneous
graphs; ``layerwise_inference`` computes exact full-neighborhood outputs layer by layer.
"""

from __future__ import annotations

from gnnsys.loader.graph_view import edge_index_of, to_pyg_data
from gnnsys.loader.inference import layerwise_inference
from gnnsys.loader.node_loader import NeighborLoader

__all__ = ["NeighborLoader", "edge_index_of", "layerwise_inference", "to_pyg_data"]
