"""Stage: cache."""
