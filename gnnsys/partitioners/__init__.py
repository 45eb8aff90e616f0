"""Stage: partitioners."""
