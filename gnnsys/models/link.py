"""Link-prediction heads: an encoder's node embeddings scored pairwise (single device).

``LinkModel`` wraps any block encoder of ``gnnsys.models`` (its output width is the embedding
width ``H``) and a decoder from :data:`DECODERS` that turns two embedding rows into one logit:

- ``dot``: ``<h_u, h_v>`` (no parameters; PyG's ``link_pred.py`` and GraphSAGE's default);
- ``mlp``: ``MLP(h_u * h_v)``, two linear layers with ReLU (OGB's ``LinkPredictor``).

Both are symmetric in ``u`` and ``v``. Training and the checkpoint see one module, so the
gradient allreduce covers the decoder's parameters too.

Shape legend: ``K`` scored pairs, ``H`` embedding width, ``N``/``B`` as in ``models.base``.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

from gnnsys.models.base import BlockModel
from gnnsys.types import Block

__all__ = ["DECODERS", "DotDecoder", "LinkModel", "MLPDecoder", "build_decoder"]


class DotDecoder(nn.Module):
    """``score(u, v) = <h_u, h_v>``."""

    def forward(self, h_src_KH: Tensor, h_dst_KH: Tensor) -> Tensor:
        """``[K, H], [K, H] -> [K]`` logits (broadcasts over leading dims)."""
        return (h_src_KH * h_dst_KH).sum(-1)


class MLPDecoder(nn.Module):
    """``score(u, v) = w2 . relu(W1 (h_u * h_v) + b1) + b2``.

    Args:
        width: ``H``.
    """

    def __init__(self, width: int) -> None:
        super().__init__()
        self.lin1 = nn.Linear(width, width)
        self.lin2 = nn.Linear(width, 1)

    def forward(self, h_src_KH: Tensor, h_dst_KH: Tensor) -> Tensor:
        """``[K, H], [K, H] -> [K]`` logits (broadcasts over leading dims)."""
        out: Tensor = self.lin2(self.lin1(h_src_KH * h_dst_KH).relu()).squeeze(-1)
        return out


DECODERS: dict[str, type[nn.Module]] = {"dot": DotDecoder, "mlp": MLPDecoder}
"""Decoder registry: name -> class."""


def build_decoder(name: str, width: int) -> nn.Module:
    """The decoder ``name`` for embeddings ``width`` wide.

    Raises:
        ValueError: Unknown name.
    """
    if name == "dot":
        return DotDecoder()
    if name == "mlp":
        return MLPDecoder(width)
    raise ValueError(f"decoder={name!r}; choose one of {sorted(DECODERS)}")


class LinkModel(nn.Module):
    """An encoder plus a decoder; ``forward`` is the encoder's (embeddings of the seeds).

    Args:
        encoder: A block model mapping ``F`` features to ``H``-wide embeddings.
        decoder: Scores two ``H``-wide rows.
    """

    def __init__(self, encoder: BlockModel, decoder: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder

    def forward(self, x_NF: Tensor, blocks: Sequence[Block]) -> Tensor:
        """``[B, H]`` embeddings of the last block's destinations (``BlockModel.forward``)."""
        out: Tensor = self.encoder(x_NF, blocks)
        return out

    def score(self, h_src_KH: Tensor, h_dst_KH: Tensor) -> Tensor:
        """``[K]`` logits of pairs of embedding rows."""
        out: Tensor = self.decoder(h_src_KH, h_dst_KH)
        return out
