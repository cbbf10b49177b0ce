"""A `-m` sweep's own outputs, written by a Hydra callback once its last run has ended.

    table.py         sweep.parquet / .csv from the run dirs, progress lines, resume marks
    report.py        report.md: trade-off tables, Pareto and goodput plots, a recommendation
    load.py          what a sweep of the load alone shows (SLO limit, latency knee, overload)
    callback.py      SweepTable, the Hydra callback that writes both when the sweep ends

May import everything below sim/scenarios, and sim/cli.py (a run's overrides to its config).
"""
