"""scenario=upgrade_diff as a Scenario: the plan, the attribution and the load sweep
(sim/scenarios/upgrade_diff/study.py), then the report (sim/scenarios/upgrade_diff/report.py).
Each simulation's outcome is kept in RUN_DIR/simulations/ as it finishes: a rerun into the same
run dir resumes from them."""

from __future__ import annotations

import textwrap
from pathlib import Path

from sim.config import SimConfig
from sim.report.console import ProgressBar, outputs_line
from sim.scenarios.fanout import say_if_capped
from sim.scenarios.upgrade_diff.history import with_earlier_verdicts
from sim.scenarios.upgrade_diff.outcomes import METRICS
from sim.scenarios.upgrade_diff.plan import make_plan
from sim.scenarios.upgrade_diff.report import write_upgrade_outputs
from sim.scenarios.upgrade_diff.result import UpgradeResult
from sim.scenarios.upgrade_diff.study import run_upgrade_diff
from sim.scenarios.upgrade_diff.verdict import NAMES, fmt, noise, pair


class UpgradeDiff:
    counts = "runs"

    def check(self, cfg: SimConfig) -> None:
        make_plan(cfg)

    def run(self, cfg: SimConfig, out_dir: Path, bar: ProgressBar) -> UpgradeResult:
        cache = out_dir / "simulations"  # each simulation's outcome: a rerun resumes from them
        kept = len(list(cache.glob("*.json"))) if cache.is_dir() else 0
        if kept:
            print(f"upgrade_diff: resuming; {kept} simulations already done in {cache}")
        say_if_capped(cfg.upgrade.jobs, "upgrade.jobs")
        result = run_upgrade_diff(cfg, progress=bar.update_count, cache=cache)
        return with_earlier_verdicts(result, out_dir / "summary.json")  # other headlines' kept

    def write(self, result: UpgradeResult, out_dir: Path) -> None:
        write_upgrade_outputs(result, out_dir)

    def brief(self, result: UpgradeResult, out_dir: Path, sweeping: bool) -> None:
        sides = pair(
            result.before.engine, result.after.engine, result.attribution, result.config.upgrade
        )
        print(f"upgrade_diff: {sides.title}")
        for note in result.notes:  # the rate workload.rate=auto chose, rules of another release
            print(textwrap.fill(note, width=100, initial_indent="  ", subsequent_indent="    "))
        for m in METRICS:
            print(
                f"  {NAMES[m][0]:<20} {fmt(m, result.before.metrics[m]):>16} -> "
                f"{fmt(m, result.after.metrics[m]):>16}  {result.change_pct[m]:+7.1f}%"
            )
        m = result.headline
        moved = [row for row in result.attribution if not row.inert][:8]
        if moved:
            print(f"  {NAMES[m][0]} by setting (Shapley, points of %):")
        for row in moved:
            print(
                f"    {row.setting:<32} {row.category:<10} "
                f"{row.effect_pct[m]:+7.1f} ± {row.ci_pct[m]:.1f}"
                + ("  not distinguishable from noise" if noise(row, m) else "")
            )
        for side in (result.before, result.after):
            if side.overload is not None and (warning := side.overload.warning(side.engine)):
                print(textwrap.fill(warning, width=100))
        print(f"Verdict: {result.verdict}")
        print(f"{result.simulations_run} simulations in {result.wall_time_s:.0f} s.")
        print(outputs_line(out_dir))
