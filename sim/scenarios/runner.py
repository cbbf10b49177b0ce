"""Running any `task=` through its Scenario (sim/scenarios/protocol.py), single run or sweep.

    python -m sim ...      sim/__main__.py checks every run's config up front (check), then
                           Hydra calls run_task once per run (each point of a -m sweep)
    run_task(cfg)          the run dir locked for this run (another run there is refused, in
                           one line naming it: sim/run/rundir.py), marked INCOMPLETE while the
                           task runs; in a sweep, a run dir that already finished this very
                           configuration is not run again (an interrupted sweep resumes,
                           sim/scenarios/sweep/table.py); then scenario.run, write, the files an
                           earlier run left there and this one did not write removed, brief;
                           the summary returned

The sweep's own outputs (sweep.parquet, report.md) come from the Hydra callback of
sim/scenarios/sweep/table.py when the last run has ended.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing as mp
import shlex
import signal
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from sim.cli import to_sim_config
from sim.config import SimConfig
from sim.errors import UserError
from sim.report.console import ProgressBar, ProgressLines
from sim.run import calibration
from sim.run.findings import warning_line
from sim.run.outputs import INCOMPLETE, mark_complete, mark_incomplete
from sim.run.rundir import RunDir
from sim.scenarios import calibrated
from sim.scenarios.protocol import Scenario
from sim.scenarios.sweep.table import finished_summary, mark_finished, progress_line

# What a task reads back from an earlier run in its run dir, kept whatever ran there before:
# upgrade_diff's outcome of each simulation, by a digest of its inputs (a rerun resumes).
KEEPS = {"upgrade_diff": ("simulations",)}


def scenario_for(task: str) -> Scenario:
    """The scenario a task names. Each import is here, not at the top: a run loads only its
    own scenario's stack (plotting, other scenarios), which keeps `python -m sim` quick."""
    match task:
        case "simulate":
            from sim.scenarios.simulate import Simulate

            return Simulate()
        case "show_engine":
            from sim.scenarios.show_engine import ShowEngine

            return ShowEngine()
        case "kernel_check":
            from sim.scenarios.kernel_check import KernelCheck

            return KernelCheck()
        case "validate":
            from sim.scenarios.validate.scenario import Validate

            return Validate()
        case "upgrade_diff":
            from sim.scenarios.upgrade_diff.scenario import UpgradeDiff

            return UpgradeDiff()
        case "long_context":
            from sim.scenarios.long_context.scenario import LongContext

            return LongContext()
        case "capacity":
            from sim.scenarios.capacity.scenario import Capacity

            return Capacity()
        case "teach":
            from sim.scenarios.teach.scenario import Teach

            return Teach()
        case "disagg":
            from sim.scenarios.disagg.scenario import Disagg

            return Disagg()
    raise ValueError(f"unknown task {task!r}")  # config.py refuses it before this


def check(cfg: SimConfig) -> None:
    """Everything the task can refuse before anything runs (a UserError says what and how)."""
    if cfg.calibration:  # the file read and checked once, before any simulation
        calibration.read(cfg.calibration)
    scenario_for(cfg.task).check(cfg)


def run_task(cfg: DictConfig) -> dict:
    """Run the task into Hydra's run dir and return its summary."""
    hc = HydraConfig.get()
    sim_cfg = to_sim_config(cfg, hc.overrides.task)
    out_dir = Path(hc.runtime.output_dir)
    sweeping = hc.mode == RunMode.MULTIRUN
    if sim_cfg.output.report is None:  # plots for a single run; a sweep's report covers its points
        sim_cfg = replace(sim_cfg, output=replace(sim_cfg.output, report=not sweeping))
    config = asdict(sim_cfg)
    sweeper = getattr(hc, "sweeper", None)
    params = sweeper.get("params") if sweeper is not None else None
    if not sweeping and params:
        print(
            f"note: scenario={hc.runtime.choices.get('scenario')} is a sweep over "
            f"{', '.join(params)}; this ran one point of it. Add -m to run the sweep.",
            file=sys.stderr,
        )
    if sweeping and mp.parent_process() is not None:  # a point in a launcher's worker
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the sweep's: sim/__main__.py
    run_dir = RunDir.claim(out_dir, f"python -m sim {shlex.join(hc.overrides.task)}")
    try:
        if sweeping and (done := finished_summary(out_dir, config)) is not None:
            print(f"{out_dir}: already finished, not run again")
            return done
        run_dir.begin()
        return _run_marked(sim_cfg, out_dir, sweeping, run_dir, config, hc)
    finally:
        run_dir.release()


def _run_marked(sim_cfg: SimConfig, out_dir: Path, sweeping: bool, run_dir: RunDir, config, hc):
    """The task, with the run dir marked INCOMPLETE until every output is written."""
    mark_incomplete(out_dir, "its task is running (or the process running it was killed)")
    try:
        summary = _run(scenario_for(sim_cfg.task), sim_cfg, out_dir, sweeping, run_dir)
    except KeyboardInterrupt:
        _mark(out_dir, "interrupted (Ctrl-C) before its outputs were all written")
        print(f"sim: interrupted; {out_dir} is marked {INCOMPLETE}", file=sys.stderr)
        raise
    except BaseException as exc:
        _mark(out_dir, f"stopped by an error: {exc}")
        raise
    mark_complete(out_dir)
    if sweeping:
        mark_finished(out_dir, config)
        line = progress_line(Path(hc.sweep.dir), time.time())
        if line:
            print(line, flush=True)
    return summary


def _mark(out_dir: Path, why: str) -> None:
    """Say why in INCOMPLETE; where it cannot be rewritten (the disk that stopped the run is
    full), the mark the run began with stays."""
    with contextlib.suppress(UserError):
        mark_incomplete(out_dir, why)


_frozen = False  # this process's start-up objects are out of the collector's reach


def freeze_start_up() -> None:
    """Once per process, before its first task runs: the objects alive then (modules, Hydra's
    state, the scenario's imports) live as long as the process, so the cyclic garbage collector
    stops visiting them (gc.freeze). Its full collections then look at what the runs create, not
    at ~100,000 start-up objects each time: joblib's workers collect after every task (loky,
    without psutil), tens of times in a sweep. The garbage left by start-up is collected first,
    from the young generations, where it all is (a few dozen objects): a millisecond, where a
    full collection takes 30-40 ms to find the same."""
    global _frozen
    if not _frozen:
        gc.collect(1)
        gc.freeze()
        _frozen = True


def _run(
    scenario: Scenario, cfg: SimConfig, out_dir: Path, sweeping: bool, run_dir: RunDir
) -> dict:
    freeze_start_up()
    if cfg.output.progress and not sys.stderr.isatty() and not sweeping:
        bar = ProgressLines(what=scenario.counts)  # a log: a plain line per tenth of the runs
    else:  # a terminal's bar (a sweep's points print their own line as each ends)
        bar = ProgressBar(enabled=cfg.output.progress and sys.stderr.isatty(), what=scenario.counts)
    with bar:
        result = scenario.run(cfg, out_dir, bar)
    scenario.write(result, out_dir)
    rec = calibrated.record(cfg, result)
    if rec is not None:  # the task-level account of calibration=PATH (sim/scenarios/calibrated.py)
        calibrated.stamp(out_dir, rec)
    _, foreign = run_dir.settle(KEEPS.get(cfg.task, ()))  # what "Outputs:" lists (brief)
    if foreign:
        shown = ", ".join(foreign[:4]) + (", ..." if len(foreign) > 4 else "")
        print(
            f"sim: note: {out_dir} holds {len(foreign)} "
            f"{'entry' if len(foreign) == 1 else 'entries'} no run of sim recorded ({shown}): "
            "left as they are, and not among this run's outputs",
            file=sys.stderr,
        )
    scenario.brief(result, out_dir, sweeping)
    if text := calibrated.line(rec if rec is not None else result.summary.get("calibration")):
        print(text)
    if line := warning_line(result.summary.get("audit")):  # every task that audits its runs
        print(line, file=sys.stderr)
    return result.summary
