"""References for tests and benchmarks, never used by the runtime.

``gnnsys.testing.in_memory`` builds the runtime's trainer over a whole in-memory ``Graph`` (no
store, no Ray); ``gnnsys.testing.reference`` computes whole-graph exact outputs. Tests compare
the distributed runtime with them, and the parity benchmarks train with them.
"""
