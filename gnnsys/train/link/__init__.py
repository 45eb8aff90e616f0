"""Link prediction in the runtime: the link trainer and the sharded link scoring."""
