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
from pathlib import Path

from sim.config import SimConfig
from sim.scenarios.upgrade_diff.attribute import Attribution, attribute
from sim.scenarios.upgrade_diff.load_sweep import LoadSweep, load_sweep
from sim.scenarios.upgrade_diff.outcomes import METRICS, Figures, pct_change
from sim.scenarios.upgrade_diff.plan import SIMULATED, Plan, make_plan
from sim.scenarios.upgrade_diff.restore import restore_command, restore_flag
from sim.scenarios.upgrade_diff.result import (
    AttributionRow,
    Baseline,
    Measured,
    ShapleyMethod,
    Side,
    UpgradeResult,
)
from sim.scenarios.upgrade_diff.verdict import leaders, pair, verdict


def run_upgrade_diff(cfg: SimConfig, progress=None, cache: Path | None = None) -> UpgradeResult:
    """Plan, attribute, sweep; the result (report and plots are written by the caller).
    With `cache` (a folder), every simulation's outcome is kept there and a rerun into the
    same folder reuses them: an interrupted upgrade_diff resumes where it stopped."""
    started = time.perf_counter()
    plan = make_plan(cfg)
    up = cfg.upgrade
    seeds = [cfg.seed + k for k in range(up.seeds)]

    def tick(done, total):
        if progress:
            progress(done, total)

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
        tick,
        cache,
        measured.change_pct if measured else None,
    )
    simulations = result.simulations_run
    sweep = None
    if up.loads:
        n_sweep = 2 * len(set(up.loads))

        def tick2(k):
            tick(simulations + k, simulations + n_sweep)

        sweep = load_sweep(plan, up.loads, up.jobs, tick2, cache)
        simulations += sweep.simulations
    return summarize(plan, result, sweep, simulations, time.perf_counter() - started)


def summarize(
    plan: Plan, r: Attribution, sweep: LoadSweep | None, simulations: int, wall_s: float
) -> UpgradeResult:
    rows = sorted(
        attribution_rows(plan, r),
        key=lambda row: (-abs(row.effect_pct[r.headline]), row.setting),
    )
    before = Side(f"{plan.before.engine}@{plan.before.version}", *_metrics(r.before))
    after = Side(f"{plan.after.engine}@{plan.after.version}", *_metrics(r.after))
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
        verdict=verdict(r, before, after, rows, sides, alone),
        config=plan.cfg,
    )


def attribution_rows(plan: Plan, r: Attribution) -> list[AttributionRow]:
    """One row per change, in the changes' order."""
    rows = []
    for i, c in enumerate(plan.changes):
        flag, why = restore_flag(plan.after, c)
        rows.append(
            AttributionRow(
                setting=c.setting,
                category=c.category.value,
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
            )
        )
    return rows


def _metrics(outcome: dict) -> tuple[dict[str, float], Figures]:
    return {k: v for k, v in outcome.items() if k != "sim"}, Figures.of(outcome)


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
