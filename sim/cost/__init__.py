"""sim/cost: TODO."""
