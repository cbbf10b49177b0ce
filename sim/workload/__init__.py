"""sim/workload: TODO."""
