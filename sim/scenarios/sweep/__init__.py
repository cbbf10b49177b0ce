"""sim/scenarios/sweep: TODO."""
