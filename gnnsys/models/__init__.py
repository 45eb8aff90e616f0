"""Stage: models."""
