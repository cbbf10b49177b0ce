"""The mixtures simulated for an attribution: the outcome of every (seed, subset of changes)
run so far, each simulated once, and their values in percent of the before version."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from sim.config import SimConfig
from sim.engines.settings import EngineSettings
from sim.scenarios.upgrade_diff.attribution import Memo
from sim.scenarios.upgrade_diff.changes import Change
from sim.scenarios.upgrade_diff.outcomes import numbers, run_tasks

Key = tuple[int, frozenset[int]]  # (seed, the changes applied)


@dataclass(slots=True)
class Runs:
    """Every (seed, subset of changes) simulated so far: each is simulated once, and each
    batch asked for goes out in parallel (run_tasks)."""

    cfg: SimConfig
    before: EngineSettings
    after: EngineSettings
    changes: list[Change]
    seeds: list[int]
    jobs: int | None
    progress: Callable[[int, int], None] | None
    cache: Path | None
    outcomes: dict[Key, dict] = field(default_factory=dict)
    planned: int = 0  # the progress total: runs done plus those known to be coming

    def run(self, subsets: Iterable[frozenset[int]]) -> None:
        """Simulate each subset on every seed, those not run yet."""
        todo = [
            (d, s) for s in _ordered(subsets) for d in self.seeds if (d, s) not in self.outcomes
        ]
        if not todo:
            return
        done0 = len(self.outcomes)
        self.planned = max(self.planned, done0 + len(todo))

        def tick(k: int) -> None:
            if self.progress:
                self.progress(done0 + k, self.planned)

        tasks = [(replace(self.cfg, seed=d), tuple(sorted(s))) for d, s in todo]
        ran = run_tasks(tasks, self.before, self.after, self.changes, self.jobs, tick, self.cache)
        for key, r in zip(todo, ran, strict=True):
            self.outcomes[key] = r

    def same(self, x: frozenset[int], y: frozenset[int]) -> bool:
        """Whether two subsets give the same numbers on every seed."""
        return all(
            numbers(self.outcomes[(d, x)]) == numbers(self.outcomes[(d, y)]) for d in self.seeds
        )

    def value(self, seed: int, subset, metric: str) -> float:
        return self.outcomes[(seed, frozenset(subset))][metric]

    def pct(self, seed: int, x: float, metric: str) -> float:
        """x in percent of the before version's metric on that seed."""
        base = self.outcomes[(seed, frozenset())][metric]
        return x / base * 100 if base else 0.0

    def pcts(self, x, y, metric: str) -> list[float]:
        """Per seed, subset x minus subset y in percent of the before version."""
        return [
            self.pct(d, self.value(d, x, metric) - self.value(d, y, metric), metric)
            for d in self.seeds
        ]

    def game(self, seed: int, metric: str, active: list[int]) -> Memo:
        """The metric with a subset of the active changes (game indices) applied."""

        def simulate_one(s: frozenset[int]) -> float:
            key = (seed, frozenset(active[j] for j in s))
            if key not in self.outcomes:  # ddmin may ask for a subset not run yet
                self.run([key[1]])
            return self.outcomes[key][metric]

        return Memo(simulate_one)


def _ordered(subsets: Iterable[frozenset[int]]) -> list[frozenset[int]]:
    return sorted({frozenset(s) for s in subsets}, key=lambda s: (len(s), sorted(s)))
