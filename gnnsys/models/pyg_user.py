"""Any PyG ``BasicGNN`` (or a user factory returning one) as a model of ``gnnsys train``.

``gnnsys train --model GIN --model-arg jk=last --model-arg train_eps=true`` builds
``torch_geometric.nn.models.GIN(in_channels=F, hidden_channels=H, num_layers=L, out_channels=C,
dropout=p, jk='last', train_eps=True)``; ``--model my_pkg.models:make`` calls
``make(in_channels=..., hidden_channels=..., num_layers=..., out_channels=..., dropout=...,
**model_args)``, which must return a ``BasicGNN`` (``convs``, ``norms``, ``act``, ...).

The runtime runs it layer by layer over its sampled blocks, as ``BasicGNN.forward`` runs over a
trimmed subgraph: layer ``i`` is ``convs[i]`` over block ``i`` (its destinations are the first
``M`` of its sources, PyG's convention), then, on every layer but the last (or on every layer
with ``jk='last'``), the model's own activation, normalisation and dropout in PyG's order; the
last layer ends with ``lin`` when the model has one. So training, the sharded layer-wise
evaluation, ``predict``, ``embed`` and ``export-model`` (a plain PyG state dict) all see the
arithmetic of the PyG model. Convs that take bipartite input run on ``(x_src, x_dst)``; GCN's
(which does not) on all sources, keeping the destinations' rows; it normalises by the degrees
inside each block, as PyG's ``GCN`` does under ``NeighborLoader``.

``jk='cat'|'max'|'lstm'``: layer ``i``'s output rows are ``[h_0 | ... | h_i]``, the outputs of
every layer so far side by side; the next conv reads the last ``H`` columns and the last layer
gives ``lin(jk([h_0, ..., h_{L-1}]))``, PyG's ``BasicGNN.forward``. So the sharded evaluation,
which keeps one layer's rows at a time, runs them too (PyG's own ``BasicGNN.inference`` refuses
them); a halo row of layer ``i`` then travels ``i`` times ``H`` wide, and ``embed`` gives the
last layer's input ``[h_0 | ... | h_{L-2}]``.

Not here: typed graphs (use ``to_hetero`` in your own loop), edge features and edge weights.

Shape legend: ``N`` source nodes of a block, ``M`` its destinations, ``H`` width.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from gnnsys.models.registry import REGISTRY
from gnnsys.types import Block

__all__ = [
    "BUILTIN",
    "HopTrimmed",
    "PygStack",
    "build_plain",
    "build_user_model",
    "check_user_model",
    "is_user_model",
    "model_kwargs",
    "parse_model_args",
    "user_model_state",
]

BUILTIN = tuple(REGISTRY)
"""gnnsys's own models (``--model`` names that are not PyG classes)."""

JK_CARRY = ("cat", "max", "lstm")
"""``jk`` modes whose last layer reads every layer's outputs (``_PygLayer.takes_carry``)."""


def is_user_model(name: str) -> bool:
    """Whether ``--model name`` is a PyG class or a ``module:factory`` (not a built-in)."""
    return name not in BUILTIN and (":" in name or name[:1].isupper())


def _basic_gnn(name: str) -> Any:
    """The ``BasicGNN`` subclass ``name`` of ``torch_geometric.nn.models``, or ``None``."""
    import torch_geometric.nn.models as pyg_models
    from torch_geometric.nn.models.basic_gnn import BasicGNN

    cls = getattr(pyg_models, name, None)
    return cls if isinstance(cls, type) and issubclass(cls, BasicGNN) else None


def _choices() -> list[str]:
    import torch_geometric.nn.models as pyg_models
    from torch_geometric.nn.models.basic_gnn import BasicGNN

    return sorted(
        n for n in dir(pyg_models)
        if isinstance(getattr(pyg_models, n), type) and issubclass(getattr(pyg_models, n), BasicGNN)
        and n != "BasicGNN"
    )  # fmt: skip


def check_user_model(name: str) -> None:
    """A clear error for a ``--model`` that is neither a PyG ``BasicGNN`` nor a factory."""
    if ":" in name:
        module, _, attr = name.partition(":")
        try:
            factory = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as err:
            raise ValueError(
                f"--model {name!r}: cannot import {attr!r} from {module!r} ({err}); pass "
                "package.module:factory importable on every worker"
            ) from None
        if not callable(factory):
            raise ValueError(f"--model {name!r}: {attr!r} is not callable")
        return
    if _basic_gnn(name) is None or name == "BasicGNN":
        raise ValueError(
            f"--model {name!r}: not a gnnsys model (sage, gcn, gat, rgcn), a "
            f"torch_geometric.nn.models BasicGNN ({', '.join(_choices())}) or "
            "package.module:factory"
        )


def parse_model_args(items: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``--model-arg KEY=VALUE`` pairs, kept as text (:func:`model_kwargs` decodes them)."""
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise ValueError(f"--model-arg {item!r}; pass KEY=VALUE, e.g. --model-arg jk=last")
        out.append((key, value))
    return tuple(out)


def model_kwargs(args: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """Decoded ``--model-arg`` values.

    JSON where it parses (``4``, ``0.1``, ``true``, ``null``, ``[1, 2]``), else the text itself
    (``jk=last``, ``act=elu``).
    """
    out: dict[str, Any] = {}
    for key, value in args:
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def build_user_model(
    name: str, args: Sequence[tuple[str, str]], *, in_dim: int, hidden: int, out_dim: int,
    num_layers: int, dropout: float,
) -> PygStack:  # fmt: skip
    """The PyG model of ``--model name`` and its ``--model-arg``s, wrapped for the runtime.

    Raises:
        ValueError: An unknown name, arguments the class refuses (its message), an unknown
            ``jk``, or a factory whose model is not a ``BasicGNN``.
    """
    from torch_geometric.nn.models.basic_gnn import BasicGNN

    kwargs = {
        "in_channels": in_dim, "hidden_channels": hidden, "num_layers": num_layers,
        "out_channels": out_dim, "dropout": dropout, **model_kwargs(args),
    }  # fmt: skip
    if kwargs.get("jk") not in (None, "last", *JK_CARRY):
        raise ValueError(
            f"--model {name}: jk={kwargs['jk']!r}; choose one of PyG's BasicGNN modes: "
            f"{', '.join(('last', *JK_CARRY))} (or leave it out)"
        )
    model = build_plain(name, kwargs)
    if not isinstance(model, BasicGNN):
        raise ValueError(
            f"--model {name}: the factory returned {type(model).__name__}, not a "
            "torch_geometric.nn.models.BasicGNN (gnnsys train runs its convs layer by layer); "
            "train other models in your own loop on gnnsys.distributed.DistNeighborLoader"
        )
    if int(model.num_layers) != num_layers:
        raise ValueError(
            f"--model {name}: the model has {model.num_layers} layers but --fanouts has "
            f"{num_layers} hops; give one fanout per layer"
        )
    return PygStack(model)


def build_plain(name: str, kwargs: dict[str, Any]) -> Any:
    """The PyG model itself: ``name(**kwargs)`` (a ``BasicGNN`` class or ``module:factory``).

    Raises:
        ValueError: An unknown name, or arguments the class refuses (its message).
    """
    check_user_model(name)
    if ":" in name:
        module, _, attr = name.partition(":")
        build = getattr(importlib.import_module(module), attr)
    else:
        build = _basic_gnn(name)
    try:
        return build(**kwargs)
    except (TypeError, ValueError, KeyError, AssertionError) as err:
        raise ValueError(f"--model {name} with {kwargs}: {err}") from None


class _PygLayer(nn.Module):
    """Layer ``i`` of a ``BasicGNN`` over one typed block: ``{t: [N, F]} -> {t: [M, H]}``."""

    activates = True
    """Applies the model's own activation (the evaluator adds no ReLU after it)."""

    def __init__(self, model: Any, i: int) -> None:
        super().__init__()
        from torch_geometric.nn import GCNConv, GINConv, SAGEConv

        last = i == model.num_layers - 1
        self.conv = model.convs[i]
        self.bipartite = not isinstance(self.conv, GCNConv)
        self.sparse = (
            isinstance(self.conv, SAGEConv) and str(self.conv.aggr) in ("mean", "sum", "add")
        ) or isinstance(self.conv, GINConv)
        """The conv reduces through PyG's sparse path (``spmm`` over a CSR ``adj_t``): the same
        sums as its gather-scatter over ``edge_index``, without the ``[E, F]`` messages."""
        self.uses_in_degree = isinstance(self.conv, GCNConv) and bool(self.conv.normalize)
        """GCN: with whole-graph in-degrees on the block (the sharded evaluation stamps them),
        normalise by them, as ``GCNConv`` on the whole graph does."""
        self.post = not last or model.jk_mode is not None
        self.norm: Any = model.norms[i] if self.post else None
        self.act = model.act if self.post else None
        self.act_first, self.p = bool(model.act_first), float(model.dropout.p)
        self.norm_batch = bool(getattr(model, "supports_norm_batch", False))
        self.lin = model.lin if last and hasattr(model, "lin") else None
        carry = model.jk_mode in JK_CARRY
        self.hidden = int(model.hidden_channels)
        self.takes_carry = carry and i > 0
        """``jk=cat|max|lstm``: the input rows are ``[h_0 | ... | h_{i-1}]`` (earlier layers'
        outputs side by side); the conv reads ``h_{i-1}``, the output carries the destinations'
        earlier columns on, and the last layer gives ``lin(jk([h_0, ..., h_{L-1}]))``."""
        self.jk = model.jk if last and hasattr(model, "jk") else None

    def forward(self, x_dict: dict[str, Tensor], blocks: dict[Any, Block]) -> dict[str, Tensor]:
        """The conv over the one relation's block, then PyG's act/norm/dropout (or ``lin``)."""
        ((edge_type, block),) = blocks.items()
        src, dst_type = edge_type[0], edge_type[2]
        x = x_dict[src]
        m = int(block.num_dst)
        rowptr, col = block.rowptr.to(x.device), block.col.to(x.device)
        if self.sparse:  # the block is the CSR already: no [2, E] edge_index to build
            return {dst_type: self.apply_layer(x, None, m, csr=(rowptr, col))}
        dst = torch.repeat_interleave(torch.arange(m, device=x.device), rowptr.diff())
        degree = None if block.src_in_degree is None else block.src_in_degree.to(x.device)
        return {dst_type: self.apply_layer(x, torch.stack([col, dst]), m, degree)}

    def apply_layer(
        self, x: Tensor, edge_index: Tensor | None, m: int, in_degree: Tensor | None = None,
        csr: tuple[Tensor, Tensor] | None = None,
    ) -> Tensor:  # fmt: skip
        """``[N, F]`` sources (the first ``m`` are the destinations) -> ``[m, H]``.

        ``csr``: ``(rowptr [m + 1], col)`` of the edges sorted by destination, for a conv with
        the sparse path (``self.sparse``); else ``edge_index``.
        """
        h: Tensor
        prefix = None
        if self.takes_carry:  # jk: earlier layers' columns of the destinations ride along
            prefix, x = x[:m], x[:, int(x.shape[1]) - self.hidden :]
        if self.sparse and csr is not None:
            h = self.conv((x, x[:m]), _adj_t(csr[0], csr[1], m, int(x.shape[0]), x))
        elif edge_index is None:
            raise ValueError("apply_layer: pass edge_index, or csr for a conv with a sparse path")
        elif self.bipartite:
            h = self.conv((x, x[:m]), edge_index)
        elif self.uses_in_degree and in_degree is not None:
            h = self._gcn_whole_graph(x, edge_index, in_degree, m)
        else:
            h = self.conv(x, edge_index)[:m]
        return self._tail(h, prefix)

    def apply_from_agg(self, agg: Tensor, x_dst: Tensor) -> Tensor:
        """The layer from its neighbour means done elsewhere: ``[m, F]`` means and roots.

        ``SAGEConv(aggr='mean')`` without ``project`` only: ``lin_l(agg) + lin_r(x_dst)``
        (normalised when the conv does), then the layer's act/norm/dropout (or ``lin``).
        """
        from torch_geometric.nn import SAGEConv

        conv = self.conv
        if not isinstance(conv, SAGEConv) or str(conv.aggr) != "mean" or conv.project:
            raise ValueError(
                f"agg0 (layer 0's neighbour means) serves a SAGEConv(aggr='mean') layer 0, not "
                f"{conv}: load batches with layer0='rows'"
            )
        h: Tensor = conv.lin_l(agg)
        if conv.root_weight:
            h = h + conv.lin_r(x_dst)
        if conv.normalize:
            h = nn.functional.normalize(h, p=2.0, dim=-1)
        return self._tail(h, None)

    def _tail(self, h: Tensor, prefix: Tensor | None) -> Tensor:
        """PyG's act/norm/dropout after the conv, jk's carried columns, then ``lin``."""
        if self.post:
            if self.act is not None and self.act_first:
                h = self.act(h)
            h = self.norm(h, None, None) if self.norm_batch else self.norm(h)
            if self.act is not None and not self.act_first:
                h = self.act(h)
            h = nn.functional.dropout(h, self.p, self.training)
        if prefix is not None:
            h = torch.cat([prefix, h], dim=1)
        if self.jk is not None:
            h = self.jk(list(torch.split(h, self.hidden, dim=1)))
        if self.lin is not None:
            h = self.lin(h)
        return h

    def _gcn_whole_graph(self, x: Tensor, edge_index: Tensor, in_degree: Tensor, m: int) -> Tensor:
        """``GCNConv`` with PyG's ``gcn_norm`` weights from whole-graph in-degrees.

        Edge ``j -> i``: ``(d_j d_i) ** -0.5``, self loop ``i -> i``: ``fill / d_i``, with
        ``d = in-degree + fill`` (``fill`` 2 when ``improved``, else 1).
        """
        fill = 2.0 if self.conv.improved else 1.0
        scale = (in_degree.to(x.dtype) + fill).rsqrt()
        loops = torch.arange(m, device=x.device)
        full = torch.cat([edge_index, torch.stack([loops, loops])], dim=1)
        weight = torch.cat(
            [scale[edge_index[0]] * scale[edge_index[1]], fill * scale[:m] * scale[:m]]
        )
        normalize, self.conv.normalize = self.conv.normalize, False
        try:
            out: Tensor = self.conv(x, full, weight)[:m]
        finally:
            self.conv.normalize = normalize
        return out


def _adj_t(rowptr: Tensor, col: Tensor, m: int, n: int, x: Tensor) -> Tensor:
    """``[m, n]`` CSR adjacency (destination rows, unit weights): PyG's sparse ``adj_t``."""
    import warnings

    with warnings.catch_warnings():  # "sparse CSR support is in beta" and invariant checks
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(
            rowptr, col, torch.ones(col.shape[0], dtype=x.dtype, device=x.device), size=(m, n)
        )


def _dst_rowptr(dst: Tensor, m: int) -> Tensor | None:
    """The CSR row pointer of destinations ``dst`` in ``[0, m)``, or ``None`` if unsorted."""
    if dst.numel() > 1 and not bool((dst[1:] >= dst[:-1]).all()):
        return None
    rowptr = torch.zeros(m + 1, dtype=torch.int64, device=dst.device)
    rowptr[1:] = torch.bincount(dst, minlength=m).cumsum(0)
    return rowptr


class PygStack(nn.Module):
    """A ``BasicGNN``'s layers as the runtime's typed layers (module docstring).

    State dict keys: ``layers.i.conv.*``, ``layers.i.norm.*``, ``layers.{L-1}.lin.*``
    (:func:`user_model_state` gives PyG's own names).
    """

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.num_layers = int(model.num_layers)
        self.layers = nn.ModuleList(_PygLayer(model, i) for i in range(self.num_layers))

    def forward(self, x_dict: dict[str, Tensor], blocks: Sequence[Any]) -> dict[str, Tensor]:
        """Every layer over its typed blocks, input layer first."""
        if len(blocks) != len(self.layers):
            raise ValueError(f"got {len(blocks)} block layers for {len(self.layers)} layers")
        for layer, layer_blocks in zip(self.layers, blocks, strict=True):
            x_dict = layer(x_dict, layer_blocks)
        return x_dict


def user_model_state(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """A ``PygStack`` state dict under the PyG model's own names.

    ``convs.i``, ``norms.i``, ``lin``, ``jk``: ``model.load_state_dict`` of the PyG class takes it.
    """
    out = {}
    for key, value in state.items():
        if not key.startswith("layers."):
            continue
        layer, _, rest = key.removeprefix("layers.").partition(".")
        part, _, tail = rest.partition(".")
        names = {"conv": f"convs.{layer}", "norm": f"norms.{layer}", "lin": "lin", "jk": "jk"}
        name = names.get(part)
        if name is not None:
            out[f"{name}.{tail}"] = value.detach().cpu().contiguous()
    return out


class HopTrimmed(nn.Module):
    """A PyG ``BasicGNN`` on a sampled batch, computing only the rows each layer needs.

    ``HopTrimmed(model)(x, edge_index, num_sampled_nodes, num_sampled_edges)`` equals
    ``model(x, edge_index)[:num_sampled_nodes[0]]`` (the seeds' outputs), for a batch whose
    nodes and edges are ordered by hop (``NeighborLoader``, ``DistNeighborLoader``): layer
    ``i`` of ``L`` runs its conv on ``(x_src, x_dst)`` for the destinations of hops
    ``0 .. L-1-i`` only, over those hops' edges. PyG's ``trim_to_layer`` still runs layer 0 for
    every sampled node, the last hop's too (most of the batch); here no layer computes a row
    that no later layer reads. The parameters and ``state_dict`` are the model's (under
    ``model.``); wrap it in ``DistributedDataParallel`` as the model itself.

    GCN normalises by each node's in-edges in the whole batch, as the untrimmed model does.
    Every ``jk`` mode runs (``cat``/``max``/``lstm`` carry each layer's outputs to the last).
    """

    def __init__(self, model: Any) -> None:
        super().__init__()
        from torch_geometric.nn.models.basic_gnn import BasicGNN

        if not isinstance(model, BasicGNN):
            raise TypeError(f"HopTrimmed takes a torch_geometric BasicGNN, got {type(model)}")
        self.model = model
        self._layers = [_PygLayer(model, i) for i in range(int(model.num_layers))]

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        num_sampled_nodes: Sequence[int],
        num_sampled_edges: Sequence[int],
        agg0: Tensor | None = None,
    ) -> Tensor:
        """``[B, C]`` outputs of the seeds (the first ``num_sampled_nodes[0]`` nodes).

        ``agg0``: layer 0's neighbour means from ``DistNeighborLoader(layer0='owner' |
        'fused')``; ``x`` then holds only layer 0's destinations (a mean ``SAGEConv`` layer 0).
        """
        hops = len(self._layers)
        nodes, edges = [int(n) for n in num_sampled_nodes], [int(e) for e in num_sampled_edges]
        if len(nodes) != hops + 1 or len(edges) != hops:
            raise ValueError(
                f"a {hops}-layer model needs a {hops}-hop batch: got num_sampled_nodes={nodes} "
                f"and num_sampled_edges={edges}; sample with {hops} fanouts"
            )
        node_end = torch.tensor(nodes).cumsum(0).tolist()
        edge_end = torch.tensor(edges).cumsum(0).tolist()
        degree = None  # GCN: each node's in-edges in the whole batch, as model(x, edge_index)
        if any(layer.uses_in_degree for layer in self._layers):
            degree = torch.bincount(edge_index[1], minlength=int(x.shape[0]))
        h = x
        for i, layer in enumerate(self._layers):
            layer.training = self.training  # not registered here: it follows this module
            reach = hops - 1 - i  # the deepest hop whose rows layer i still computes
            n, m = node_end[reach + 1], node_end[reach]
            part = None if degree is None else degree[:n]
            if i == 0 and agg0 is not None:  # its sums were done by owners or from codes
                h = layer.apply_from_agg(agg0, h[:m])
                continue
            hop = edge_index[:, : edge_end[reach]]
            rowptr = _dst_rowptr(hop[1], m) if layer.sparse else None
            csr = None if rowptr is None else (rowptr, hop[0])
            h = layer.apply_layer(h[:n], hop, m, part, csr)
        return h
