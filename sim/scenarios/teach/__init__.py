"""sim/scenarios/teach: TODO."""
