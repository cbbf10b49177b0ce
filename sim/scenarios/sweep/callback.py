"""The Hydra callback of every -m sweep (scenarios/config.yaml, hydra.callbacks): when the sweep
starts, what an earlier sweep left in its dir set aside (sim/scenarios/sweep/points.py) and the
sweep's size and run dirs (for each run's progress line); when its last run has ended, the sweep
table (sim/scenarios/sweep/table.py) and the sweep report (sim/scenarios/sweep/report.py).

Hydra calls both in the launching process, whatever the launcher, and turns an exception raised
in a callback into a warning (the sweep would exit 0 with the last sweep's report in place). So
a failure here is said in one line (`sim: error: ...`; --debug adds the traceback) and ends the
process: exit 2 for a sweep dir it cannot set aside or a UserError, 130 on Ctrl-C, else 1;
after a failed report, no report.md, report.html, sweep_summary.json or plot of an earlier
invocation is left in the sweep dir.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

from hydra.experimental.callback import Callback

from sim.errors import UserError, shown
from sim.run.outputs import atomic_write
from sim.scenarios.sweep.defaults import engine_defaults
from sim.scenarios.sweep.points import (
    OUTPUTS,
    PLOTS,
    REPORT,
    TABLE,
    earlier_points,
    set_aside,
    sweep_points,
)
from sim.scenarios.sweep.table import PROGRESS, engine_default_label, sweep_size, write_sweep_table


class SweepTable(Callback):
    """Hydra callback (scenarios/config.yaml, hydra.callbacks): the sweep dir made this sweep's
    and its size recorded at the start, the sweep table and report at the end."""

    def on_multirun_start(self, config, **kwargs) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        try:
            points = sweep_points(config)
            if points is None:  # another sweeper: its points are not known ahead
                params = config.hydra.sweeper.get("params") or {}
                task = list(config.hydra.overrides.task)
                total = sweep_size(task, {k: str(v) for k, v in params.items()})
            else:
                total = len(points.overrides)
            if points is not None and sweep_dir.is_dir():
                line = set_aside(sweep_dir, points, earlier_points(sweep_dir), time.time())
                if line:
                    print(line, flush=True)
            dirs = list(points.names) if points is not None and points.names else None
            info = {"total": total, "started_at": time.time(), "dirs": dirs}
            atomic_write(sweep_dir / PROGRESS, lambda tmp: tmp.write_text(json.dumps(info)))
        except (Exception, KeyboardInterrupt) as exc:
            after = "; make it writable, or give another hydra.sweep.dir"
            _fail(exc, f"starting the sweep in {sweep_dir}", after, code=2)

    def on_multirun_end(self, config, **kwargs) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        if not sweep_dir.is_dir():
            return
        written: set[str] = set()
        try:
            _write(config, sweep_dir, written)
        except (Exception, KeyboardInterrupt) as exc:
            stale = [n for n in OUTPUTS if n not in written and (sweep_dir / n).is_file()]
            for name in stale:
                (sweep_dir / name).unlink(missing_ok=True)
            after = f" (the table: {sweep_dir}/sweep.csv)" if set(TABLE) <= written else ""
            if "report.md" in stale:
                after += "; the report.md there before is removed"
            _fail(exc, "writing the sweep's table and report", after)


def _write(config, sweep_dir: Path, written: set[str]) -> None:
    """The sweep table and report of this sweep's points; `written` collects the file names;
    a plot an earlier invocation drew and this report does not show is removed."""
    # start-up: Hydra loads this callback on every run; the report (matplotlib) only when a
    # sweep ends
    from sim.scenarios.sweep.report import write_sweep_report

    frame = write_sweep_table(sweep_dir, sweep_points(config))
    written.update(TABLE)
    missing = frame.attrs["unfinished"]
    note = f"; unfinished: {', '.join(missing)}" if missing else ""
    print(f"sweep: {len(frame)} runs in {sweep_dir}/sweep.parquet and sweep.csv{note}")
    default = engine_default_label(config, frame)
    engine = engine_defaults(config, frame, default)
    report = write_sweep_report(sweep_dir, frame, default, engine)
    written.update(REPORT, report.get("plots", []))
    for name in set(PLOTS) - written:
        (sweep_dir / name).unlink(missing_ok=True)
    if rec := report.get("recommendation"):
        print(f"sweep: {rec['sentence']}")
    for sentence in engine.sentences() if engine else []:
        print(f"sweep: {sentence}")
    print(f"sweep: report in {sweep_dir}/report.md")


def _fail(exc: BaseException, what: str, after: str = "", code: int = 1) -> None:
    """One line on stderr and the process's end (Hydra would turn the exception into a
    warning and go on to exit 0): `code`, 2 for a UserError, 130 for Ctrl-C. `what` was being
    done; `after`: what it leaves, for the end of the line."""
    if os.environ.get("SIM_DEBUG"):
        traceback.print_exception(exc)
    sys.stdout.flush()
    if isinstance(exc, KeyboardInterrupt):
        print(f"sim: interrupted while {what}{after}", file=sys.stderr, flush=True)
        sys.exit(130)
    reason = shown(str(exc).splitlines()[0] if str(exc) else "", 300, text=True)
    if not isinstance(exc, UserError):
        reason = f"{type(exc).__name__}: {reason}" if reason else type(exc).__name__
    print(f"sim: error: {what} failed: {reason}{after}", file=sys.stderr, flush=True)
    sys.exit(2 if isinstance(exc, UserError) else code)
