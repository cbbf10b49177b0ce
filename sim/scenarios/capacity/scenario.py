"""scenario=capacity as a Scenario: the search (sim/scenarios/capacity/search.py), then its
outputs (sim/scenarios/capacity/report.py)."""

from __future__ import annotations

from pathlib import Path

from sim.config import SimConfig
from sim.report.console import ProgressBar, outputs_line
from sim.run.setup import Setup
from sim.scenarios.capacity.report import headline, write_capacity_outputs
from sim.scenarios.capacity.result import CapacityResult
from sim.scenarios.capacity.search import check, run_capacity
from sim.scenarios.fanout import say_if_capped


class Capacity:
    counts = "probes"

    def check(self, cfg: SimConfig) -> None:
        Setup.from_config(cfg)
        check(cfg)

    def run(self, cfg: SimConfig, out_dir: Path, bar: ProgressBar) -> CapacityResult:
        say_if_capped(cfg.capacity.jobs, "capacity.jobs")
        return run_capacity(cfg, progress=bar.update_count)

    def write(self, result: CapacityResult, out_dir: Path) -> None:
        write_capacity_outputs(result, out_dir)

    def brief(self, result: CapacityResult, out_dir: Path, sweeping: bool) -> None:
        print(f"capacity: {headline(result)}")
        print(
            f"{len(result.probes)} probes, {result.simulations_run} simulations in "
            f"{result.wall_time_s:.1f} s. {outputs_line(out_dir)}"
        )
