"""What a task run with `calibration=PATH` says of it: summary.json `calibration` (the
deployment matched and its terms, or why none matched; for validate each case's) and one
console line. Each simulation applies the terms itself (sim/run/setup.py) and records them in
its own summary (sim/run/colocated.py); this is the task-level account, added to the
summary.json the scenario wrote."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from sim.config import SimConfig
from sim.errors import UserError
from sim.run.calibration import describe, run_record
from sim.run.outputs import write_json
from sim.run.setup import Setup
from sim.workload.generate import generate

SELF_RECORDED = ("simulate",)  # tasks whose summary.json is one simulation's, which records it


def record(cfg: SimConfig, result) -> dict | None:
    """The task's `calibration` record (None without calibration=, or where the task's own
    summary already holds it)."""
    if not cfg.calibration or cfg.task in SELF_RECORDED:
        return None
    if cfg.task == "validate":
        calibrated, uncalibrated = {}, {}
        for case in result.results:
            rec = case.calibration
            if rec and isinstance(rec.get("deployment"), dict):
                calibrated[case.id] = describe(rec["deployment"])
            elif rec:
                uncalibrated[case.id] = rec.get("reason", "")
        return {"path": cfg.calibration, "calibrated": calibrated, "uncalibrated": uncalibrated}
    if cfg.task == "upgrade_diff":  # every simulation runs the before release's settings with
        # the changes applied over them (upgrade_diff/changes.py, mixture): all priced alike
        rec = _of(replace(cfg, engine=cfg.upgrade.before))
        if rec.get("deployment") is not None:
            rec["applies_to"] = (
                f"every simulation of the upgrade, {cfg.upgrade.before} -> {cfg.upgrade.after} "
                "and their mixtures: the what-if changes the engine, not the machine"
            )
        return rec
    return _of(cfg)


def _of(cfg: SimConfig) -> dict:
    """The record of the task's deployment, with where its workload leaves the envelope."""
    try:
        setup = Setup.from_config(cfg)
        workload = generate(cfg.workload, np.random.default_rng(cfg.seed))
    except UserError as exc:  # (the task ran other models or settings than the top level's)
        return {"path": cfg.calibration, "deployment": None, "reason": str(exc)}
    return run_record(setup.calibration, workload, None) if setup.calibration else {}


def stamp(out_dir: Path, rec: dict) -> None:
    """Add `calibration` to the summary.json the task wrote."""
    path = out_dir / "summary.json"
    if not path.is_file():
        return
    summary = json.loads(path.read_text())
    summary["calibration"] = rec
    write_json(path, summary)


def line(rec: dict | None) -> str | None:
    """The console's line about the run's calibration."""
    if not rec:
        return None
    if "calibrated" in rec:
        n, m = len(rec["calibrated"]), len(rec["uncalibrated"])
        return f"calibration: {n} cases calibrated by {rec['path']}, {m} matched no deployment"
    if not isinstance(rec.get("deployment"), dict):
        return f"calibration: {rec.get('reason', 'no deployment matched')}"
    terms = ", ".join(f"{k} {v:.4g}" for k, v in rec.get("terms", {}).items())
    text = f"calibration: {describe(rec['deployment'])}: {terms}"
    if rec.get("note"):
        text += f" ({rec['note']})"
    if rec.get("applies_to"):
        text += f"; applied to {rec['applies_to']}"
    for o in rec.get("outside_envelope") or ():
        text += f"; outside the calibrated {o['dimension']}: {o['value']:.4g} is {o['by']}"
    return text
