"""Attribution of an upgrade's change over seeds: which mixtures to simulate, and what each
change does to each metric in percent of the before version (the math on one value function,
Shapley values, one at a time and delta debugging, is sim/scenarios/upgrade_diff/attribution.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

import numpy as np

from sim.config import SimConfig
from sim.engines.settings import Category, EngineSettings
from sim.scenarios.upgrade_diff.attribution import (
    Memo,
    minimal_set,
    one_at_a_time,
    random_orders,
    shapley,
)
from sim.scenarios.upgrade_diff.changes import USER_OVERRIDE, Change
from sim.scenarios.upgrade_diff.headline import LARGEST, choose_headline
from sim.scenarios.upgrade_diff.outcomes import METRICS, mean_outcome
from sim.scenarios.upgrade_diff.runs import Runs

ORDERS_SEED = 20  # the random orders sampled Shapley values follow (fixed: reproducible)
MINIMAL_SHARE = 0.9  # the minimal set reproduces at least this share of the headline change


@dataclass(frozen=True, slots=True)
class Attribution:
    """What each change does to each metric, in percent of the before version's value (per
    seed, then the mean over seeds)."""

    changes: list[Change]
    seeds: list[int]
    runs: dict  # (seed, subset) -> outcome()
    change_pct: dict[str, float]  # after vs before
    change_ci_pct: dict[str, float]  # half-width of its 95% interval over seeds
    shapley_pct: dict[str, list[float]]  # metric -> per change
    ci_pct: dict[str, list[float]]  # metric -> half-width of the 95% interval per change
    added_pct: dict[str, list[float]]  # before + this change alone
    removed_pct: dict[str, list[float]]  # after without this change
    by_category_pct: dict[str, dict[str, float]]  # category (or USER_OVERRIDE) -> metric -> its
    # changes alone
    interaction_pct: dict[str, float]  # the change minus the categories' effects alone
    inert: list[int]  # changes with no effect at all, either way, on any seed
    inert_residual_pct: dict[str, float]  # after minus after-without-the-inert (0 if inert)
    minimal: list[int]  # smallest set found reproducing >= 90% of the headline change
    headline: str
    exact: bool  # Shapley values over every subset (else sampled orders)
    orders: int  # random orders sampled per seed (0 when exact)
    simulations_run: int
    headline_rule: str = LARGEST  # which rule chose the headline (headline.py)

    def outcome(self, subset=(), seed: int | None = None) -> dict:
        """One seed's run of a mixture; with no seed, the mean over every seed."""
        if seed is None:
            return mean_outcome([self.runs[(d, frozenset(subset))] for d in self.seeds])
        return self.runs[(seed, frozenset(subset))]

    @property
    def before(self) -> dict:
        return self.outcome(())

    @property
    def after(self) -> dict:
        return self.outcome(range(len(self.changes)))


def attribute(
    cfg: SimConfig,
    before: EngineSettings,
    after: EngineSettings,
    changes: list[Change],
    seeds: Iterable[int] = (0,),
    budget: int = 96,
    headline: str = "auto",
    jobs: int | None = None,
    progress=None,
    cache: Path | None = None,
    measured_pct: dict[str, float] | None = None,
) -> Attribution:
    """Attribute the change from `before` to `after` to the `changes`, on cfg's workload drawn
    with each seed (every mixture of one seed sees the same arrivals and lengths):

    1. before, after, each change added to before and removed from after, and each category's
       changes alone, on every seed;
    2. changes with no effect either way on any seed (bit-identical results) are inert: they
       get 0 and stay out of the Shapley game;
    3. Shapley values over the others: over every subset when 2^k <= budget, else from as
       many random orders (antithetic pairs) as the budget allows, on every seed;
    4. a minimal set by delta debugging on the first seed's headline metric.

    Every distinct (seed, subset) is simulated once; each stage's runs go out in parallel.
    `progress(done, total)` as runs finish; `cache`: see outcomes.run_tasks. `headline`: a
    metric, or auto (headline.py; `measured_pct`: the measured change, when one was given)."""
    n = len(changes)
    seeds = list(seeds)
    everything = frozenset(range(n))
    runs = Runs(cfg, before, after, changes, seeds, jobs, progress, cache)
    by_cat = groups(changes)
    first = first_subsets(changes)
    runs.planned = len(first) * len(seeds)
    runs.run(first)
    inert = [
        i
        for i in range(n)
        if runs.same(frozenset({i}), frozenset()) and runs.same(everything - {i}, everything)
    ]
    active = [i for i in range(n) if i not in inert]
    game, exact, orders = _game(active, budget)
    runs.planned = len(runs.outcomes) + len(seeds) * len(set(game) - {s for _, s in runs.outcomes})
    runs.run(game)
    e = {m: _effects(runs, m, active, orders, exact, by_cat) for m in METRICS}
    change = {m: e[m].change for m in METRICS}
    chosen = choose_headline(headline, change, {m: e[m].change_ci for m in METRICS}, measured_pct)
    headline = chosen.metric
    minimal = []
    if active:
        found = minimal_set(len(active), runs.game(seeds[0], headline, active), MINIMAL_SHARE)
        minimal = sorted(active[j] for j in found)
    return Attribution(
        changes,
        seeds,
        runs.outcomes,
        change,
        {m: e[m].change_ci for m in METRICS},
        {m: e[m].shapley for m in METRICS},
        {m: e[m].ci for m in METRICS},
        {m: e[m].added for m in METRICS},
        {m: e[m].removed for m in METRICS},
        {g: {m: e[m].by_category[g] for m in METRICS} for g in _group_names(by_cat)},
        {m: e[m].interaction for m in METRICS},
        inert,
        {m: e[m].inert_residual for m in METRICS},
        minimal,
        headline,
        exact,
        orders,
        len(runs.outcomes),
        chosen.rule,
    )


@dataclass(frozen=True, slots=True)
class _Effects:
    """One metric's figures of an Attribution (points of %, the mean over seeds)."""

    shapley: list[float]  # per change
    ci: list[float]
    added: list[float]
    removed: list[float]
    change: float
    change_ci: float
    inert_residual: float
    by_category: dict[str, float]
    interaction: float


def _effects(
    runs: Runs,
    metric: str,
    active: list[int],
    orders: int,
    exact: bool,
    by_cat: dict[str, frozenset[int]],
) -> _Effects:
    seeds = runs.seeds
    everything = frozenset(range(len(runs.changes)))
    shap, ci = _shapley_pct(runs, metric, active, orders, exact)
    added, removed = _one_at_a_time_pct(runs, metric)
    totals = runs.pcts(everything, (), metric)
    change = float(np.mean(totals))
    change_ci = (
        float(1.96 * np.std(totals, ddof=1) / np.sqrt(len(seeds))) if len(seeds) > 1 else 0.0
    )
    residual = float(np.mean(runs.pcts(everything, active, metric)))
    cats, alone = {}, 0.0
    for cat in _group_names(by_cat):
        members = by_cat.get(cat)
        effect = float(np.mean(runs.pcts(members, (), metric))) if members else 0.0
        cats[cat] = effect
        alone += effect
    return _Effects(shap, ci, added, removed, change, change_ci, residual, cats, change - alone)


def groups(changes: list[Change]) -> dict[str, frozenset[int]]:
    """The changes of each group (Change.group: a category, or the user's overrides)."""
    out: dict[str, frozenset[int]] = {}
    for i, c in enumerate(changes):
        out[c.group] = out.get(c.group, frozenset()) | {i}
    return out


def _group_names(by_cat: dict[str, frozenset[int]]) -> list[str]:
    """Every category, then the user's overrides when there are any."""
    return [c.value for c in Category] + [g for g in by_cat if g == USER_OVERRIDE]


def first_subsets(changes: list[Change]) -> set[frozenset[int]]:
    """The mixtures attribute() runs first on every seed: none, all, each change added to the
    before version and removed from the after one, and each group's changes alone."""
    n = len(changes)
    everything = frozenset(range(n))
    first = {frozenset(), everything}
    first |= {frozenset({i}) for i in range(n)} | {everything - {i} for i in range(n)}
    return first | set(groups(changes).values())


def _game(active: list[int], budget: int) -> tuple[Iterable[frozenset[int]], bool, int]:
    """The subsets Shapley values of the active changes read: (them, over every subset?, the
    random orders sampled per seed when not)."""
    k = len(active)
    exact = 2**k <= budget
    orders = 0 if exact else max(2, 2 * (budget // (2 * max(k - 1, 1))))
    if exact:
        return [frozenset(active[j] for j in s) for s in _all_subsets(k)], exact, orders
    game = {frozenset(), frozenset(active)}
    for seq in random_orders(k, orders, np.random.default_rng(ORDERS_SEED)):
        game |= {frozenset(active[j] for j in seq[:m]) for m in range(1, k)}
    return game, exact, orders


def _shapley_pct(
    runs: Runs, metric: str, active: list[int], orders: int, exact: bool
) -> tuple[list[float], list[float]]:
    """Each change's Shapley value (inert ones: 0), the mean over seeds, and the half-width
    of its 95% interval (the spread over seeds and the sampling error of the orders)."""
    n, seeds = len(runs.changes), runs.seeds
    per_seed, per_se = [], []
    for seed in seeds:
        value = runs.game(seed, metric, active)
        phi = shapley(len(active), value, np.random.default_rng(ORDERS_SEED), orders, exact)
        full = np.zeros(n)
        se = np.zeros(n)
        full[active] = [runs.pct(seed, x, metric) for x in phi.values]
        se[active] = [runs.pct(seed, x, metric) for x in phi.std_errors]
        per_seed.append(full)
        per_se.append(se)
    stack, ses = (
        np.array(per_seed).reshape(len(seeds), n),
        np.array(per_se).reshape(len(seeds), n),
    )
    spread = stack.std(axis=0, ddof=1) / np.sqrt(len(seeds)) if len(seeds) > 1 else 0.0
    sampling = np.sqrt(np.mean(ses**2, axis=0) / len(seeds))
    return stack.mean(axis=0).tolist(), (1.96 * np.sqrt(spread**2 + sampling**2)).tolist()


def _one_at_a_time_pct(runs: Runs, metric: str) -> tuple[list[float], list[float]]:
    """(each change added to before, removed from after), the mean over seeds."""
    n, seeds = len(runs.changes), runs.seeds
    one = [one_at_a_time(n, Memo(lambda s, d=d: runs.value(d, s, metric))) for d in seeds]
    # per seed, in percent: (seeds x 2 x n) -> the mean over seeds of each direction
    both = np.array(
        [
            [[runs.pct(d, x, metric) for x in way] for way in o]
            for d, o in zip(seeds, one, strict=True)
        ]
    )
    added, removed = both.reshape(len(seeds), 2, n).mean(axis=0).tolist()
    return added, removed


def _all_subsets(k: int) -> list[tuple[int, ...]]:
    return [s for m in range(k + 1) for s in combinations(range(k), m)]
