"""sim/calibrate: TODO."""
