"""The control plane: run, coordinator, worker groups (Ray, in-process), failures, checkpoints."""
