"""Fixtures for the cache tests: a fake sampler replaying a seeded, skewed access distribution."""

from __future__ import annotations

import torch

from gnnsys.types import SampledSubgraph


class TraceSampler:
    """A ``Sampler`` whose ``n_id`` is the seeds plus ``width`` gids drawn by popularity.

    ``popularity_N`` is a weight per gid; ``sample`` draws without replacement with a generator
    seeded by ``seed``, so the access trace is skewed and reproducible.
    """

    def __init__(self, popularity_N: torch.Tensor, width: int) -> None:
        self.popularity_N = popularity_N
        self.width = width

    def sample(self, seed_gid: torch.Tensor, *, seed: int) -> SampledSubgraph:
        gen = torch.Generator().manual_seed(seed)
        drawn = torch.multinomial(self.popularity_N, self.width, generator=gen)
        n_id = torch.unique(torch.cat([seed_gid, drawn]))
        return SampledSubgraph(
            n_id=n_id,
            blocks=(),
            batch_size=int(seed_gid.shape[0]),
            num_sampled_nodes=(int(n_id.shape[0]),),
            num_sampled_edges=(0,),
        )


def zipf(num_nodes: int, alpha: float, seed: int) -> torch.Tensor:
    """Zipf weights over a seeded random permutation of the gids."""
    gen = torch.Generator().manual_seed(seed)
    ranks = torch.randperm(num_nodes, generator=gen).double() + 1.0
    return ranks.pow(-alpha)
