"""sim/specs: TODO."""
