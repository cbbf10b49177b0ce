"""The Hydra callback of every -m sweep (scenarios/config.yaml, hydra.callbacks): the sweep's
size when it starts (for each run's progress line) and, when its last run has ended, the sweep
table (sim/scenarios/sweep/table.py) and the sweep report (sim/scenarios/sweep/report.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from hydra.experimental.callback import Callback

from sim.run.outputs import atomic_write
from sim.scenarios.sweep.defaults import engine_defaults
from sim.scenarios.sweep.table import PROGRESS, engine_default_label, sweep_size, write_sweep_table


class SweepTable(Callback):
    """Hydra callback (scenarios/config.yaml, hydra.callbacks): the sweep's size at the start
    (for each run's progress line), the sweep table at the end."""

    def on_multirun_start(self, config, **kwargs) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        params = config.hydra.sweeper.get("params") or {}
        total = sweep_size(
            list(config.hydra.overrides.task), {k: str(v) for k, v in params.items()}
        )
        info = {"total": total, "started_at": time.time()}
        atomic_write(sweep_dir / PROGRESS, lambda tmp: tmp.write_text(json.dumps(info)))

    def on_multirun_end(self, config, **kwargs) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        if not sweep_dir.is_dir():
            return
        # start-up: Hydra loads this callback on every run; the report (matplotlib) only
        # when a sweep ends
        from sim.scenarios.sweep.report import write_sweep_report

        frame = write_sweep_table(sweep_dir)
        missing = frame.attrs["unfinished"]
        note = f"; unfinished: {', '.join(missing)}" if missing else ""
        print(f"sweep: {len(frame)} runs in {sweep_dir}/sweep.parquet and sweep.csv{note}")
        default = engine_default_label(config, frame)
        engine = engine_defaults(config, frame, default)
        report = write_sweep_report(sweep_dir, frame, default, engine)
        if rec := report.get("recommendation"):
            print(f"sweep: {rec['sentence']}")
        for sentence in engine.sentences() if engine else []:
            print(f"sweep: {sentence}")
        print(f"sweep: report in {sweep_dir}/report.md")
