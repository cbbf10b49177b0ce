"""sim/scenarios: TODO."""
