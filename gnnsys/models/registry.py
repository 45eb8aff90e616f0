"""The one table of gnnsys's own models: every built-in ``--model`` name and what it builds.

Each entry says how the runtime builds the model over a graph's node types and relations
(``build``: a homogeneous graph is one type and one relation), which PyG ``BasicGNN`` class
``gnnsys export-model`` writes it as, whether the CLI offers it on one type's graph
(``rgcn`` is typed only), whether it normalises by whole-graph in-degrees, and the
single-process ``BlockModel`` class of the in-memory reference runs. The CLI's refusals,
``ModelConfig``'s and ``NodeTypesConfig``'s checks, the runtime (``gnnsys.train.rank``), the
export (``gnnsys.models.pyg``) and the PyG model check (``gnnsys.models.pyg_user``) all read
:data:`REGISTRY`: adding a model is one entry here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

from gnnsys.types import EdgeType

__all__ = ["REGISTRY", "ModelKind", "build_relational_model"]


@dataclass(frozen=True, slots=True)
class ModelKind:
    """One built-in model.

    Attributes:
        build: ``(in_dims, hidden, classes, edge_types, layers, dropout) -> nn.Module``, the
            typed model the runtime trains (``in_dims``: node type -> input width).
        pyg_class: The PyG ``BasicGNN`` class its one-type weights export to, or ``None``.
        one_type: The CLI offers it on a homogeneous graph (``rgcn``'s per-relation weights
            need a typed one).
        uses_in_degree: It normalises by whole-graph in-degrees (GCN).
        block: ``(F, H, C, layers, dropout) -> BlockModel``, the single-process model of the
            in-memory reference runs, or ``None``.
    """

    build: Callable[..., nn.Module]
    pyg_class: str | None
    one_type: bool = True
    uses_in_degree: bool = False
    block: Callable[..., Any] | None = None


def _sage(*args: Any) -> nn.Module:
    from gnnsys.models.relational import RelationalSAGE

    return RelationalSAGE(*args)


def _gcn(*args: Any) -> nn.Module:
    from gnnsys.models.relational import RelationalGCN

    return RelationalGCN(*args)


def _gat(*args: Any) -> nn.Module:
    from gnnsys.models.gat import RelationalGAT

    return RelationalGAT(*args)


def _rgcn(
    in_dims: dict[str, int], hidden: int, classes: int, edge_types: list[EdgeType], *rest: Any
) -> nn.Module:
    from gnnsys.models.relational import RGCN

    widths = set(in_dims.values())
    if len(widths) != 1:
        raise ValueError(f"rgcn needs one input width for every type, got {in_dims}")
    return RGCN(widths.pop(), hidden, classes, edge_types, *rest)


def _block(name: str) -> Callable[..., Any]:
    def build(*args: Any) -> Any:
        from gnnsys.models.gat import GAT
        from gnnsys.models.gcn import GCN
        from gnnsys.models.sage import SAGE

        return {"sage": SAGE, "gcn": GCN, "gat": GAT}[name](*args)

    return build


REGISTRY: dict[str, ModelKind] = {
    "sage": ModelKind(_sage, "GraphSAGE", block=_block("sage")),
    "gcn": ModelKind(_gcn, "GCN", uses_in_degree=True, block=_block("gcn")),
    "gat": ModelKind(_gat, "GAT", block=_block("gat")),
    "rgcn": ModelKind(_rgcn, None, one_type=False),
}
"""Built-in model name -> its entry. ``sage`` is the default of every run."""


def build_relational_model(
    name: str,
    in_dims: dict[str, int],
    hidden: int,
    classes: int,
    edge_types: list[EdgeType],
    layers: int,
    dropout: float,
) -> nn.Module:
    """The runtime's model ``name`` over ``edge_types`` (``REGISTRY[name].build``).

    Raises:
        ValueError: An unknown name (the known ones listed), or what the builder refuses.
    """
    if name not in REGISTRY:
        raise ValueError(f"model {name!r}; choose one of {sorted(REGISTRY)}")
    return REGISTRY[name].build(in_dims, hidden, classes, edge_types, layers, dropout)
