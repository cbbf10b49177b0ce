"""Fitting a deployment's terms (sim/run/calibration.py) to its runs: bounded least squares on
the log of predicted over measured (TPOT, TTFT, output throughput of each run), with a weak
prior pulling each term to its uncalibrated value, the simulator in the loop.

Each iteration linearises: the runs simulated at the current terms and at one small step of
each fitted term (forward differences, Term.step; every simulation is deterministic, so the
step measures a slope, not noise), then scipy's bounded linear least
squares (lsq_linear) gives the move, halved until the runs' misfit falls. It stops when a move
is under 1% of every term's spread (or after MAX_ITER). Four runs and four terms: five
simulations per run per iteration, run on every core (sim/scenarios/fanout.py).

A fit takes no more terms than runs, and no more of the terms read from one figure than runs
that measured it (decode_scale and cpu_step_ms show in TPOT and throughput, prefill_scale and
frontend_ms in TTFT): one run gives decode_scale, two add prefill_scale, three frontend_ms,
four cpu_step_ms (ORDER). The
uncertainty of each term is its standard error from the last linearisation (the residuals'
spread over their degrees of freedom). The leave-one-run-out error of a run is what it is
predicted at, simulated, with the terms fitted (linearised at the final terms) to the others."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sim.errors import UserError
from sim.run.calibration import TERM, TERMS, Terms
from sim.scenarios.fanout import fan_out
from sim.scenarios.fit_runs.inputs import Run
from sim.scenarios.validate.runs import CaseResult, run_case

# The prior's weight: a term one prior_sd from its prior weighs as one figure off by the runs'
# own misfit (the residuals' spread over their degrees of freedom, at the current terms), at
# least 0.2% and at most 8%, the uncalibrated simulator's typical TPOT error on the validation
# suite: runs the terms reproduce closely pin the terms; runs they cannot, less (the prior
# then holds a term the runs barely tell apart from another near its uncalibrated value).
PRIOR_WEIGHT = (0.002, 0.08)
MAX_ITER = 6
CONVERGED = 0.01  # a move under this share of every term's prior_sd ends the fit
# the order terms are taken in, per figure, when the runs allow fewer than all
# the order terms are taken in when the runs allow fewer than all: no more terms than runs,
# and no more of those read from one figure than runs that measured it
ORDER = ("decode_scale", "prefill_scale", "frontend_ms", "cpu_step_ms")
READS = {"tpot": "TPOT or output throughput", "ttft": "TTFT"}


def measures(run: Run, metric: str) -> bool:
    return metric in run.keys or (metric == "tpot" and "throughput" in run.keys)


def choose_terms(runs: list[Run], asked: list[str] | None) -> list[str]:
    """The terms to fit: `asked` if the runs can tell them apart, else as many as they can, in
    ORDER."""
    counts = {m: sum(measures(r, m) for r in runs) for m in READS}
    if asked is None:
        chosen: list[str] = []
        for name in ORDER:
            metric = TERM[name].metric
            if len(chosen) < len(runs) and _reading(chosen, metric) < counts[metric]:
                chosen.append(name)
    else:
        unknown = [n for n in asked if n not in TERM]
        if unknown:
            raise UserError(f"--terms {unknown[0]}: no such term; choose from {', '.join(TERM)}")
        chosen = list(dict.fromkeys(asked))
        if len(chosen) > len(runs):
            raise UserError(
                f"--terms {','.join(chosen)}: {len(chosen)} terms need at least {len(chosen)} "
                f"runs; {len(runs)} given: add runs at other concurrencies or rates, or fit fewer "
                "terms"
            )
        for metric, n in counts.items():
            mine = [t for t in chosen if TERM[t].metric == metric]
            if len(mine) > n:
                raise UserError(
                    f"--terms {','.join(mine)}: {len(mine)} terms read from {READS[metric]} need "
                    f"at least {len(mine)} runs that measured it; the runs give {n}: add such "
                    "runs, or fit fewer terms"
                )
    if not chosen:
        raise UserError("the runs measured nothing a term is read from (TPOT, TTFT, throughput)")
    return [t.name for t in TERMS if t.name in chosen]


def _reading(chosen: list[str], metric: str) -> int:
    return sum(TERM[n].metric == metric for n in chosen)


@dataclass(frozen=True)
class Fit:
    names: list[str]  # the fitted terms
    terms: dict[str, float]  # every term's value (the priors where not fitted)
    sd: dict[str, float]  # standard error of each fitted term
    at_bound: list[str]  # fitted terms the fit left at a bound
    before: list[CaseResult]  # each run at the priors
    after: list[CaseResult]  # ... and at the fitted terms
    held_out: list[CaseResult | None]  # each run predicted from the others (None: one run)
    held_out_terms: list[dict | None]
    iterations: int
    simulations: int
    seconds: float


class Simulations:
    """Each run simulated at a set of terms, once (results kept by run and terms)."""

    def __init__(self, runs: list[Run], jobs: int | None):
        self.runs, self.jobs = runs, jobs
        self.kept: dict[tuple, CaseResult] = {}

    def at(self, points: list[dict], runs: list[Run] | None = None) -> list[list[CaseResult]]:
        runs = self.runs if runs is None else runs
        todo = {}
        for p in points:
            for run in runs:
                key = (run.id, _key(p))
                if key not in self.kept:
                    todo[key] = (run.case, Terms.of(p))
        if todo:
            for key, result in zip(
                todo, fan_out(run_case, list(todo.values()), self.jobs), strict=True
            ):
                self.kept[key] = result
        return [[self.kept[(run.id, _key(p))] for run in runs] for p in points]

    @property
    def count(self) -> int:
        return len(self.kept)


def _key(point: dict) -> tuple:
    return tuple(sorted((k, round(float(v), 12)) for k, v in point.items()))


def unphysical(results: list[CaseResult]) -> bool:
    """Whether a run at these terms steps faster than its GPU allows (the physics audit's
    violations, or its error where SIM_AUDIT=strict makes them one): terms the fit must not
    take, however well they would match."""
    return any(
        (res.error or "").startswith("AuditError") or (res.audit or {}).get("violations")
        for res in results
    )


def residuals(runs: list[Run], results: list[CaseResult], terms: dict) -> np.ndarray:
    """log(predicted / measured) of every run's figures, in run order."""
    out = []
    for run, res in zip(runs, results, strict=True):
        if res.error:
            shown = ", ".join(f"{k} {v:g}" for k, v in terms.items())
            raise UserError(f"run {run.id} cannot be simulated at {shown}: {res.error}")
        for key in run.keys.values():
            out.append(math.log(res.predicted[key] / run.case.measured[key]))
    return np.array(out)


def fit(
    runs: list[Run], names: list[str], jobs: int | None = None,
    say: Callable[[str], None] = lambda line: None, held_out: bool = True,
) -> Fit:  # fmt: skip
    """Fit `names` to `runs` (see the module's doc)."""
    from scipy.optimize import lsq_linear  # (scipy's import: only a fit pays it)

    started = time.perf_counter()
    sims = Simulations(runs, jobs)
    prior = {t.name: t.prior for t in TERMS}
    spec = [TERM[n] for n in names]
    sd = np.array([t.prior_sd for t in spec])
    lo, hi = np.array([t.low for t in spec]), np.array([t.high for t in spec])
    p0 = np.array([t.prior for t in spec])
    h = np.array([t.step for t in spec])

    def full(theta) -> dict:
        return prior | {n: float(v) for n, v in zip(names, theta, strict=True)}

    def weight(r) -> float:
        spread = math.sqrt(float(r @ r) / max(len(r) - len(names), 1))
        return min(max(spread, PRIOR_WEIGHT[0]), PRIOR_WEIGHT[1])

    def cost(r, theta, w) -> float:
        return float(r @ r + w**2 * np.sum(((theta - p0) / sd) ** 2))

    theta = p0.copy()
    before = sims.at([full(theta)])[0]
    r = residuals(runs, before, full(theta))
    say(f"at the priors: {_misfit(r)}")
    A = None
    iterations = 0
    for iterations in range(1, MAX_ITER + 1):
        steps = np.where(theta + h > hi, -h, h)  # every term's step simulated at once (kept)
        sims.at([full(theta + steps[i] * np.eye(len(names))[i]) for i in range(len(names))])
        J = np.column_stack(
            [_slope(sims, runs, full, theta, i, h[i], r, lo, hi) for i in range(len(names))]
        )
        w = weight(r)
        A = np.vstack([J, w * np.diag(1 / sd)])
        b = -np.concatenate([r, w * (theta - p0) / sd])
        delta = lsq_linear(A, b, bounds=(lo - theta, hi - theta + 1e-15)).x
        moved = False
        for _ in range(4):  # halve a move that does not lower the misfit
            new = np.clip(theta + delta, lo, hi)
            results = sims.at([full(new)])[0]
            if unphysical(results):  # past what the GPU allows: a shorter move
                delta = delta / 2
                continue
            r_new = residuals(runs, results, full(new))
            if cost(r_new, new, w) <= cost(r, theta, w):
                theta, r, moved = new, r_new, True
                break
            delta = delta / 2
        shown = ", ".join(f"{n} {v:.4g}" for n, v in zip(names, theta, strict=True))
        say(f"iteration {iterations}: {shown}: {_misfit(r)} ({sims.count} simulations)")
        if not moved or np.max(np.abs(delta) / sd) < CONVERGED:
            break
    after = sims.at([full(theta)])[0]
    m, n = len(r), len(names)
    s2 = float(r @ r) / max(m - n, 1)
    cov = s2 * np.linalg.pinv(A.T @ A)
    se = np.sqrt(np.maximum(np.diag(cov), 0.0))
    span = hi - lo
    at_bound = [
        name for name, v, a, z, w in zip(names, theta, lo, hi, span, strict=True)
        if min(v - a, z - v) <= 1e-6 * w
    ]  # fmt: skip
    loo, loo_terms = [None] * len(runs), [None] * len(runs)
    if held_out and len(runs) > 1:
        loo_terms = _held_out_terms(runs, r, A, theta, p0, sd, lo, hi, w, lsq_linear)
        points = [full(t) for t in loo_terms]
        loo = [sims.at([p], [run])[0][0] for p, run in zip(points, runs, strict=True)]
        loo_terms = points
    return Fit(
        names, full(theta), dict(zip(names, map(float, se), strict=True)), at_bound,
        before, after, loo, loo_terms, iterations, sims.count,
        time.perf_counter() - started,
    )  # fmt: skip


def _slope(sims, runs, full, theta, i, h, r, lo, hi) -> np.ndarray:
    """The residuals' forward difference in term i (backward at its upper bound, or where the
    step forward would run faster than the GPU allows; zero where neither way is possible)."""
    for step in (h, -h) if theta[i] + h <= hi[i] else (-h,):
        if not lo[i] <= theta[i] + step <= hi[i]:
            continue
        moved = theta.copy()
        moved[i] += step
        results = sims.at([full(moved)])[0]
        if not unphysical(results):
            return (residuals(runs, results, full(moved)) - r) / step
    return np.zeros(len(r))


def _held_out_terms(runs, r, A, theta, p0, sd, lo, hi, w, lsq_linear) -> list[np.ndarray]:
    """For each run, the terms fitted to the others (from the final linearisation)."""
    J = A[: len(r)]
    rows, start = [], 0
    for run in runs:
        rows.append(range(start, start + len(run.keys)))
        start += len(run.keys)
    out = []
    for mine in rows:
        keep = [i for i in range(len(r)) if i not in mine]
        Ak = np.vstack([J[keep], w * np.diag(1 / sd)])
        bk = -np.concatenate([r[keep], w * (theta - p0) / sd])
        delta = lsq_linear(Ak, bk, bounds=(lo - theta, hi - theta + 1e-15)).x
        out.append(np.clip(theta + delta, lo, hi))
    return out


def _misfit(r: np.ndarray) -> str:
    e = np.abs(np.expm1(r)) * 100
    return f"median |error| {np.median(e):.1f}%, worst {np.max(e):.1f}%"


def errors(run: Run, result: CaseResult | None) -> dict[str, float] | None:
    """predicted / measured - 1 of each of the run's figures (None without a result)."""
    if result is None or result.error:
        return None
    return {key: result.predicted[key] / run.case.measured[key] - 1 for key in run.keys.values()}
