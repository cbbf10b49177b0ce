"""Running the cases of scenario=validate, and what one case's run yields (`CaseResult`): its
predicted metrics, the KS tests of its per-request distributions against the measured ones,
and the facts of the simulation that explain large errors (sim/scenarios/validate/causes.py).
Cases run through sim/scenarios/fanout.py (joblib, one process each); one that cannot be
simulated becomes a result with its reason as `error`, and the other cases still run. So does
one whose run gives nothing to compare: no request finished (every one rejected, or none done
when the run stopped), or a measured metric predicted 0, NaN or infinite: such a prediction is
never reported as a number (`no_prediction`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from sim.errors import UserError
from sim.run.calibration import Terms, workload_point
from sim.run.setup import Setup
from sim.run.simulate import simulate
from sim.run.summary import RunResult
from sim.scenarios.fanout import fan_out
from sim.scenarios.validate import engine_queue
from sim.scenarios.validate.cases import Case
from sim.scenarios.validate.engine_queue import ENGINE_QUEUE
from sim.workload.bench_results import measured_requests


@dataclass(frozen=True, slots=True)
class Facts:
    """What a case's simulation used and saw, for explaining its errors."""

    rule_set: str  # the engine release whose rules ran
    version: str  # the engine release the case names
    cost_profile: str
    calibrated: bool  # whether the GPU has measured kernel tables
    priced_with: dict[str, str]  # kernel kind -> the table (or "prior...") that priced it
    moe: bool
    dtype: str  # the weights' dtype
    preemptions: int
    rejected: int
    kv_usage_peak: float
    concurrency: int | None  # a closed loop's clients
    scheduler: str = ""  # the scheduler family that ran: vllm_v0, vllm_v1, sglang, trtllm


@dataclass(frozen=True, slots=True)
class KsTest:
    """A two-sample Kolmogorov-Smirnov test, measured against predicted."""

    statistic: float
    pvalue: float
    num_measured: int
    num_predicted: int

    @property
    def summary(self) -> dict:
        n = [self.num_measured, self.num_predicted]
        return {"statistic": self.statistic, "pvalue": self.pvalue, "n": n}


@dataclass(frozen=True, slots=True)
class CaseResult:
    """One case's run: its predictions, or the reason it could not be simulated (`error`)."""

    id: str
    error: str | None = None
    predicted: dict[str, float | None] = field(default_factory=dict)  # metric -> value
    facts: Facts | None = None  # None when the case could not be simulated
    ks: dict[str, KsTest] = field(default_factory=dict)  # ttft / tpot / itl -> its test
    ks_error: str | None = None  # why the per-request measurements could not be read
    audit: dict | None = None  # the run's physics audit (summary.json `audit`)
    point: dict | None = None  # where the run lies in a calibration's envelope dimensions
    calibration: dict | None = None  # the run's summary.json `calibration`, if calibrated


def ks(measured: np.ndarray, predicted: np.ndarray) -> KsTest | None:
    """The KS test of the finite values of each, or None with fewer than two on a side."""
    # scipy.stats takes about a second to import: only cases with per-request measurements pay it
    from scipy.stats import ks_2samp

    m = measured[np.isfinite(measured)]
    p = predicted[np.isfinite(predicted)]
    if len(m) < 2 or len(p) < 2:
        return None
    r = ks_2samp(m, p)
    return KsTest(float(r.statistic), float(r.pvalue), len(m), len(p))


def run_case(case: Case, terms: Terms | None = None) -> CaseResult:
    """Simulate one case (with a deployment's calibrated `terms`, when given: python -m
    sim.calibrate --runs); its predicted metrics, KS tests and the facts that explain errors."""
    if case.error:
        return CaseResult(case.id, case.error)
    try:
        setup = Setup.from_config(case.config, terms=terms) if terms is not None else None
        result = simulate(case.config, setup=setup)
    except UserError as exc:
        return CaseResult(case.id, str(exc))
    except Exception as exc:  # one broken case must not stop the others
        return CaseResult(case.id, f"{type(exc).__name__}: {exc}")
    predicted = {k: _lookup(result.summary, k) for k in case.measured}
    from_queue = case.data.get("ttft_from") == ENGINE_QUEUE
    if from_queue:  # the source counts TTFT from the engine's read (engine_queue.py)
        predicted |= engine_queue.rebased(result, predicted)
    why_not = no_prediction(result, predicted)
    if why_not:
        return CaseResult(case.id, why_not)
    tests, ks_error = _ks_tests(case.requests, result, from_queue) if case.requests else ({}, None)
    s = result.summary
    return CaseResult(
        case.id,
        predicted=predicted,
        facts=_facts(case, result),
        ks=tests,
        ks_error=ks_error,
        audit=result.summary["audit"],
        point=workload_point(result.workload) | {"batch": s["sim"]["mean_batch_size"]},
        calibration=s.get("calibration"),
    )


def no_prediction(result: RunResult, predicted: dict[str, float | None]) -> str | None:
    """Why a run that completed has no prediction to compare (None: it has one): no request
    finished, with how the requests ended and the first rejection's reason; else the measured
    metrics predicted 0, NaN or infinite (vllm bench's summary says 0 where no request
    gives a sample)."""
    record = result.summary["sim"]
    total, finished = int(record["requests"]), int(record["finished"])
    if finished == 0:
        rejected, unfinished = int(record["rejected"]), int(record["unfinished_at_time_limit"])
        ends = []
        if rejected:
            reasons = result.requests["reject_reason"]
            first = next((str(r) for r in reasons if r), "no reason recorded")
            ends.append(f"{rejected} rejected (the first: {first})")
        if unfinished:
            stop = record.get("stopped_at_s")
            at = f" at {stop:.6g} s" if stop is not None else ""
            ends.append(f"{unfinished} unfinished when the run stopped{at}")
        return f"no prediction: none of the {total} requests finished: " + ", ".join(ends)
    bad = {k: v for k, v in predicted.items() if v is not None and (not math.isfinite(v) or v == 0)}
    if bad:
        what = ", ".join(f"{k} {_shown(v)}" for k, v in bad.items())
        return (
            f"no prediction: predicted {what} ({finished} of {total} requests finished; a zero "
            "or NaN is never reported as a prediction)"
        )
    return None


def _shown(value: float) -> str:
    return "NaN" if math.isnan(value) else "infinite" if math.isinf(value) else "0"


def _facts(case: Case, result: RunResult) -> Facts:
    s = result.summary
    return Facts(
        rule_set=result.setup.settings.rule_set,
        version=result.setup.settings.version,
        cost_profile=s["sim"]["cost_profile"],
        calibrated=s["sim"]["cost_profile_calibrated"],
        priced_with=s["sim"]["priced_with"],
        moe=result.setup.model.moe is not None,
        dtype=result.setup.model.resolve_weight_dtype(case.config.dtype),
        preemptions=s["sim"]["preemptions"],
        rejected=s["failed"],
        kv_usage_peak=s["sim"]["kv_usage_peak"],
        concurrency=case.config.workload.concurrency,
        scheduler=str(result.setup.settings.scheduler),
    )


def _ks_tests(
    requests: str, result: RunResult, from_queue: bool = False
) -> tuple[dict[str, KsTest], str | None]:
    """(the KS test of each quantity measured per request, why none could be read or None);
    with from_queue the predicted TTFTs count from the engine's read (engine_queue.py)."""
    try:
        measured = measured_requests(requests)
    except UserError as exc:
        return {}, str(exc)
    frame = engine_queue.from_engine_queue(result) if from_queue else result.requests
    predicted = {
        "ttft": frame["ttft_s"].to_numpy(dtype=float),
        "tpot": result.requests["tpot_s"].to_numpy(dtype=float),
        "itl": result.itl_s,
    }
    return {k: t for k, v in measured.items() if (t := ks(v, predicted[k]))}, None


def _lookup(summary: dict, key: str) -> float | None:
    """A summary.json value by its dotted key (sim.preemptions), None where absent."""
    value = summary
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return float(value) if isinstance(value, (int, float)) else None


def run_all(
    cases: list[Case], jobs: int | None, progress: Callable[[int, int], None] | None = None
) -> list[CaseResult]:
    """Every case's result, in case order, simulated `jobs` at a time. `progress(done, total)`
    counts every case: those that could not load are done from the start."""
    todo = [c for c in cases if not c.error]
    num_errors = len(cases) - len(todo)

    def counted(done: int, _total: int) -> None:
        progress(num_errors + done, len(cases))

    ran = iter(fan_out(run_case, [(c,) for c in todo], jobs, counted if progress else None))
    return [CaseResult(c.id, c.error) if c.error else next(ran) for c in cases]
