"""sim/run: TODO."""
