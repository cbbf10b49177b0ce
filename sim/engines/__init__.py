"""sim/engines: TODO."""
