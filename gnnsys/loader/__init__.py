"""Stage: loader."""
