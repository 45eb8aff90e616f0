"""Heterogeneous training (``gnnsys train synthetic:mag``); see docs/heterogeneous.md."""
