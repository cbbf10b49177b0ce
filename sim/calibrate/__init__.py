"""Calibration: measured kernel tables read into one frame of observations, fitted into per-GPU
efficiency profiles (calibration/profiles/<gpu>.json) with their held-out error
(calibration/fit-report.md); `python -m sim.calibrate` (__main__.py) runs it.

    kernel_tables.py, layer_tables.py, observations.py   reading tables of every format
    fitting.py       one kernel family's surfaces; gpu.py one GPU's profile
    check.py         the cost model's prices against a table (scenario=kernel_check too)
    report.py        the fit report

May import sim.report, sim.run and everything below (and the root).
"""
