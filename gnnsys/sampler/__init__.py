"""Stage: sampler."""
