"""sim/scenarios/capacity: TODO."""
