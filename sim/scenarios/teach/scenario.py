"""scenario=teach_* as a Scenario: the lesson's two runs (sim/scenarios/teach/lessons.py), then
its outputs (sim/scenarios/teach/report.py)."""

from __future__ import annotations

from pathlib import Path

from sim.config import SimConfig
from sim.errors import UserError
from sim.report.console import ProgressBar, outputs_line
from sim.run.setup import Setup
from sim.scenarios.teach.lessons import LESSONS
from sim.scenarios.teach.report import write_teach_outputs
from sim.scenarios.teach.run import LessonRuns, run_lesson


class Teach:
    counts = "runs"

    def check(self, cfg: SimConfig) -> None:
        if cfg.teach.lesson not in LESSONS:
            raise UserError(
                f"teach.lesson={cfg.teach.lesson!r}: choose one of {', '.join(LESSONS)}"
            )
        Setup.from_config(cfg)

    def run(self, cfg: SimConfig, out_dir: Path, bar: ProgressBar) -> LessonRuns:
        return run_lesson(cfg)

    def write(self, result: LessonRuns, out_dir: Path) -> None:
        command = f"python -m sim scenario=teach_{result.lesson}"
        write_teach_outputs(result, out_dir, command)

    def brief(self, result: LessonRuns, out_dir: Path, sweeping: bool) -> None:
        s = result.summary
        print(f"teach_{s['lesson']}: {s['lesson_sentence']}")
        print(f"{s['wall_time_s']:.1f} s. {outputs_line(out_dir)}")
        print("Open trace.json in ui.perfetto.dev to step through the runs.")
