"""sim: a discrete-event simulator of LLM serving engines.

Its packages are layers, each importing only from those before it: specs, engines, workload, kv,
schedulers, cost, run, report, calibrate, scenarios (docs/architecture.md is the reading guide).
`python -m sim` is the entry (sim/__main__.py, sim/cli.py).
"""

__version__ = "0.1.0"
