"""The configuration difference between two engine versions, and mixtures of the two.

upgrade_diff attributes a metric's change to the settings that changed. A change is one
setting whose resolved value differs between the `before` and `after` EngineSettings (as
resolve() returns them, before the memory plan: what an engine derives from its KV pool at
start-up, such as SGLang's max_running_requests, is re-derived for every mixture), or the
kernels measured for each version, which price the same operations differently. mixture()
applies any subset of the changes to `before`; with none it is `before`, with all `after`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np

from sim.config import SimConfig
from sim.errors import UserError
from sim.hardware import load_hardware
from sim.model_config import load_model
from sim.profiles import resolve
from sim.run import Setup, simulate
from sim.settings import CATEGORY, SETTING_NAMES, Category, EngineSettings

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
    pa = Setup.from_settings(cfg, a, kernel_version=None).pricing
    pb = Setup.from_settings(cfg, b, kernel_version=None).pricing
    if pa.family != pb.family:
        out.append(
            Change(KERNELS, Category.KERNELS, pa.family, pb.family, pa.source, pb.source, KERNELS)
        )
    return out


def mixture(
    before: EngineSettings, after: EngineSettings, changes: list[Change], chosen: Iterable[int]
) -> tuple[EngineSettings, str]:
    """`before` with the chosen changes applied: (the settings, the version whose measured
    kernels price it)."""
    picked = [changes[i] for i in chosen]
    fields = {c.name: c.after for c in picked if c.name != KERNELS}
    rules = dict(before.rules)
    rules.update({c.name: c.rule_after for c in picked if c.name != KERNELS})
    mixed = replace(before, **fields, rules=rules)
    kernels = after.version if any(c.name == KERNELS for c in picked) else before.version
    return mixed, kernels


def mixture_setup(
    cfg: SimConfig, before: EngineSettings, after: EngineSettings, changes, chosen
) -> Setup:
    settings, kernels = mixture(before, after, changes, chosen)
    return Setup.from_settings(cfg, settings, kernel_version=kernels)


METRICS = (
    "request_throughput",
    "output_throughput",
    "mean_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "p99_tpot_ms",
)


def run_mixtures(
    cfg: SimConfig,
    before: EngineSettings,
    after: EngineSettings,
    changes: list[Change],
    subsets: Iterable[frozenset[int]],
    jobs: int | None = None,
) -> dict[frozenset[int], dict[str, float]]:
    """The METRICS of each mixture, simulated in parallel (joblib, every core by default) on
    cfg's workload: same seed, so the same arrivals and lengths in every run."""
    from joblib import Parallel, delayed

    quiet = replace(cfg, output=replace(cfg.output, report=False, progress=False))
    todo = sorted({frozenset(s) for s in subsets}, key=lambda s: (len(s), sorted(s)))
    results = Parallel(n_jobs=jobs or -1)(
        delayed(_metrics)(quiet, before, after, changes, tuple(sorted(s))) for s in todo
    )
    return dict(zip(todo, results, strict=True))


def _metrics(cfg, before, after, changes, chosen) -> dict[str, float]:
    summary = simulate(cfg, setup=mixture_setup(cfg, before, after, changes, chosen)).summary
    return {m: float(summary[m]) for m in METRICS}


@dataclass(frozen=True, slots=True)
class Attribution:
    """What each change does to each metric, in percent of the before version's value."""

    changes: list[Change]
    before: dict[str, float]  # metrics of the before version (seed 0)
    after: dict[str, float]  # ... and of the after version
    change_pct: dict[str, float]  # after vs before, mean over seeds
    shapley_pct: dict[str, list[float]]  # metric -> per change, mean over seeds
    ci_pct: dict[str, list[float]]  # metric -> half-width of the 95% interval per change
    added_pct: dict[str, list[float]]  # before + this change alone
    removed_pct: dict[str, list[float]]  # after without this change
    interaction_pct: dict[str, float]  # the change minus the sum of the one-at-a-time effects
    minimal: list[int]  # smallest set found reproducing >= 90% of the headline change
    exact: bool  # Shapley values over every subset (else sampled orders)
    simulations_run: int


def attribute(
    cfg: SimConfig,
    before: EngineSettings,
    after: EngineSettings,
    changes: list[Change],
    seeds: Iterable[int] = (0,),
    orders: int = 16,
    headline: str = "output_throughput",
    jobs: int | None = None,
) -> Attribution:
    """Shapley values (exact up to EXACT_LIMIT changes, else from `orders` random orders),
    one-at-a-time effects both ways and a minimal set, for every metric, over several seeds
    (each seed a different draw of the same workload, shared by every mixture)."""
    from sim.attribution import EXACT_LIMIT, Memo, minimal_set, one_at_a_time, shapley

    n = len(changes)
    seeds = list(seeds)
    wanted = _subsets(n, orders)
    runs: dict[tuple[int, frozenset[int]], dict[str, float]] = {}
    for seed in seeds:  # one parallel batch per seed
        done = run_mixtures(replace(cfg, seed=seed), before, after, changes, wanted, jobs)
        runs.update({(seed, s): v for s, v in done.items()})

    def value(seed: int, metric: str) -> Memo:
        def simulate_one(s: frozenset[int]) -> float:
            if (seed, s) not in runs:  # ddmin may ask for a subset not run yet
                one = run_mixtures(replace(cfg, seed=seed), before, after, changes, [s], 1)
                runs[(seed, s)] = one[s]
            return runs[(seed, s)][metric]

        return Memo(simulate_one)

    everything = frozenset(range(n))
    shap, ci, added, removed, inter, change = {}, {}, {}, {}, {}, {}
    for metric in METRICS:
        per_seed, per_added, per_removed, per_change, per_se = [], [], [], [], []
        for seed in seeds:
            v = value(seed, metric)
            base = v(()) or 1.0
            phi = shapley(n, v, np.random.default_rng(ORDERS_SEED), orders)
            a_eff, r_eff = one_at_a_time(n, v)
            per_seed.append(np.array(phi.values) / base * 100)
            per_se.append(np.array(phi.std_errors) / base * 100)
            per_added.append(np.array(a_eff) / base * 100)
            per_removed.append(np.array(r_eff) / base * 100)
            per_change.append((v(everything) - v(())) / base * 100)
        stack = np.array(per_seed).reshape(len(seeds), n)
        spread = stack.std(axis=0, ddof=1) / np.sqrt(len(seeds)) if len(seeds) > 1 else 0.0
        sampling = np.sqrt(np.mean(np.array(per_se).reshape(len(seeds), n) ** 2, axis=0))
        shap[metric] = stack.mean(axis=0).tolist()
        ci[metric] = (1.96 * np.sqrt(spread**2 + sampling**2 / len(seeds))).tolist()
        added[metric] = np.array(per_added).reshape(len(seeds), n).mean(axis=0).tolist()
        removed[metric] = np.array(per_removed).reshape(len(seeds), n).mean(axis=0).tolist()
        change[metric] = float(np.mean(per_change))
        inter[metric] = change[metric] - float(np.sum(added[metric]))
    minimal = minimal_set(n, value(seeds[0], headline)) if n else []
    first = seeds[0]
    return Attribution(
        changes,
        runs[(first, frozenset())],
        runs[(first, everything)],
        change,
        shap,
        ci,
        added,
        removed,
        inter,
        minimal,
        n <= EXACT_LIMIT,
        len(runs),
    )


ORDERS_SEED = 20  # the random orders sampled Shapley values follow (fixed: reproducible)


def _subsets(n: int, orders: int) -> list[frozenset[int]]:
    """What attribute() reads: every subset when exact; else the one-at-a-time subsets and
    the prefixes of the random orders shapley() will follow (same generator, same seed)."""
    from sim.attribution import EXACT_LIMIT, subsets_needed

    if n <= EXACT_LIMIT:
        return subsets_needed(n)
    everything = frozenset(range(n))
    out = {frozenset(), everything}
    out |= {frozenset({i}) for i in range(n)} | {everything - {i} for i in range(n)}
    rng = np.random.default_rng(ORDERS_SEED)
    for _ in range(max(1, orders // 2)):
        order = rng.permutation(n).tolist()
        for sequence in (order, order[::-1]):
            out |= {frozenset(sequence[:k]) for k in range(1, n)}
    return sorted(out, key=lambda s: (len(s), sorted(s)))
