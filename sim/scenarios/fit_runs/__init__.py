"""Calibrating a deployment to its own benchmark runs (`python -m sim.calibrate --runs FILE
--out PATH`): the runs read (a validation case file, `vllm bench serve` or GuideLLM JSON with the
deployment given by overrides: inputs.py), grouped by deployment, the terms of
sim/run/calibration.py fitted by bounded least squares with the simulator in the loop (fit.py),
written with their uncertainty, residuals, leave-one-run-out errors and envelope, and a report
with plots (output.py); the held-out study of the visible validation suite (held_out.py).

Runs are validation cases, simulated as scenario=validate simulates them: this package imports
sim.scenarios.validate (cases, importers, run_case) by name."""
