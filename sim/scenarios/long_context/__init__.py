"""sim/scenarios/long_context: TODO."""
