"""The one shape every `task=` takes. sim/scenarios/runner.py runs any of them the same way:

    scenario.check(cfg)                      before anything runs (a UserError: one line, exit 2)
    result = scenario.run(cfg, out_dir, bar) the simulations; `bar` shows their progress
    scenario.write(result, out_dir)          every output file of the run dir
    scenario.brief(result, out_dir, sweep)   what the console shows (shorter inside a sweep)

`result` is the scenario's own frozen dataclass; its `summary` is the dict summary.json holds
(and what a Hydra job returns).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, TypeVar

from sim.config import SimConfig
from sim.report.console import ProgressBar


class Result(Protocol):
    @property
    def summary(self) -> dict: ...


R = TypeVar("R", bound=Result)


class Scenario(Protocol[R]):
    counts: str  # what the progress bar counts: "requests" (with the simulated clock), "runs", ...

    def check(self, cfg: SimConfig) -> None: ...

    def run(self, cfg: SimConfig, out_dir: Path, bar: ProgressBar) -> R: ...

    def write(self, result: R, out_dir: Path) -> None: ...

    def brief(self, result: R, out_dir: Path, sweeping: bool) -> None: ...
