"""sim/kv: TODO."""
