"""Stage: kernels."""
