"""sim/report: TODO."""
