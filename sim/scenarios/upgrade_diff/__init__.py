"""sim/scenarios/upgrade_diff: TODO."""
