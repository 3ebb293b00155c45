"""``fluvial verify``: the exactly-once fault matrix, runnable on demand with a seed."""
