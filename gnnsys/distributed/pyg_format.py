"""PyG's two batch kinds, chosen once per store: ``Data`` (one node type) or ``HeteroData``.

PyG's distributed loaders take and give a graph's kind as a real parameter: on a graph of one
node type the seeds are a mask or ids, ``num_neighbors`` a list and batches ``Data``, and a
model is called as ``model(x, edge_index)``; on a typed graph the seeds name their type
(``input_nodes=('paper', mask)``), ``num_neighbors`` may be keyed by relation, batches are
``HeteroData`` and a ``to_hetero`` model is called on the dicts. ``DistNeighborLoader``,
``DistLinkNeighborLoader`` and ``inference`` read a store of either kind through the one
runtime (keyed by node type), and this module is the one place that speaks PyG's kind:
:func:`pyg_format` picks :data:`DATA` or :data:`HETERO_DATA` from the store's manifest, and
every kind-dependent step is a method of the pick.

Shape legend: ``B`` seeds, ``M`` nodes of a batch.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from gnnsys.types import ONE_RELATION, ONE_TYPE, EdgeType

__all__ = ["DATA", "HETERO_DATA", "DataFormat", "HeteroDataFormat", "pyg_format"]

SPLITS = ("train", "val", "test")
"""Split names ``input_nodes`` may give (``'val'``, or ``('paper', 'val')`` on a typed store):
the part's ``<split>_mask``."""


class DataFormat:
    """A store of one node type: PyG ``Data`` batches, ``model(x, edge_index)``."""

    typed = False
    """Whether batches are ``HeteroData`` (the outputs manifest's ``typed`` field)."""

    def input_type(self, store: Any, input_nodes: Any, info: Any) -> tuple[str, Any]:
        """The seed type and what ``input_nodes`` says about its seeds (``None``: train mask)."""
        del info
        if isinstance(input_nodes, str) and input_nodes in SPLITS:
            return ONE_TYPE, input_nodes
        if isinstance(input_nodes, str) or (
            isinstance(input_nodes, tuple) and input_nodes and isinstance(input_nodes[0], str)
        ):
            raise TypeError(
                f"input_nodes={input_nodes!r} names a node type, but {store} is a "
                "homogeneous store (one node type): pass None (its train mask), a bool mask "
                "or an id tensor"
            )
        return ONE_TYPE, input_nodes

    def edge_type(self, store: Any, edge_label_index: Any, info: Any) -> tuple[EdgeType, Any]:
        """The seed relation and what ``edge_label_index`` says about its links."""
        del info
        if isinstance(edge_label_index, tuple | str):
            raise TypeError(
                f"edge_label_index={edge_label_index!r} names an edge type, but {store} is a "
                "homogeneous store (one relation): pass None or a [2, L] tensor"
            )
        return ONE_RELATION, edge_label_index

    def relation_fanouts(self, num_neighbors: dict[Any, Any]) -> None:
        """Refuse ``num_neighbors`` keyed by relation (PyG's ``Data`` takes a list)."""
        raise TypeError(
            "num_neighbors is a dict of edge types, but the store is homogeneous: "
            "pass a list of fanouts"
        )

    def check_layer0(self, layer0: str) -> None:
        """Every ``layer0`` serves one relation (its means arrive in ``agg0``)."""

    def node_types_config(self, featured: str) -> Any:
        """The runtime's ``RunConfig.node_types`` for the loader's data path: none."""
        return None

    def join(self, sub: Any, x_dict: dict[str, Tensor]) -> Any:
        """``Data`` of a sampled subgraph (``RelationalSubgraph``) and its rows."""
        from torch_geometric.data import Data

        ((et, edge_index),) = sub.edge_index.items()
        return Data(
            x=x_dict[ONE_TYPE], edge_index=edge_index, n_id=sub.n_id[ONE_TYPE],
            num_sampled_nodes=list(sub.num_sampled_nodes[ONE_TYPE]),
            num_sampled_edges=list(sub.num_sampled_edges[et]),
        )  # fmt: skip

    def of_type(self, batch: Any, key: Any) -> Any:
        """The part of ``batch`` holding node type or relation ``key``: all of it."""
        return batch

    def output_type(self, input_type: str | None, info: Any) -> str | None:
        """The node type whose outputs ``inference`` writes (default: the one type)."""
        return input_type or info.named_types[0]

    def seeds(self, node_type: str, mask: Tensor) -> Any:
        """``input_nodes`` for the ``mask`` nodes of ``node_type``."""
        return mask

    def num_nodes(self, store: Any, info: Any, node_type: str) -> int:
        """Nodes of ``node_type``."""
        return int(info.num_nodes)

    def plan(self, model: Any, info: Any) -> Any:
        """A ``to_hetero`` model's layer plan: none on one type."""
        return None

    def exact(self, model: Any, plan: Any) -> bool:
        """Whether ``model`` runs layer by layer with every neighbour (PyG's ``BasicGNN``)."""
        return hasattr(model, "inference_per_layer") and isinstance(
            getattr(model, "num_layers", None), int
        )

    def not_layerwise(self, model: Any) -> str:
        """Why ``method='layerwise'`` refuses ``model``."""
        return (
            f"method='layerwise' needs PyG's BasicGNN layer interface (num_layers, "
            f"inference_per_layer); {type(model).__name__} has none: pass "
            "method='sampled' and num_neighbors"
        )

    def forward(
        self, model: Any, batch: Any, input_type: str, embeddings: dict[str, Any]
    ) -> tuple[Tensor, int]:
        """``model``'s ``[M, H]`` outputs on ``batch`` and its seed count ``B``."""
        return model(batch.x, batch.edge_index), int(batch.batch_size)

    def node_type(self, input_type: str) -> str | None:
        """The outputs' node type (``None``: the one type, as ``gnnsys predict`` writes)."""
        return None

    def node_types(self, input_type: str) -> list[str] | None:
        """The outputs manifest's ``node_types``."""
        return None


class HeteroDataFormat(DataFormat):
    """A typed store: PyG ``HeteroData`` batches, a ``to_hetero`` model on the dicts."""

    typed = True

    def input_type(self, store: Any, input_nodes: Any, info: Any) -> tuple[str, Any]:
        """``input_nodes='type'`` or ``('type', mask | ids)``, as PyG's ``HeteroData``."""
        types = list(info.node_types)
        if isinstance(input_nodes, str):
            name, given = input_nodes, None
        elif isinstance(input_nodes, tuple) and len(input_nodes) == 2:
            name, given = input_nodes
        else:
            raise TypeError(
                f"{store} is a typed store (node types {types}); name the seed type as PyG "
                "does for HeteroData: input_nodes='type' or ('type', mask | ids), got "
                f"{type(input_nodes).__name__}"
            )
        if name not in types:
            raise ValueError(f"input_nodes names node type {name!r}; the store's types: {types}")
        return name, given

    def edge_type(self, store: Any, edge_label_index: Any, info: Any) -> tuple[EdgeType, Any]:
        """``(src, rel, dst)`` or ``((src, rel, dst), [2, L])``, as PyG's ``HeteroData``."""
        relations = [tuple(et) for et in info.named_relations]
        names_type = isinstance(edge_label_index, tuple) and (
            len(edge_label_index) == 3 and all(isinstance(p, str) for p in edge_label_index)
        )
        if names_type:
            edge_type, given = edge_label_index, None
        elif isinstance(edge_label_index, tuple) and len(edge_label_index) == 2:
            edge_type, given = tuple(edge_label_index[0]), edge_label_index[1]
        else:
            raise TypeError(
                f"{store} is a typed store (relations {relations}); name the seed relation "
                "as PyG does for HeteroData: edge_label_index=(src, rel, dst) or "
                f"((src, rel, dst), [2, L]), got {type(edge_label_index).__name__}"
            )
        if edge_type not in relations:
            raise ValueError(
                f"edge_label_index names relation {edge_type!r}; the store's: {relations}"
            )
        return (edge_type[0], edge_type[1], edge_type[2]), given

    def relation_fanouts(self, num_neighbors: dict[Any, Any]) -> None:
        """Fanouts keyed by relation are PyG's ``HeteroData`` form."""

    def check_layer0(self, layer0: str) -> None:
        """A typed store takes ``layer0='rows'`` (``agg0`` is one relation's means)."""
        if layer0 != "rows":
            raise ValueError(
                f"layer0={layer0!r} serves a homogeneous store (one relation's means in agg0); "
                "a typed store takes layer0='rows'"
            )

    def node_types_config(self, featured: str) -> Any:
        """The seed type's SAGE settings: the runtime keys its sources by type."""
        from gnnsys.train.node_types import NodeTypesConfig

        return NodeTypesConfig(model="sage", input_type=featured)

    def join(self, sub: Any, x_dict: dict[str, Tensor]) -> Any:
        """``HeteroData`` of a sampled subgraph and its rows (featureless types: no ``x``)."""
        from torch_geometric.data import HeteroData

        batch = HeteroData()
        for t, n_id in sub.n_id.items():
            batch[t].n_id = n_id
            batch[t].num_sampled_nodes = list(sub.num_sampled_nodes[t])
            if t in x_dict:
                batch[t].x = x_dict[t]
            else:
                batch[t].num_nodes = int(n_id.numel())
        for et, edge_index in sub.edge_index.items():
            batch[et].edge_index = edge_index
            batch[et].num_sampled_edges = list(sub.num_sampled_edges[et])
        return batch

    def of_type(self, batch: Any, key: Any) -> Any:
        """``batch[key]``: the node or edge store of ``key``."""
        return batch[key]

    def output_type(self, input_type: str | None, info: Any) -> str | None:
        """The given type (``inference`` names it on a typed store)."""
        return input_type

    def seeds(self, node_type: str, mask: Tensor) -> Any:
        """PyG's ``(type, mask)``."""
        return (node_type, mask)

    def num_nodes(self, store: Any, info: Any, node_type: str) -> int:
        """The type's count, from the manifest (no second read of the books)."""
        from pathlib import Path

        from gnnsys.store.reader import read_store_manifest

        return int(read_store_manifest(Path(store)).node_type(node_type).num_nodes)

    def plan(self, model: Any, info: Any) -> Any:
        """A ``to_hetero(BasicGNN)`` model's layer plan, or ``None``."""
        from gnnsys.distributed.to_hetero import plan_of

        return plan_of(model, [(et[0], et[1], et[2]) for et in info.named_relations])

    def exact(self, model: Any, plan: Any) -> bool:
        """Whether ``model`` is a ``to_hetero(BasicGNN)`` with a layer plan."""
        return plan is not None

    def not_layerwise(self, model: Any) -> str:
        """Why ``method='layerwise'`` refuses ``model`` on a typed store."""
        return (
            f"method='layerwise' on a typed store runs a to_hetero(BasicGNN) model; "
            f"{type(model).__name__} is not one: pass method='sampled' and num_neighbors"
        )

    def forward(
        self, model: Any, batch: Any, input_type: str, embeddings: dict[str, Any]
    ) -> tuple[Tensor, int]:
        """``model(x_dict, edge_index_dict)[input_type]`` (featureless types: ``embeddings``)."""
        from gnnsys.distributed.to_hetero import embedding_rows

        x_dict = dict(batch.x_dict)
        for t, table in embeddings.items():  # featureless types: the given rows
            if t in batch.node_types and t not in x_dict:
                x_dict[t] = embedding_rows(table, batch[t].n_id)
        y = model(x_dict, batch.edge_index_dict)[input_type]
        return y, int(batch[input_type].batch_size)

    def node_type(self, input_type: str) -> str | None:
        """The seed type."""
        return input_type

    def node_types(self, input_type: str) -> list[str] | None:
        """The seed type, alone."""
        return [input_type]


DATA = DataFormat()
HETERO_DATA = HeteroDataFormat()


def pyg_format(info: Any) -> DataFormat:
    """The PyG batch kind of a store (``info``: its ``StoreInfo``): the one choice."""
    return HETERO_DATA if info.typed else DATA
