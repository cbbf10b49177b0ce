"""Running a lesson: both variants simulated with every step traced, and the lesson's numbers
read off them (sim/scenarios/teach/verdicts.py)."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from sim.config import SimConfig
from sim.errors import UserError
from sim.run.findings import merge_records
from sim.run.phases import phase_totals
from sim.run.simulate import simulate
from sim.run.summary import RunResult
from sim.scenarios.teach.costs import WORSE_BY, Cost
from sim.scenarios.teach.lessons import LESSONS, Lesson


@dataclass(frozen=True)
class LessonRuns:
    """A lesson run: its two variants' results and the numbers read off them."""

    lesson: str  # its name (teach.lesson)
    lesson_sentence: str
    definition: Lesson
    results: tuple[RunResult, ...]  # one per variant, in the lesson's order
    rows: tuple[tuple, ...]  # (figure, value per variant)
    costs: tuple[Cost, ...]  # the figures the second variant made worse (teach/costs.py)
    simulation_wall_time_s: float
    wall_time_s: float

    @property
    def labels(self) -> list[str]:
        return [v.label for v in self.definition.variants]

    @property
    def summary(self) -> dict:
        labels = self.labels
        return {
            "lesson": self.lesson,
            "lesson_sentence": self.lesson_sentence,
            "figures": {
                name: dict(zip(labels, map(str, values), strict=True))
                for name, *values in self.rows
            },
            "costs": [c.record for c in self.costs],
            "costs_worse_by": WORSE_BY,
            "variants": [
                variant_summary(lb, r) for lb, r in zip(labels, self.results, strict=True)
            ],
            "simulation_wall_time_s": self.simulation_wall_time_s,
            "wall_time_s": self.wall_time_s,
            "audit": merge_records([r.summary["audit"] for r in self.results], labels),
        }


def variant_summary(label: str, r: RunResult) -> dict:
    s = r.summary
    keep = ("completed", "duration", "request_throughput", "output_throughput", "mean_ttft_ms",
            "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms", "p99_itl_ms")  # fmt: skip
    return {
        "label": label,
        "engine": s["backend"].removeprefix("sim:"),
        **{k: s[k] for k in keep},
        "steps": s["sim"]["steps"],
        "preemptions": s["sim"]["preemptions"],
        "mean_batch_size": s["sim"]["mean_batch_size"],
        "prefix_cache_hit_rate": s["sim"]["prefix_cache_hit_rate"],
        "kv_blocks": r.setup.memory.num_blocks,
        "phase_seconds": phase_totals(r.phases),
    }


def run_lesson(cfg: SimConfig, progress=None) -> LessonRuns:
    """Both variants of the lesson, their timelines and the lesson's numbers."""
    name = cfg.teach.lesson
    if name not in LESSONS:
        raise UserError(f"teach.lesson={name!r}: choose one of {', '.join(LESSONS)}")
    lesson = LESSONS[name]
    started = time.perf_counter()
    base = replace(cfg, trace=True, output=replace(cfg.output, progress=False))
    results = []
    for k, v in enumerate(lesson.variants):
        c = v.change(base)
        workload = lesson.workload(c) if lesson.workload else None
        results.append(simulate(c, workload=workload))
        if progress:
            progress(k + 1, len(lesson.variants))
    v = lesson.verdict(results)
    wall_s = time.perf_counter() - started
    return LessonRuns(name, v.sentence, lesson, tuple(results), v.rows, v.costs, wall_s, wall_s)
