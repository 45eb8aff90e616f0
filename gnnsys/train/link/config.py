"""``LinkConfig``: the link-prediction task of a run (``--task link``); ``None`` = node task."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LinkConfig"]


@dataclass(frozen=True, kw_only=True, slots=True)
class LinkConfig:
    """How the ranks train and score links (the split itself is ``DataConfig.link_split``)."""

    decoder: str = "dot"
    """Pair scorer of ``gnnsys.models.DECODERS``: ``dot`` (default) or ``mlp`` (``--decoder``)."""
    neg_per_pos: int = 1
    """Training negatives per positive link, destinations uniform over all ``N`` nodes
    (``--neg-per-pos``); most are owned by other ranks, so their features come through the
    halo path (cache and codec apply)."""
    score_chunk: int = 256
    """Held-out links scored at once in evaluation: bounds the ``[chunk, Q, H]`` negative
    embeddings gathered per step (64 MiB at Q = 1000, H = 64)."""

    def __post_init__(self) -> None:
        from gnnsys.models import DECODERS

        if self.decoder not in DECODERS:
            raise ValueError(f"--decoder {self.decoder!r}; choose one of {sorted(DECODERS)}")
        if self.neg_per_pos < 1:
            raise ValueError(f"--neg-per-pos {self.neg_per_pos}; choose >= 1")
        if self.score_chunk < 1:
            raise ValueError(f"score_chunk={self.score_chunk}; choose >= 1")
