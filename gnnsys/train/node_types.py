"""``NodeTypesConfig``: the node-type settings of a run (``RunConfig.node_types``).

A heterogeneous dataset or store sets it; a homogeneous run leaves it ``None`` and the runtime
takes its one type (``gnnsys.train.rank.RankLayout.of``: ``NodeTypesConfig(model=<the run's
model>, input_type=ONE_TYPE)``). The run's other stage configs keep their meaning:
``sampler.fanouts`` is the fanout list of every relation unless ``fanouts`` names one per
relation, ``model.hidden`` / ``model.dropout`` size the model, ``codec.name`` is one codec or a
per-type spec (``paper=int8,*=fp16``, ``gnnsys.cache.codecs.PerTypeCodecConfig``),
``cache.policy`` / ``cache.ratio`` / ``cache.mb`` budget the halo feature caches, and
``trainer``, ``loop``, ``failure`` and ``eval`` drive the loop.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NodeTypesConfig", "parse_relation_fanouts"]


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeTypesConfig:
    """Model, per-relation fanouts, embeddings and evaluation of a heterogeneous run."""

    model: str = "sage"
    """``sage`` (``RelationalSAGE``), ``gat`` (``RelationalGAT``), ``rgcn`` (``RGCN``; every type
    then has one width) or ``gcn`` (``RelationalGCN``: every relation from a type to itself, as a
    homogeneous graph's one relation)."""
    input_type: str = "paper"
    """The labelled node type whose train nodes are the seeds."""
    fanouts: tuple[tuple[str, tuple[int, ...]], ...] = ()
    """``("src__rel__dst", fanouts)`` pairs overriding ``sampler.fanouts`` for a relation."""
    embedding_dim: int = 0
    """Width of the learnable embeddings of featureless types; 0: the featured type's width."""
    embedding_optimizer: str = "sparse_adam"
    """Sparse optimizer of the embeddings: ``sparse_adam`` (torch's SparseAdam rule) or
    ``sparse_adagrad`` (DGL's); see ``gnnsys.models.sparse_embedding``."""
    embedding_lr: float = 0.0
    """Learning rate of the embeddings; 0: the trainer's ``lr``."""

    def __post_init__(self) -> None:
        from gnnsys.models.registry import REGISTRY

        if self.model not in REGISTRY:
            raise ValueError(f"heterogeneous model {self.model!r}; choose one of {list(REGISTRY)}")
        if self.embedding_optimizer not in ("sparse_adam", "sparse_adagrad"):
            raise ValueError(
                f"embedding_optimizer={self.embedding_optimizer!r}; choose sparse_adam or "
                "sparse_adagrad"
            )
        if not self.embedding_lr >= 0:
            raise ValueError(f"embedding_lr={self.embedding_lr}; choose >= 0 (0: the run's lr)")
        if self.embedding_dim < 0:
            raise ValueError(
                f"embedding_dim={self.embedding_dim}; choose >= 0 (0: the featured width)"
            )
        for name, fanouts in self.fanouts:
            if len(name.split("__")) != 3 or any(f < -1 for f in fanouts):
                raise ValueError(
                    f"fanouts for {name!r}: name a relation as src__rel__dst and give "
                    "fanouts >= -1, e.g. paper__cites__paper=10,5"
                )

    def fanouts_of(
        self, edge_types: list[tuple[str, str, str]], default: tuple[int, ...]
    ) -> dict[tuple[str, str, str], tuple[int, ...]]:
        """Fanouts per relation of the store: the overrides, else ``default``.

        Raises:
            ValueError: An override names a relation the store does not have.
        """
        named = dict(self.fanouts)
        unknown = sorted(set(named) - {"__".join(et) for et in edge_types})
        if unknown:
            have = ["__".join(et) for et in edge_types]
            raise ValueError(f"--fanouts names relations {unknown} the store lacks; have {have}")
        return {et: tuple(named.get("__".join(et), default)) for et in edge_types}


def parse_relation_fanouts(
    text: str,
) -> tuple[tuple[int, ...], tuple[tuple[str, tuple[int, ...]], ...]]:
    """``--fanouts`` of a heterogeneous run: ``15,10`` (every relation) or per relation.

    Per relation: ``src__rel__dst=10,5;...`` entries separated by ``;``, optionally with a bare
    list for the rest, e.g. ``15,10;paper__cites__paper=5,5``.

    Returns:
        ``(default list or (), per-relation overrides)``.

    Raises:
        ValueError: A malformed entry, naming it.
    """
    default: tuple[int, ...] = ()
    named: list[tuple[str, tuple[int, ...]]] = []
    for entry in (e.strip() for e in text.split(";") if e.strip()):
        name, _, values = entry.rpartition("=")
        try:
            fanouts = tuple(int(f) for f in values.split(","))
        except ValueError as err:
            raise ValueError(
                f"--fanouts entry {entry!r}; use 15,10 or src__rel__dst=15,10 entries joined by ;"
            ) from err
        if name:
            named.append((name, fanouts))
        else:
            default = fanouts
    return default, tuple(named)
