"""Sharded *sampled* evaluation of a heterogeneous run: each rank scores the nodes it owns.

Exact layer-wise inference is not built for heterogeneous graphs. Instead each rank samples,
with the training fanouts, the typed neighbourhood of its own labelled nodes of the seed type
(val and test in full; train up to ``HeteroConfig.eval_train_seeds`` nodes, a seeded subset),
in batches of the training batch size, and predicts them with dropout off. Batch seeds are a
function of ``(run seed, rank, split, batch)`` only, so an evaluation of the same weights is
the same on any executor; it is *not* the same between runs with another part count (other
nodes share a batch), so 1-part and P-part evaluations of one model agree in expectation only.
Ranks return confusion matrices (``RankEval``); the driver adds them (``combine_evals``).

Evaluation has its own sources and ledger (no cache: every halo row is fetched), so training
traffic figures are unchanged by it.

Shape legend: ``S`` nodes of a split on this rank, ``B`` a batch, ``C`` classes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from gnnsys.train.evaluate import RankEval
from gnnsys.train.hetero.trainer import BoundSampler, TypedInputs
from gnnsys.train.metrics import confusion_matrix
from gnnsys.train.remote.ledger import TypedLedger
from gnnsys.train.trainer import batch_seed_for

__all__ = ["EvalSeeds", "evaluate_rank"]

_SPLIT_KEYS = {"train": 0x7A, "val": 0x7B, "test": 0x7C}


@dataclass(frozen=True, slots=True)
class EvalSeeds:
    """A rank's labelled nodes of the seed type per split: ``(lid_S, y_S)``."""

    by_split: dict[str, tuple[Tensor, Tensor]]

    @classmethod
    def of(
        cls, data: dict[str, np.ndarray], owned_lid: np.ndarray, *, train_cap: int, seed: int
    ) -> EvalSeeds:
        """From a shard's owned rows (``y`` and ``{split}_mask``) and owned ids.

        Args:
            data: The seed type's owned arrays.
            owned_lid: ``[M]`` their type-local ids.
            train_cap: Train nodes kept (a seeded subset; 0 keeps all).
            seed: Seed of that subset.
        """
        out = {}
        y = np.asarray(data["y"], dtype=np.int64)
        for split in _SPLIT_KEYS:
            mask = data.get(f"{split}_mask")
            pos = np.zeros(0, dtype=np.int64) if mask is None else np.flatnonzero(mask)
            if split == "train" and train_cap and pos.shape[0] > train_cap:
                rng = np.random.default_rng(np.random.SeedSequence([seed, 0x7A]))
                pos = np.sort(rng.choice(pos, size=train_cap, replace=False))
            lid = torch.from_numpy(np.asarray(owned_lid, dtype=np.int64)[pos])
            out[split] = (lid, torch.from_numpy(y[pos]))
        return cls(out)


def evaluate_rank(
    model: nn.Module,
    sampler: BoundSampler,
    inputs: TypedInputs,
    seeds: EvalSeeds,
    splits: tuple[str, ...],
    *,
    ledger: TypedLedger,
    num_classes: int,
    batch_size: int,
    seed: int,
    rank: int,
) -> RankEval:
    """This rank's confusion matrix per split (see the module docstring)."""
    start = time.perf_counter()
    before = ledger.snapshot()
    was_training = model.training
    model.eval()
    confusion = {}
    try:
        for split in splits:
            lid_S, y_S = seeds.by_split[split]
            pred = _predict(model, sampler, inputs, lid_S, batch_size, seed, rank, split)
            confusion[split] = confusion_matrix(y_S.numpy(), pred, num_classes)
    finally:
        model.train(was_training)
    return RankEval(
        rank=rank,
        confusion=confusion,
        scores={},
        labels={},
        traffic=ledger.snapshot() - before,
        cache_hits=0,
        halo_rows=0,
        seconds=time.perf_counter() - start,
    )


def _predict(
    model: nn.Module,
    sampler: BoundSampler,
    inputs: TypedInputs,
    lid_S: Tensor,
    batch_size: int,
    seed: int,
    rank: int,
    split: str,
) -> np.ndarray:
    """``[S]`` predicted classes of ``lid_S``, batch by batch."""
    preds = [np.zeros(0, dtype=np.int64)]
    for b, lid_B in enumerate(torch.split(lid_S, batch_size)):
        batch_seed = batch_seed_for(seed, rank, 1_000_000 + _SPLIT_KEYS[split], b)
        sub = sampler.sample(lid_B, seed=batch_seed)
        x_dict, _ = inputs.fetch(sub)
        with torch.no_grad():
            logits_BC = model(x_dict, sub.blocks)[sampler.input_type][: sub.batch_size]
        preds.append(logits_BC.argmax(-1).numpy())
    return np.concatenate(preds)
