"""Sharded exact evaluation keyed by node type: every rank computes its own nodes' outputs.

The layer-wise inference of ``gnnsys.train.eval.evaluate``, with one table per node type. The group
runs one layer on every rank, waits for all, then the next::

    for l in range(L):
        x_src[t] = [h_l[t](owned) ; h_l[t](halo)]             # halo: 1-hop in-neighbours of
                                                             # owned nodes, owned elsewhere
        h_{l+1}[t](owned) = layer_l({x_src}, shard blocks)    # every in-edge of every owned
                                                             # node, over every relation
    logits of the owned seed-type nodes -> per-split confusion matrices -> the driver adds them

``h_0[t]`` are type ``t``'s features, or the learnable rows of a featureless type: owned rows from
the shard (or the rank's live embedding table), halo rows from their owners in ``t``'s run codec
(``TypeInput``). ``h_l[t]`` for ``l >= 1`` are what a peer computed in the previous step: each
rank asks each peer once per layer and type for the rows of its halo owned there, in
``EvalConfig.codec`` (fp32 by default), through the peer protocol every run uses
(``PeerClient.rows_many``; a table number names a layer input and a node type,
:meth:`ShardEvaluator.table`). A type that a layer gives no output (no relation into it)
has no rows in the next layer, exactly as in the single-process forward.

Exactness: a rank's relation blocks hold every in-edge of its nodes, in the relation's CSR order
(and, for GCN, each relation's whole-graph in-degrees: owned ones from the shard, halo ones from
their owners, once per run), so the logits equal one process's forward over the whole graph to
float rounding (tested to 1e-5 at P = 1, 2, 4). Evaluation has its own ledger and reads a type's
halo cache without changing it (``peek``: a layer-0 halo row the cache holds is not fetched, and
counts as a cache hit), so training's traffic figures are unchanged by it.

A linear layer (SAGE mean/sum, GCN per relation) reduces each relation's in-edges of a run of
destinations straight out of the source type's owned ``[M_t, F]`` and halo ``[H_t, F]`` rows,
two tables never concatenated (``eval.runs.two_table_sum``), and combines the sums with the
run's own rows (``forward_from_agg``), so no run copies a table; GAT and R-GCN get
each run's inputs cut, a relation from a type to itself then reading a copy of the type's rows
after the run's (``eval.runs.cut_run``).

Tables are ``LayerTables`` (``gnnsys.train.eval.memory``): a type's table larger than
``EvalConfig.spill_mb`` lives in an unlinked file map (page cache); rows of any ids are read
through ``gnnsys.train.eval.rows``. ``EvalConfig.halo_mb`` bounds the halo rows held at once:
each destination type's rows run in pieces whose distinct halo rows fit it, each fetching only
those (``eval.runs.budget_runs``, ``eval.runs.with_run_halo``); ``EvalConfig.block_mb`` runs
SAGE and GCN layers source-blocked, and narrow SAGE layers projected
(``gnnsys.train.eval.blocked``). A rank holds its relation blocks, one run's (or one layer's)
halo rows and two layers of its own nodes' outputs.

Shape legend: ``M_t`` owned nodes of type ``t``, ``H_t`` 1-hop halo nodes of type ``t``, ``N_t``
nodes of type ``t`` in the graph, ``F`` a layer's input width, ``C`` classes.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor, nn

from gnnsys.cache import HaloCache
from gnnsys.cache.codecs import Codec, make_codec
from gnnsys.models.layers import GCNLayer
from gnnsys.models.relational import RelationalGCNLayer, RelationalSAGELayer
from gnnsys.store.shard import Shard
from gnnsys.train.device import StepDevice
from gnnsys.train.eval.blocked import (
    RelationInput,
    blocked_outputs,
    divide_by_degree,
    is_blocked_layer,
    linear_reduce,
)
from gnnsys.train.eval.evaluate import EvalConfig, RankEval
from gnnsys.train.eval.memory import (
    EVAL_MMAP_THRESHOLD,
    TRAIN_MMAP_THRESHOLD,
    LayerTables,
    eval_tick,
    release_free_memory,
    set_mmap_threshold,
    willneed_rows,
)
from gnnsys.train.eval.rows import Book, fill_cached, fill_remote, rows_of, table_number
from gnnsys.train.eval.runs import (
    budget_runs,
    cut_run,
    destination_runs,
    one_hop,
    two_table_sum,
    with_run_halo,
)
from gnnsys.train.metrics import split_counts
from gnnsys.train.remote.degrees import fetch_degrees
from gnnsys.train.remote.ledger import PerTypeLedger
from gnnsys.train.remote.peers import PeerClient
from gnnsys.types import Block, EdgeType

__all__ = ["TypeInput", "ShardEvaluator"]


@dataclass(frozen=True, slots=True, eq=False)
class TypeInput:
    """Layer-0 rows of one node type.

    Attributes:
        own: ``[M_t, F]`` rows of the owned nodes (features, or the live embedding table).
        client: ``OwnerClient.fetch_encoded_many(lid_by_part, codec, node_type)`` of halo rows
            from their owners.
        codec: The codec those rows travel in (the type's run codec).
        cache: The type's training halo cache, read without side effects (``peek``): a halo
            row it holds is not fetched (the same decoded row). ``None``: fetch every row.
    """

    own: np.ndarray
    client: Any
    codec: Codec
    cache: HaloCache | None = None


class ShardEvaluator:
    """The evaluation state of one rank of a typed graph; see the module docstring.

    Args:
        config: Evaluation settings (``codec``, ``message_mb``).
        shard: This rank's shard.
        books: Node type -> owner (``part_N``) and owner position (``lid_N``) of every id.
        layers: The model's layers, input layer first (``RelationalSAGE.layers``, ``RGCN.layers``).
        input_type: The labelled type whose logits are scored.
        inputs: Node type -> its layer-0 rows.
        peers: Client of the peer ranks (rows of layers >= 1).
        ledger: Evaluation's own ledger.
        owners: Client of the shard owners: the halo's in-degrees of each relation a GCN layer
            normalises by; unused by other models.
        degrees: Relation -> those in-degrees, ``[owned ; 1-hop halo]``, kept by the caller
            between evaluations: fetched (and counted in ``ledger``) by the first evaluation
            only.
        device_layers: The same layers on the trainer's device (``None``: ``layers``), where a
            linear layer's dense part runs, a run of destinations at a time (its sums and own
            rows go up, its outputs come back); the rest runs on the host.
    """

    def __init__(
        self,
        config: EvalConfig,
        *,
        shard: Shard,
        books: dict[str, Any],
        layers: nn.ModuleList,
        input_type: str,
        inputs: dict[str, TypeInput],
        peers: PeerClient,
        ledger: PerTypeLedger,
        owners: Any = None,
        degrees: dict[EdgeType, Tensor] | None = None,
        device_layers: nn.ModuleList | None = None,
    ) -> None:
        self.config, self.shard, self.books = config, shard, books
        self.layers, self.input_type = layers, input_type
        self.device_layers = layers if device_layers is None else device_layers
        first = next(self.device_layers.parameters(), None)
        self.step = StepDevice("cpu" if first is None else first.device)
        self.inputs, self.peers, self.ledger = inputs, peers, ledger
        self.codec = make_codec(config.codec)
        self.types = list(shard.nodes)
        self.num_owned = {t: n.num_owned for t, n in shard.nodes.items()}
        self.halo_lid, self.blocks = one_hop(shard)
        if any(getattr(layer, "uses_in_degree", False) for layer in layers):
            known = {} if degrees is None else degrees
            for et, block in self.blocks.items():
                if et not in known:
                    known[et] = self._degrees(et, owners)
                self.blocks[et] = replace(block, src_in_degree=known[et])
        self.spans = destination_runs(self.blocks, self.num_owned, config)
        self.tables = LayerTables(config.spill_mb)
        self._seconds = 0.0
        self._hits = 0

    def _degrees(self, edge_type: EdgeType, owners: Any) -> Tensor:
        """The relation's whole-graph in-degrees of its sources, ``[owned ; 1-hop halo]``.

        GCN's normalisation: owned from the shard, halo from their owners (one call per owner,
        in the ledger).
        """
        src, lid_H = edge_type[0], self.halo_lid[edge_type[0]]
        owned = np.diff(np.asarray(self.shard.relations[edge_type].indptr, dtype=np.int64))
        part_N, ledger = self.book_of(src).part_N, self.ledger.of(src)
        halo = fetch_degrees(self.shard.part, part_N, lid_H, owners, ledger, edge_type)
        return torch.from_numpy(np.concatenate([owned, halo]))

    def table(self, layer: int, node_type: str) -> int:
        """The number of layer input ``layer`` of ``node_type`` in peer requests."""
        return table_number(layer, self.types.index(node_type), len(self.types))

    # ---- serving peers (the worker's serve_rows encodes) -----------------------------------
    def serve_rows(self, table: int, lid: np.ndarray) -> Tensor:
        """Float rows of owned type-local ``lid`` in table ``table``."""
        layer, index = divmod(int(table), len(self.types))
        if table not in self.tables:
            raise ValueError(
                f"table {table} (layer {layer}, type {self.types[index]!r}) is not computed on "
                f"part {self.shard.part}"
            )
        book = self.book_of(self.types[index])
        pos = np.asarray(book.lid_N[np.asarray(lid, dtype=np.int64)], dtype=np.int64)
        return self.tables.rows(table, pos)

    # ---- one step -----------------------------------------------------------------------------
    @torch.no_grad()
    def run_layer(self, layer: int) -> None:
        """Compute table ``layer + 1`` of every type (this rank's outputs of layer ``layer``).

        Each type's outputs are written span by span into its table's buffer (a spilled file
        when larger than ``EvalConfig.spill_mb``), then published for the peers.
        """
        start = time.perf_counter()
        if layer == 0:
            set_mmap_threshold(EVAL_MMAP_THRESHOLD)  # large temporaries go back when freed
            self.tables.clear()
        release_free_memory()  # training's (or the last layer's) freed temporaries
        self.layers.eval()  # GAT's attention dropout off; the trainer sets training back
        self.device_layers.eval()
        for t in self.types:  # every peer finished reading layer - 1 before this step
            self.tables.pop(self.table(layer - 1, t))
        present = list(self.inputs) if layer == 0 else self.present(layer)
        if self.config.block_mb and self.config.in_place and is_blocked_layer(self.layers[layer]):
            done = self._blocked_tables(layer, present)
        else:
            done = self._span_tables(layer, present)
        for number, table in done.items():
            if layer < len(self.layers) - 1 and not getattr(self.layers[layer], "activates", False):
                table.relu_()  # a PyG model's layer applies its own activation (pyg_user)
            self.tables.publish(number)
        self._seconds += time.perf_counter() - start

    def _span_tables(self, layer: int, present: list[str]) -> dict[int, Tensor]:
        """Layer ``layer``'s output tables, run by run of rows over the whole input rows.

        A linear layer (SAGE mean/sum, GCN) reduces each relation straight out of the whole
        source rows and combines a run's own rows (``_linear_run``); others (GAT, R-GCN) and
        runs under a halo budget get each run's inputs cut (``eval.runs.cut_run``).
        """
        budget = self._budget_rows(layer, present)
        linear = budget is None and self.config.in_place
        reduce = linear_reduce(self.layers[layer]) if linear else None
        if reduce is None:  # the cut path reads one [M_t + H_t, F] table per type
            x_dict = {t: self._rows(layer, t, with_halo=budget is None) for t in present}
            sources = None
        else:  # owned and halo rows stay two tables
            x_dict = {t: self._rows(layer, t, with_halo=False) for t in present}
            halo = {t: self._halo_rows(layer, t, int(x_dict[t].shape[1])) for t in present}
            sources = self._sources(x_dict, halo, reduce)
            del halo
        done: dict[int, Tensor] = {}
        for node_type, spans in self.spans.items():
            number = self.table(layer + 1, node_type)
            rows = self.shard.nodes[node_type].num_owned
            for first, stop in budget_runs(
                self.blocks, self.num_owned, node_type, spans, budget, present
            ):
                if sources is not None and reduce is not None:
                    args = (x_dict, sources, reduce, node_type, first, stop)
                    got = self._linear_run(layer, *args)
                    if got is not None:
                        done[number] = self.tables.buffer(number, rows, int(got.shape[1]))
                        done[number][first:stop] = got
                    eval_tick()
                    continue
                x_span, blocks = cut_run(self.blocks, x_dict, node_type, first, stop)
                if budget is not None:  # the run's own halo rows, fetched for it alone
                    x_span, blocks = with_run_halo(x_span, blocks, self._run_halo(layer))
                got = self.layers[layer](x_span, blocks).get(node_type)
                if got is not None:
                    done[number] = self.tables.buffer(number, rows, int(got.shape[1]))
                    done[number][first:stop] = got
                eval_tick()
        return done

    def _run_halo(self, layer: int) -> Callable[[str, Tensor, int], Tensor]:
        """Rows of a source type's halo at positions, for one run (``with_run_halo``)."""

        def rows(src: str, pos: Tensor, width: int) -> Tensor:
            out = torch.empty(pos.shape[0], width, dtype=torch.float32)
            self._fill_remote(out, layer, src, self.halo_lid[src][pos.numpy()])
            return out

        return rows

    def _sources(
        self, own: dict[str, Tensor], halo: dict[str, Tensor], reduce: str
    ) -> dict[EdgeType, tuple[Tensor, Tensor]]:
        """What each relation reduces: its source type's owned and halo rows.

        For GCN they are scaled once per layer by ``(1 + in-degree) ** -0.5`` of the relation
        (``GCNLayer.aggregate``'s weights).
        """
        out = {}
        for et, block in self.blocks.items():
            if et[0] not in own:
                continue
            x, h = own[et[0]], halo[et[0]]
            if reduce == "gcn":
                assert block.src_in_degree is not None  # fetched at construction for GCN
                s_S = GCNLayer.src_scale(block).to(x.dtype)[:, None]
                m = int(x.shape[0])
                x, h = x * s_S[:m], h * s_S[m:]
            out[et] = (x, h)
        return out

    def _linear_run(
        self,
        layer: int,
        x_dict: dict[str, Tensor],
        sources: dict[EdgeType, tuple[Tensor, Tensor]],
        reduce: str,
        node_type: str,
        first: int,
        stop: int,
    ) -> Tensor | None:
        """A linear layer's outputs for owned ``node_type`` rows ``[first, stop)``.

        Each relation into the type reduces its in-edges of those rows straight out of the
        source rows (no copy of them); the layer combines the sums with the rows' own
        (``forward_from_agg``). ``None``: the layer gives the type no output.
        """
        if node_type not in x_dict:
            return None
        m = stop - first
        agg, blocks = {}, {}
        for et, block in self.blocks.items():
            if et[2] != node_type or et not in sources:
                continue
            lo, hi = int(block.rowptr[first]), int(block.rowptr[stop])
            rowptr, col = block.rowptr[first : stop + 1] - lo, block.col[lo:hi]
            agg[et] = two_table_sum(*sources[et], rowptr, col)
            if reduce == "mean":
                divide_by_degree(agg[et], rowptr.numpy())
            degree = block.src_in_degree  # GCN's: the destinations' own, for the self loop
            blocks[et] = Block(
                num_src=m, num_dst=m, rowptr=rowptr, col=col[:0], e_id=block.e_id[:0],
                src_in_degree=None if degree is None else degree[first:stop],
            )  # fmt: skip
        x_dst = {node_type: x_dict[node_type][first:stop]}
        module = cast(RelationalSAGELayer | RelationalGCNLayer, self.device_layers[layer])
        x_dst, blocks, agg = self.step.put((x_dst, blocks, agg))  # on the host: no copies
        got = module.forward_from_agg(x_dst, blocks, agg).get(node_type)
        return None if got is None else got.to("cpu")

    def _blocked_tables(self, layer: int, present: list[str]) -> dict[int, Tensor]:
        """Layer ``layer``'s output tables, source-blocked (``EvalConfig.block_mb``)."""
        done: dict[int, Tensor] = {}
        own = {t: self._rows(layer, t, with_halo=False) for t in present}

        def halo_rows(src: str) -> Callable[[np.ndarray], Tensor]:
            def rows(pos: np.ndarray) -> Tensor:
                out = torch.empty(pos.shape[0], int(own[src].shape[1]), dtype=torch.float32)
                self._fill_remote(out, layer, src, self.halo_lid[src][pos])
                return out

            return rows

        for node_type in self.spans:
            relations = {
                et: RelationInput(
                    block, own[et[0]], halo_rows(et[0]), int(self.halo_lid[et[0]].shape[0])
                )
                for et, block in self.blocks.items()
                if et[2] == node_type and et[0] in present
            }
            if node_type not in present or not relations:
                continue  # the layer gives the type no output
            number = self.table(layer + 1, node_type)
            rows = self.shard.nodes[node_type].num_owned

            def into(width: int, number: int = number, rows: int = rows) -> Tensor:
                done[number] = self.tables.buffer(number, rows, width)
                return done[number]

            blocked_outputs(
                self.layers[layer], node_type, own[node_type], relations, into,
                block_mb=self.config.block_mb, willneed=willneed_rows,
            )  # fmt: skip
        return done

    def _budget_rows(self, layer: int, present: list[str]) -> int | None:
        """Halo rows a run may hold under ``EvalConfig.halo_mb``.

        ``None``: no budget, or the whole 1-hop halo fits it (then it is fetched once).
        """
        if not self.config.halo_mb:
            return None
        width = max(self._width(layer, t) for t in present) if present else 1
        rows = int(self.config.halo_mb * 2**20) // (4 * max(width, 1))
        total = sum(int(self.halo_lid[t].shape[0]) for t in present)
        return None if rows >= total else max(rows, 1)

    def _width(self, layer: int, node_type: str) -> int:
        if layer == 0:
            return int(np.asarray(self.inputs[node_type].own).shape[1])
        return int(self.owned_table(layer, node_type).shape[1])

    def present(self, layer: int) -> list[str]:
        """The types with a table ``layer`` on this rank.

        A layer gives a type no output when no relation leads into it.
        """
        return [t for t in self.types if self.table(layer, t) in self.tables]

    def _rows(self, layer: int, node_type: str, *, with_halo: bool = True) -> Tensor:
        """``[M_t + H_t, F]``: the owned rows of table ``layer``, then the halo rows.

        Without ``with_halo`` only the owned rows (a halo budget fetches each run's own).
        """
        if layer == 0:
            own = self.inputs[node_type].own
            with warnings.catch_warnings():  # a read-only memory map; evaluation never writes it
                warnings.simplefilter("ignore", UserWarning)
                own_MF = torch.from_numpy(np.asarray(own, dtype=np.float32))
        else:
            own_MF = self.tables[self.table(layer, node_type)]
        lid_H = self.halo_lid[node_type]
        if not lid_H.shape[0] or not with_halo:  # the owned rows as they are, no copy
            return own_MF
        m = int(own_MF.shape[0])
        out = torch.empty(m + lid_H.shape[0], int(own_MF.shape[1]), dtype=torch.float32)
        out[:m] = own_MF
        self._fill_remote(out[m:], layer, node_type, lid_H)
        return out

    def _halo_rows(self, layer: int, node_type: str, width: int) -> Tensor:
        """``[H_t, F]``: the 1-hop halo rows of table ``layer``, from the cache and owners."""
        lid_H = self.halo_lid[node_type]
        out = torch.empty(lid_H.shape[0], width, dtype=torch.float32)
        self._fill_remote(out, layer, node_type, lid_H)
        return out

    @property
    def num_layers(self) -> int:
        """``L``: the last table (the model's outputs) is table ``L``."""
        return len(self.layers)

    def owned_table(self, layer: int, node_type: str | None) -> Tensor:
        """``[M_t, H]`` this rank's table ``layer`` of ``node_type``."""
        return self.tables[self.table(layer, _named(node_type))]

    def book_of(self, node_type: str | None) -> Book:
        """The book of ``node_type``."""
        book: Book = self.books[_named(node_type)]
        return book

    def rows_of(self, layer: int, node_type: str | None, lid_K: np.ndarray) -> Tensor:
        """``[K, H]`` rows of table ``layer`` of ``node_type`` for any type-local ``lid_K``.

        Owned rows come from this rank's table, the rest from their owning peers (one request
        per peer and message piece, counted in the type's evaluation ledger).
        """
        t = _named(node_type)
        return rows_of(
            self.owned_table(layer, t), lid_K, self.book_of(t), part=self.shard.part,
            fill=lambda out, ids, _: self._fill_remote(out, layer, t, ids),
        )  # fmt: skip

    def _fill_remote(self, out_KF: Tensor, layer: int, node_type: str, lid_K: np.ndarray) -> None:
        """Write the rows of ``lid_K`` that other parts own into ``out_KF`` (request order).

        Layer-0 rows the type's halo cache holds are read from it; only the rest are fetched.
        """
        at_K = None
        cache = self.inputs[node_type].cache if layer == 0 and node_type in self.inputs else None
        if cache is not None and lid_K.shape[0]:
            at_K, hits = fill_cached(out_KF, lid_K, cache)
            self._hits += hits
            lid_K = lid_K[at_K]
        fill_remote(
            out_KF, lid_K, self.book_of(node_type).part_N[lid_K], part=self.shard.part,
            message_mb=self.config.message_mb, ledger=self.ledger.of(node_type),
            fetch=lambda req: self._fetch(layer, node_type, req), at_K=at_K,
        )  # fmt: skip

    def link_report(
        self,
        sums: dict[str, np.ndarray],
        *,
        with_logits: bool = False,
        node_type: str | None = None,
    ) -> RankEval:
        """A ``RankEval`` of link sums; keeps the tables.

        ``with_logits``: also the owned embeddings of ``node_type`` (the links' source type).
        Peers may still read the last table while they score; the next layer 0 drops it.
        """
        set_mmap_threshold(TRAIN_MMAP_THRESHOLD)
        logits = None
        if with_logits:
            lid_M = np.asarray(self.shard.nodes[_named(node_type)].owned_lid, dtype=np.int64)
            logits = (lid_M, self.owned_table(len(self.layers), node_type).numpy().copy())
        return self._rank_eval({}, {}, {}, logits=logits, link=sums)

    def _rank_eval(
        self,
        confusion: dict[str, np.ndarray],
        scores: dict[str, np.ndarray],
        labels: dict[str, np.ndarray],
        *,
        logits: tuple[np.ndarray, np.ndarray] | None = None,
        link: dict[str, np.ndarray] | None = None,
    ) -> RankEval:
        return RankEval(
            rank=self.shard.part,
            confusion=confusion,
            scores=scores,
            labels=labels,
            traffic=self.ledger.snapshot(),
            cache_hits=self._hits,
            halo_rows=sum(int(h.shape[0]) for h in self.halo_lid.values()),
            seconds=self._seconds,
            logits=logits,
            link=link or {},
        )

    def _fetch(
        self, layer: int, node_type: str, requests: dict[int, np.ndarray]
    ) -> tuple[dict[int, Any], Codec]:
        """One request per owner: layer 0 from the type's owners, later layers from peers."""
        if layer == 0:
            source = self.inputs[node_type]
            answers = source.client.fetch_encoded_many(requests, source.codec, node_type)
            return answers, source.codec
        table = self.table(layer, node_type)
        return self.peers.rows_many(table, requests, self.codec), self.codec

    # ---- the result ---------------------------------------------------------------------------
    def report(self, splits: tuple[str, ...], *, with_logits: bool = False) -> RankEval:
        """The confusion matrices (and binary scores) of ``splits``; frees the tables."""
        set_mmap_threshold(TRAIN_MMAP_THRESHOLD)  # training's allocation pattern again
        nodes = self.shard.nodes[self.input_type]
        if self.input_type not in self.present(len(self.layers)):
            raise ValueError(
                f"the model gives no output for node type {self.input_type!r}: no relation "
                "leads into it; choose a seed type with in-edges"
            )
        if "y" not in nodes.data:
            raise ValueError(f"part {self.shard.part} lacks y of {self.input_type!r}")
        logits_MC = self.owned_table(len(self.layers), self.input_type)
        masks = {s: nodes.data.get(f"{s}_mask") for s in splits}
        y_M = np.asarray(nodes.data["y"], dtype=np.int64)
        confusion, scores, labels = split_counts(logits_MC, y_M, masks)
        lid_M = np.asarray(nodes.owned_lid, dtype=np.int64)
        logits = (lid_M, logits_MC.numpy().copy()) if with_logits else None
        out = self._rank_eval(confusion, scores, labels, logits=logits)
        del logits_MC  # a spilled table is unmapped with its last reference
        self.release()
        return out

    def owned(self, layer: int) -> dict[str, Tensor]:
        """Every type's owned rows of table ``layer`` (types the layer gave outputs)."""
        return {t: self.owned_table(layer, t) for t in self.present(layer)}

    def release(self) -> None:
        """Free the tables (spilled ones are unmapped)."""
        self.tables.clear()
        release_free_memory()


def _named(node_type: str | None) -> str:
    """A typed table's node type (a typed graph's rows always name theirs)."""
    if node_type is None:
        raise ValueError("a typed evaluation's rows belong to a node type; pass node_type")
    return node_type
