"""sim/scenarios/validate: TODO."""
