"""Stage: cache/codecs."""
