"""Stage: train."""
