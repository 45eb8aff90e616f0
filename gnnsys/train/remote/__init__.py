"""The data plane between processes: owner client and server, routed sources, halo, ledger."""
