"""CLI verbs, one module each; ``gnnsys.cli`` discovers them (``bench_*``: ``bench`` kinds)."""
