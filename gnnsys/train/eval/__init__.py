"""Exact evaluation, layer by layer and sharded: every rank computes its own nodes' outputs.

``evaluate`` holds the settings (``EvalConfig``) and results (``RankEval``); ``sharded`` the
evaluator of one rank (every node type's tables); ``runs`` cuts a layer into runs of
destinations; ``blocked`` runs a layer source-blocked; ``memory`` keeps the layer tables
(in memory or spilled); ``rows`` reads any ids' rows from their owners.
"""
