"""sim/schedulers: TODO."""
