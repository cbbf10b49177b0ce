"""scenario=disagg as a Scenario: the split search (sim/scenarios/disagg/search.py), then its
outputs (sim/scenarios/disagg/report.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from sim.config import SimConfig
from sim.report.console import ProgressBar, outputs_line
from sim.run.disagg import Pools
from sim.run.disagg import check as check_run
from sim.scenarios.disagg.report import headline, write_search_outputs
from sim.scenarios.disagg.result import DisaggResult
from sim.scenarios.disagg.search import check as check_search
from sim.scenarios.disagg.search import run_disagg_search
from sim.scenarios.fanout import say_if_capped


class Disagg:
    counts = "simulations"

    def check(self, cfg: SimConfig) -> None:
        Pools.from_config(replace(cfg, disagg=replace(cfg.disagg, enabled=True)))
        check_run(cfg)
        check_search(cfg)

    def run(self, cfg: SimConfig, out_dir: Path, bar: ProgressBar) -> DisaggResult:
        say_if_capped(cfg.disagg.jobs, "disagg.jobs")
        return run_disagg_search(cfg, progress=bar.update_count)

    def write(self, result: DisaggResult, out_dir: Path) -> None:
        write_search_outputs(result, out_dir)

    def brief(self, result: DisaggResult, out_dir: Path, sweeping: bool) -> None:
        print(f"disagg: {headline(result)}")
        print(
            f"{len(result.probes)} splits probed, {result.simulations_run} simulations in "
            f"{result.wall_time_s:.1f} s. {outputs_line(out_dir)}"
        )
