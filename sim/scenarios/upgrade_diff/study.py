"""scenario=upgrade_diff: which changed setting made the upgrade slower (or faster), and why.

baseline     the before version simulated on a fixed workload (common random numbers: every
             run of one seed sees the same arrivals and lengths), or a recorded run of it
             (a run dir, or a vllm bench serve result) that the simulated before is checked
             against first; without one the scenario refuses                     (plan.py)
diff         every resolved setting that differs, with its category and rule  (changes.py)
attribution  one at a time both ways, a minimal set (delta debugging), Shapley values with
             95% intervals over seeds, by category plus the interaction     (attribute.py)
unexplained  with real results of both versions, the measured change minus the simulated one
load sweep   before and after at several loads around the before version's capacity
                                                                             (load_sweep.py)
report       summary.json, report.md with the verdict, a waterfall, the settings table, the
             load sweep, and the engine flags that restore the old behaviour
                                                      (report.py, verdict.py, restore.py)

This module runs them in order and gathers the answer (result.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sim.config import AUTO, SimConfig
from sim.run.findings import merge_records
from sim.scenarios.upgrade_diff.attribute import Attribution, attribute, first_subsets
from sim.scenarios.upgrade_diff.load_sweep import (
    LoadSweep,
    capacity_outcome,
    load_points,
    load_sweep,
    new_runs,
)
from sim.scenarios.upgrade_diff.outcomes import AUDIT, METRICS, NOT_NUMBERS, Figures, pct_change
from sim.scenarios.upgrade_diff.overload import Overload
from sim.scenarios.upgrade_diff.plan import SIMULATED, Plan, make_plan
from sim.scenarios.upgrade_diff.rate import AutoRate, with_auto_rate
from sim.scenarios.upgrade_diff.restore import restore_command, restore_flag
from sim.scenarios.upgrade_diff.result import (
    AttributionRow,
    Baseline,
    Measured,
    ShapleyMethod,
    Side,
    UpgradeResult,
)
from sim.scenarios.upgrade_diff.unpriced import Unpriced, unpriced
from sim.scenarios.upgrade_diff.verdict import leaders, pair, verdict


def run_upgrade_diff(cfg: SimConfig, progress=None, cache: Path | None = None) -> UpgradeResult:
    """Plan, attribute, sweep; the result (report and plots are written by the caller).
    With `cache` (a folder), every simulation's outcome is kept there and a rerun into the
    same folder reuses them: an interrupted upgrade_diff resumes where it stopped.
    `progress(done, total)`: one count over every stage (Tally)."""
    started = time.perf_counter()
    plan = make_plan(cfg)
    up = cfg.upgrade
    seeds = [cfg.seed + k for k in range(up.seeds)]
    auto = cfg.workload.rate == AUTO
    swept = load_points(plan, up.loads)[0] if up.loads else None
    n_sweep = new_runs(plan, up.loads, None) if up.loads else 0
    tally = Tally(progress, to_come=len(first_subsets(plan.changes)) * len(seeds) + n_sweep)
    capacity = chosen = None
    if auto or swept == "rate":  # the before version's capacity: one run, shared
        out = capacity_outcome(plan, lambda k: tally.tick(k, 1), cache)
        capacity = out["request_throughput"]
        tally.close(1)
        if auto:
            plan, chosen = with_auto_rate(plan, capacity, round(out["completed"]))
        if swept == "rate":  # now known: a point at an auto rate is the study's own load
            n_sweep = new_runs(plan, up.loads, capacity)
    tally.to_come = n_sweep  # the attribution counts its own runs as it plans them
    measured = _measured(plan)
    result = attribute(
        plan.cfg,
        plan.before,
        plan.after,
        plan.changes,
        seeds,
        up.budget,
        up.headline,
        up.jobs,
        tally.tick,
        cache,
        measured.change_pct if measured else None,
    )
    tally.close(result.simulations_run)
    tally.to_come = 0
    sweep = None
    if up.loads:
        shared = 2 * len(load_points(plan, up.loads)[1]) - n_sweep  # the attribution's, kept
        sweep = load_sweep(
            plan, up.loads, up.jobs, lambda k: tally.tick(max(0, k - shared), n_sweep), cache,
            capacity,
        )  # fmt: skip
        tally.close(n_sweep)
    wall_s = time.perf_counter() - started
    return summarize(plan, result, sweep, tally.done, wall_s, chosen)


@dataclass(slots=True)
class Tally:
    """The study's progress as one count over its stages (capacity, attribution, load sweep):
    runs done, and runs planned (those of the stage under way plus those known to come), so
    neither figure ever goes back and the last is the number of simulations it reports."""

    progress: Callable[[int, int], None] | None
    to_come: int = 0  # runs of the later stages, known ahead
    done: int = 0  # runs of the stages finished

    def tick(self, done: int, planned: int) -> None:
        """`done` of the `planned` runs of the stage under way."""
        if self.progress:
            self.progress(self.done + done, self.done + planned + self.to_come)

    def close(self, runs: int) -> None:
        """The stage under way finished, with `runs` runs."""
        self.done += runs


def summarize(
    plan: Plan,
    r: Attribution,
    sweep: LoadSweep | None,
    simulations: int,
    wall_s: float,
    auto_rate: AutoRate | None = None,
) -> UpgradeResult:
    rows = sorted(
        attribution_rows(plan, r),
        key=lambda row: (-abs(row.effect_pct[r.headline]), row.setting),
    )
    everything = frozenset(range(len(plan.changes)))
    before, after = (
        Side(
            f"{s.engine}@{s.version}",
            *_metrics(r.outcome(subset)),
            s.rule_set,
            Overload.of((r.runs[(d, subset)] for d in r.seeds), r.seeds),
        )
        for s, subset in ((plan.before, frozenset()), (plan.after, everything))
    )
    cannot = _unpriced(plan, r)
    sides = pair(before.engine, after.engine, rows, plan.cfg.upgrade)
    top = leaders(rows, r.headline, r.change_pct[r.headline])
    alone = None
    if top:
        idx = [i for i, c in enumerate(plan.changes) if c.setting == top[0].setting]
        alone = Side(f"{before.engine} + {top[0].setting} alone", *_metrics(r.outcome(idx)))
    measured = _measured(plan)
    unexplained = None
    if measured is not None:
        unexplained = {m: measured.change_pct[m] - r.change_pct[m] for m in measured.change_pct}
    shapley = ShapleyMethod(
        r.exact,
        r.orders,
        tuple(r.seeds),
        len(plan.changes),
        tuple(plan.changes[i].setting for i in r.inert),
        dict(r.inert_residual_pct),
        r.simulations_run,
    )
    return UpgradeResult(
        before=before,
        after=after,
        top_alone=alone,
        change_pct=dict(r.change_pct),
        change_ci_pct=dict(r.change_ci_pct),
        headline=r.headline,
        headline_rule=r.headline_rule,
        attribution=tuple(rows),
        by_category_pct=r.by_category_pct,
        interaction_pct=dict(r.interaction_pct),
        unexplained_pct=unexplained,
        simulations_run=simulations,
        minimal_set=tuple(plan.changes[i].setting for i in r.minimal),
        shapley=shapley,
        baseline=_baseline(plan, r),
        measured=measured,
        load_sweep=sweep,
        restore_command=restore_command(plan, r),
        notes=plan.notes,
        wall_time_s=wall_s,
        verdict=verdict(r, before, after, rows, sides, alone, cannot),
        config=plan.cfg,
        auto_rate=auto_rate,
        unpriced=cannot,
        audit=merge_records([o.get(AUDIT) for o in r.runs.values()]),
    )


def _unpriced(plan: Plan, r: Attribution) -> tuple[Unpriced, ...]:
    """The inert kernel changes whose run alone prices attention with the before version's
    very table (unpriced.py): no evidence, whatever the attribution says."""
    base = Figures.of(r.outcome(()))
    found = (
        unpriced(c.setting, c.name, c.before, c.after, base, Figures.of(r.outcome((i,))))
        for i, c in enumerate(plan.changes)
        if i in r.inert
    )
    return tuple(u for u in found if u is not None)


def attribution_rows(plan: Plan, r: Attribution) -> list[AttributionRow]:
    """One row per change, in the changes' order."""
    rows = []
    for i, c in enumerate(plan.changes):
        flag, why = restore_flag(plan.after, c)
        rows.append(
            AttributionRow(
                setting=c.setting,
                category=c.group,
                before=_plain(c.before),
                after=_plain(c.after),
                rule=c.rule_after,
                rule_before=c.rule_before,
                effect_pct={m: r.shapley_pct[m][i] for m in METRICS},
                ci_pct={m: r.ci_pct[m][i] for m in METRICS},
                added_pct={m: r.added_pct[m][i] for m in METRICS},
                removed_pct={m: r.removed_pct[m][i] for m in METRICS},
                inert=i in r.inert,
                in_minimal_set=i in r.minimal,
                linked=tuple(name for name, _, _ in c.linked),
                restore_flag=flag,
                restore_note=why,
                field=c.name,
                setting_category=c.category.value,
            )
        )
    return rows


def _metrics(outcome: dict) -> tuple[dict[str, float], Figures]:
    return {k: v for k, v in outcome.items() if k not in NOT_NUMBERS}, Figures.of(outcome)


def _baseline(plan: Plan, r: Attribution) -> Baseline:
    """The recorded baseline against the simulated before on its seed (the first)."""
    if plan.baseline is None:
        return Baseline(SIMULATED, None, None, None, None)
    b = plan.baseline
    ran = r.outcome((), seed=r.seeds[0])
    match = {m: pct_change(b.metrics[m], ran[m]) for m in METRICS if m in b.metrics}
    return Baseline(b.kind, b.path, b.metrics, {m: ran[m] for m in METRICS}, match)


def _measured(plan: Plan) -> Measured | None:
    """The real results of both versions, on the metrics both recorded."""
    if plan.measured_after is None:
        return None
    mb, ma = plan.measured_before.metrics, plan.measured_after.metrics
    both = [m for m in METRICS if m in mb and m in ma]
    return Measured(
        plan.measured_before.path,
        plan.measured_after.path,
        {m: mb[m] for m in both},
        {m: ma[m] for m in both},
        {m: pct_change(mb[m], ma[m]) for m in both},
    )


def _plain(value):
    if isinstance(value, tuple):
        return list(value)
    return value
