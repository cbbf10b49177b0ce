"""sim/scenarios/disagg: TODO."""
