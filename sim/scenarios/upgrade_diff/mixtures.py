"""The configuration difference between two engine versions, and mixtures of the two.

upgrade_diff attributes a metric's change to the settings that changed. A change is one
setting whose resolved value differs between the `before` and `after` EngineSettings (as
resolve() returns them, before the memory plan: what an engine derives from its KV pool at
start-up, such as SGLang's max_running_requests, is re-derived for every mixture), or the
kernels measured for each version, which price the same operations differently. mixture()
applies any subset of the changes to `before`; with none it is `before`, with all `after`.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from sim.config import UPGRADE_METRICS, SimConfig
from sim.engines.resolve import resolve
from sim.engines.settings import CATEGORY, SETTING_NAMES, Category, EngineSettings
from sim.errors import UserError
from sim.run.outputs import write_json
from sim.run.setup import Setup
from sim.run.simulate import simulate
from sim.specs.hardware import load_hardware
from sim.specs.model_config import load_model

KERNELS = "kernel_tables"  # the change of measured kernels between the two versions


@dataclass(frozen=True, slots=True)
class Change:
    name: str  # an EngineSettings field, or KERNELS
    category: Category
    before: object
    after: object
    rule_before: str
    rule_after: str
    flag: str  # the engine's own argument name for it (after the upgrade)
    linked: tuple[tuple[str, object, object], ...] = ()  # settings derived from this one that
    # move with it: (name, before, after)


def resolved(cfg: SimConfig, engine: str, engine_args) -> EngineSettings:
    """resolve() of `engine` (name@version) for cfg's hardware, model, TP and entry point."""
    return resolve(
        engine,
        load_hardware(cfg.hardware),
        load_model(cfg.model),
        cfg.parallel.tp,
        cfg.entry_point,
        engine_args,
    )


def diff(cfg: SimConfig, a: EngineSettings, b: EngineSettings) -> list[Change]:
    """Every setting whose value differs between two resolved settings, in the settings'
    order, then the kernel tables when the two versions are priced from different
    measurements on cfg's GPU."""
    if (a.engine, a.entry_point) != (b.engine, b.entry_point):
        raise UserError(
            f"upgrade_diff compares two versions of one engine and entry point, not "
            f"{a.engine} ({a.entry_point}) and {b.engine} ({b.entry_point})"
        )
    out = [
        Change(
            name,
            CATEGORY[name],
            getattr(a, name),
            getattr(b, name),
            a.rules.get(name, ""),
            b.rules.get(name, ""),
            b.display_name(name),
        )
        for name in SETTING_NAMES
        if getattr(a, name) != getattr(b, name)
    ]
    out = _link_derived(out, a, b)
    pa = Setup.from_settings(cfg, a, kernel_version=None).pricing
    pb = Setup.from_settings(cfg, b, kernel_version=None).pricing
    if pa.family != pb.family:
        out.append(
            Change(KERNELS, Category.KERNELS, pa.family, pb.family, pa.source, pb.source, KERNELS)
        )
    return out


# Settings an engine derives from another (as long as it does): they change with their source
# and are restored with it, so they are one change, not two.
DERIVED = {"max_prefill_tokens": "max_num_batched_tokens"}  # vLLM: the prefill budget is the
# token budget


def _link_derived(changes: list[Change], a: EngineSettings, b: EngineSettings) -> list[Change]:
    by_name = {c.name: c for c in changes}
    out = []
    for c in changes:
        source = DERIVED.get(c.name)
        if (
            source in by_name
            and getattr(a, c.name) == getattr(a, source)
            and getattr(b, c.name) == getattr(b, source)
        ):
            continue  # folded into its source below
        derived = tuple(
            (d.name, d.before, d.after)
            for d in changes
            if DERIVED.get(d.name) == c.name
            and getattr(a, d.name) == getattr(a, c.name)
            and getattr(b, d.name) == getattr(b, c.name)
        )
        out.append(replace(c, linked=derived) if derived else c)
    return out


def mixture(
    before: EngineSettings, after: EngineSettings, changes: list[Change], chosen: Iterable[int]
) -> tuple[EngineSettings, str]:
    """`before` with the chosen changes applied: (the settings, the version whose measured
    kernels price it)."""
    picked = [changes[i] for i in chosen]
    fields = {c.name: c.after for c in picked if c.name != KERNELS}
    fields |= {name: new for c in picked for name, _, new in c.linked}
    rules = dict(before.rules)
    rules.update({c.name: c.rule_after for c in picked if c.name != KERNELS})
    rules.update({name: after.rules.get(name, "") for c in picked for name, _, _ in c.linked})
    mixed = replace(before, **fields, rules=rules)
    kernels = after.version if any(c.name == KERNELS for c in picked) else before.version
    return mixed, kernels


def mixture_setup(
    cfg: SimConfig, before: EngineSettings, after: EngineSettings, changes, chosen
) -> Setup:
    settings, kernels = mixture(before, after, changes, chosen)
    return Setup.from_settings(cfg, settings, kernel_version=kernels)


METRICS = UPGRADE_METRICS  # the metrics whose change upgrade_diff attributes
LOWER_IS_BETTER = {m: not m.endswith("throughput") for m in METRICS}


def outcome(result) -> dict:
    """What upgrade_diff keeps of one run: the bench metrics (summary.json's numeric top-level
    keys) and, under "sim", the figures that show a mechanism."""
    s = result.summary
    steps = result.steps
    dur = steps["duration_s"].to_numpy()
    tokens = (steps["prefill_tokens"] + steps["decode_tokens"]).to_numpy()
    out = {k: float(v) for k, v in s.items() if isinstance(v, (int, float)) and k != "burstiness"}
    out = {k: v for k, v in out.items() if k not in ("request_rate", "max_concurrency")}
    sim = s["sim"]
    out["sim"] = {
        "steps": int(sim["steps"]),
        "preemptions": int(sim["preemptions"]),
        "mean_batch_size": float(sim["mean_batch_size"]),
        "mean_tokens_per_step": float(tokens.mean()) if len(tokens) else 0.0,
        "mean_step_ms": float(dur.mean() * 1e3) if len(dur) else 0.0,
        "p99_step_ms": float(np.percentile(dur, 99) * 1e3) if len(dur) else 0.0,
        "kv_usage_peak": float(sim["kv_usage_peak"]),
        "prefix_cache_hit_rate": float(sim["prefix_cache_hit_rate"]),
        "num_kv_blocks": int(result.setup.memory.num_blocks),
        "attention_kernel": str(sim["priced_with"].get("attention_decode", "")),
        "kernel_family": str(sim.get("kernel_family") or "prior"),
    }
    return out


def mixture_outcome(cfg: SimConfig, before, after, changes, chosen) -> dict:
    return outcome(simulate(cfg, setup=mixture_setup(cfg, before, after, changes, chosen)))


Task = tuple[SimConfig, tuple[int, ...]]  # a config (seed, workload) and the changes applied


def run_tasks(
    tasks: list[Task],
    before: EngineSettings,
    after: EngineSettings,
    changes: list[Change],
    jobs: int | None = None,
    progress=None,
    cache: Path | None = None,
) -> list[dict]:
    """outcome() of every task, in order, simulated `jobs` at a time (every core by default;
    joblib's worker processes, which keep their pricing tables from one run to the next).
    `progress(done)` after each. With `cache` (a folder), each outcome is kept there as it
    finishes and a task already kept is not simulated again: an interrupted run resumes."""
    from joblib import Parallel, delayed

    quiet = [
        (replace(c, output=replace(c.output, report=False, progress=False)), s) for c, s in tasks
    ]
    keys = [task_key(c, s, before, after, changes) for c, s in quiet] if cache else []
    results: dict[int, dict] = {}
    for i, key in enumerate(keys):
        if (kept := _kept(cache / f"{key}.json")) is not None:
            results[i] = kept
    todo = [i for i in range(len(quiet)) if i not in results]

    def done(i: int, outcome: dict) -> None:
        results[i] = outcome
        if cache:
            write_json(cache / f"{keys[i]}.json", outcome)
        if progress:
            progress(len(results))

    if results and progress:
        progress(len(results))
    jobs = min(jobs or os.cpu_count() or 1, max(len(todo), 1))
    if jobs == 1:
        for i in todo:
            c, chosen = quiet[i]
            done(i, mixture_outcome(c, before, after, changes, chosen))
    else:
        runner = Parallel(n_jobs=jobs, return_as="generator")
        calls = (
            delayed(mixture_outcome)(quiet[i][0], before, after, changes, quiet[i][1]) for i in todo
        )
        for i, r in zip(todo, runner(calls), strict=True):
            done(i, r)
    return [results[i] for i in range(len(quiet))]


def task_key(cfg: SimConfig, chosen, before, after, changes: list[Change]) -> str:
    """A digest of everything one mixture's outcome depends on."""
    what = {
        "config": asdict(cfg),
        "chosen": list(chosen),
        "before": before.as_mapping(),
        "after": after.as_mapping(),
        "changes": [repr(c) for c in changes],
    }
    text = json.dumps(what, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _kept(path: Path) -> dict | None:
    """A kept outcome, or None when there is none (or it cannot be read: then it is rerun)."""
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def run_mixtures(
    cfg: SimConfig,
    before: EngineSettings,
    after: EngineSettings,
    changes: list[Change],
    subsets: Iterable[frozenset[int]],
    jobs: int | None = None,
) -> dict[frozenset[int], dict]:
    """outcome() of each mixture on cfg's workload (one seed: the same arrivals and lengths in
    every run)."""
    todo = sorted({frozenset(s) for s in subsets}, key=lambda s: (len(s), sorted(s)))
    tasks = [(cfg, tuple(sorted(s))) for s in todo]
    return dict(zip(todo, run_tasks(tasks, before, after, changes, jobs), strict=True))


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
    by_category_pct: dict[str, dict[str, float]]  # category -> metric -> its changes alone
    interaction_pct: dict[str, float]  # the change minus the categories' effects alone
    inert: list[int]  # changes with no effect at all, either way, on any seed
    inert_residual_pct: dict[str, float]  # after minus after-without-the-inert (0 if inert)
    minimal: list[int]  # smallest set found reproducing >= 90% of the headline change
    headline: str
    exact: bool  # Shapley values over every subset (else sampled orders)
    orders: int  # random orders sampled per seed (0 when exact)
    simulations_run: int

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


ORDERS_SEED = 20  # the random orders sampled Shapley values follow (fixed: reproducible)
MINIMAL_SHARE = 0.9  # the minimal set reproduces at least this share of the headline change


def worst_metric(change_pct: dict[str, float]) -> str:
    """The metric that got worst (lowest throughput change, highest latency change); the
    largest change when none got worse."""
    worse = {m: (v if LOWER_IS_BETTER[m] else -v) for m, v in change_pct.items()}
    m = max(worse, key=lambda k: worse[k])  # ties: the first in METRICS' order
    if worse[m] > 0:
        return m
    return max(change_pct, key=lambda k: abs(change_pct[k]))


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
    `progress(done, total)` as runs finish; `cache`: see run_tasks."""
    from sim.scenarios.upgrade_diff.attribution import (
        Memo,
        minimal_set,
        one_at_a_time,
        random_orders,
        shapley,
    )

    n = len(changes)
    seeds = list(seeds)
    everything = frozenset(range(n))
    runs: dict[tuple[int, frozenset[int]], dict] = {}
    planned = [0]

    def run(subsets: Iterable[frozenset[int]]) -> None:
        todo = [(seed, s) for s in _ordered(subsets) for seed in seeds if (seed, s) not in runs]
        if not todo:
            return
        done0 = len(runs)
        planned[0] = max(planned[0], done0 + len(todo))

        def tick(k: int) -> None:
            if progress:
                progress(done0 + k, planned[0])

        tasks = [(replace(cfg, seed=seed), tuple(sorted(s))) for seed, s in todo]
        for key, r in zip(
            todo, run_tasks(tasks, before, after, changes, jobs, tick, cache), strict=True
        ):
            runs[key] = r

    by_cat: dict[str, frozenset[int]] = {}
    for i, c in enumerate(changes):
        by_cat[c.category.value] = by_cat.get(c.category.value, frozenset()) | {i}
    first = {frozenset(), everything}
    first |= {frozenset({i}) for i in range(n)} | {everything - {i} for i in range(n)}
    first |= set(by_cat.values())
    planned[0] = len(first) * len(seeds)
    run(first)

    def same(x: frozenset[int], y: frozenset[int]) -> bool:
        return all(_numbers(runs[(d, x)]) == _numbers(runs[(d, y)]) for d in seeds)

    inert = [
        i
        for i in range(n)
        if same(frozenset({i}), frozenset()) and same(everything - {i}, everything)
    ]
    active = [i for i in range(n) if i not in inert]
    k = len(active)
    exact = 2**k <= budget
    orders = 0 if exact else max(2, 2 * (budget // (2 * max(k - 1, 1))))
    if exact:
        game = [frozenset(active[j] for j in s) for s in _all_subsets(k)]
    else:
        game = {frozenset(), frozenset(active)}
        for seq in random_orders(k, orders, np.random.default_rng(ORDERS_SEED)):
            game |= {frozenset(active[j] for j in seq[:m]) for m in range(1, k)}
    planned[0] = len(runs) + len(seeds) * len(set(game) - {s for _, s in runs})
    run(game)

    def value(seed: int, metric: str) -> Memo:
        """The metric with a subset of the active changes (game indices) applied."""

        def simulate_one(s: frozenset[int]) -> float:
            key = (seed, frozenset(active[j] for j in s))
            if key not in runs:  # ddmin may ask for a subset not run yet
                run([key[1]])
            return runs[key][metric]

        return Memo(simulate_one)

    def pct(seed: int, x: float, metric: str) -> float:
        base = runs[(seed, frozenset())][metric]
        return x / base * 100 if base else 0.0

    def v(seed: int, s, metric: str) -> float:
        return runs[(seed, frozenset(s))][metric]

    shap, ci, added, removed, change, change_ci = {}, {}, {}, {}, {}, {}
    residual, inter = {}, {}
    cats = {c.value: {} for c in Category}
    for metric in METRICS:
        per_seed, per_se = [], []
        for seed in seeds:
            phi = shapley(k, value(seed, metric), np.random.default_rng(ORDERS_SEED), orders, exact)
            full = np.zeros(n)
            se = np.zeros(n)
            full[active] = [pct(seed, x, metric) for x in phi.values]
            se[active] = [pct(seed, x, metric) for x in phi.std_errors]
            per_seed.append(full)
            per_se.append(se)
        stack, ses = (
            np.array(per_seed).reshape(len(seeds), n),
            np.array(per_se).reshape(len(seeds), n),
        )
        spread = stack.std(axis=0, ddof=1) / np.sqrt(len(seeds)) if len(seeds) > 1 else 0.0
        sampling = np.sqrt(np.mean(ses**2, axis=0) / len(seeds))
        shap[metric] = stack.mean(axis=0).tolist()
        ci[metric] = (1.96 * np.sqrt(spread**2 + sampling**2)).tolist()
        one = [one_at_a_time(n, Memo(lambda s, d=d, m=metric: v(d, s, m))) for d in seeds]
        # per seed, in percent: (seeds x 2 x n) -> the mean over seeds of each direction
        both = np.array(
            [
                [[pct(d, x, metric) for x in way] for way in o]
                for d, o in zip(seeds, one, strict=True)
            ]
        )
        added[metric], removed[metric] = both.reshape(len(seeds), 2, n).mean(axis=0).tolist()
        totals = [pct(d, v(d, everything, metric) - v(d, (), metric), metric) for d in seeds]
        change[metric] = float(np.mean(totals))
        change_ci[metric] = (
            float(1.96 * np.std(totals, ddof=1) / np.sqrt(len(seeds))) if len(seeds) > 1 else 0.0
        )
        residual[metric] = float(
            np.mean(
                [pct(d, v(d, everything, metric) - v(d, active, metric), metric) for d in seeds]
            )
        )
        alone = 0.0
        for cat in cats:
            members = by_cat.get(cat)
            effect = (
                float(
                    np.mean(
                        [pct(d, v(d, members, metric) - v(d, (), metric), metric) for d in seeds]
                    )
                )
                if members
                else 0.0
            )
            cats[cat][metric] = effect
            alone += effect
        inter[metric] = change[metric] - alone
    if headline == "auto":
        headline = worst_metric(change)
    minimal = (
        sorted(active[j] for j in minimal_set(k, value(seeds[0], headline), MINIMAL_SHARE))
        if k
        else []
    )
    return Attribution(
        changes,
        seeds,
        runs,
        change,
        change_ci,
        shap,
        ci,
        added,
        removed,
        cats,
        inter,
        inert,
        residual,
        minimal,
        headline,
        exact,
        orders,
        len(runs),
    )


def _numbers(outcome: dict) -> dict:
    """An outcome's numbers (the bench metrics and the simulator's figures): two runs with the
    same numbers did the same thing, whatever the kernel tables they were priced with are
    called."""
    sim = {k: v for k, v in outcome["sim"].items() if not isinstance(v, str)}
    return {k: v for k, v in outcome.items() if k != "sim"} | sim


def mean_outcome(outcomes: list[dict]) -> dict:
    """The mean of each number over several seeds' outcomes (text from the first)."""
    first = outcomes[0]
    out = {k: float(np.mean([o[k] for o in outcomes])) for k in first if k != "sim"}
    out["sim"] = {
        k: (v if isinstance(v, str) else float(np.mean([o["sim"][k] for o in outcomes])))
        for k, v in first["sim"].items()
    }
    return out


def _ordered(subsets: Iterable[frozenset[int]]) -> list[frozenset[int]]:
    return sorted({frozenset(s) for s in subsets}, key=lambda s: (len(s), sorted(s)))


def _all_subsets(k: int) -> list[tuple[int, ...]]:
    from itertools import combinations

    return [s for m in range(k + 1) for s in combinations(range(k), m)]
