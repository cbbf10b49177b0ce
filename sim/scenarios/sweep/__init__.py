"""A `-m` sweep: how its points are composed and run, and its own outputs, written by a Hydra
callback once its last run has ended.

    points.py        which run dirs of the sweep dir are this sweep's; the rest set aside
    table.py         sweep.parquet / .csv from the run dirs, progress lines, resume marks
    report.py        report.md: trade-off tables, a recommendation, the engine's defaults
    plots.py         pareto.png and goodput.png, their labels and legends placed to fit
    defaults.py      what every run sets against the engine's own values, and why
    load.py          what a sweep of the load alone shows (SLO limit, latency knee, overload)
    callback.py      SweepTable, the Hydra callback: the sweep dir made this sweep's when it
                     starts, the table and report written when it ends
    compose.py       each point's config, a copy of one composition per choice of groups
    singletons.py    a worker process keeps Hydra's plugin registry between its points

May import everything below sim/scenarios, and sim/cli.py (a run's overrides to its config).
"""
