"""A validation: cases, their results, and what comparing them gives. The table of errors
(`Row`, one per case and metric: validation.csv; one per case the simulator refused), the
accuracy over it (`Accuracy`: median and p90 absolute percent error per metric, overall, by
slice and per combined slice GPU x dtype x engine family x workload kind), and `Validation`,
whose `summary` is summary.json."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from sim.run.findings import merge_records
from sim.scenarios.validate.cases import Case
from sim.scenarios.validate.runs import CaseResult, KsTest

SLICES = ("hardware", "engine", "workload", "model")  # the Row fields the accuracy is sliced by
COMBINED = ("hardware", "dtype", "family", "workload")  # the slice: GPU x dtype x ...
# The headline quantities and, per case, the metric that stands for each: the first of its
# metrics the case reports with a finite error ("whichever each case reports").
HEADLINE = {
    "TPOT": ("mean_tpot_ms", "median_tpot_ms", "p50_tpot_ms"),
    "ITL": ("mean_itl_ms", "median_itl_ms", "p50_itl_ms"),
    "output throughput": ("output_throughput",),
    "TTFT": ("mean_ttft_ms", "median_ttft_ms", "p50_ttft_ms"),
}
SLICE_MIN_RUNS = 5  # a combined slice is judged with this many runs reporting a quantity
SLICE_LIMIT_PCT = 25.0  # ... and marked when its median |error| on it is worse than this
REFUSED = "-"  # the metric of the one row of a case the simulator refused


@dataclass(frozen=True, slots=True)
class Row:
    """One measured metric of a case against its prediction; or (metric "-") a case the
    simulator refused. `reason` says why a row has no error or an odd one ("" when fine)."""

    case: str
    metric: str
    measured: float | None  # None where the source gives no number
    predicted: float | None  # None where the simulation does not report the metric
    error_pct: float | None  # (predicted - measured) / measured, in percent; None: see reason
    hardware: str
    engine: str
    workload: str  # the workload kind: closed_loop, poisson, ...
    model: str
    flags: str  # the case's data-quality flags, comma-separated
    reason: str = ""
    dtype: str = "?"  # the weights' dtype: the case's own, else the one the simulation used
    family: str = "?"  # engine family: vllm-v0, vllm-v1 (the scheduler that ran), sglang, ...
    band_low: float | None = None  # the lowest prediction over the plausible benchmark settings
    band_high: float | None = None  # ... and the highest (sim/scenarios/validate/settings.py)


def rows(
    cases: Sequence[Case], results: Sequence[CaseResult], bands: dict | None = None
) -> list[Row]:
    """validation.csv: one row per (case, metric) of every simulated case, one row (metric
    "-") per case that could not be simulated. `bands`: case -> metric -> (low, high)."""
    out = []
    for case, res in zip(cases, results, strict=True):
        common = {
            **case.slices,
            "flags": ",".join(case.flags),
            "dtype": case_dtype(case, res),
            "family": engine_family(case, res),
        }
        if res.error:
            out.append(Row(case.id, REFUSED, None, None, None, reason=res.error, **common))
            continue
        band = (bands or {}).get(case.id, {})
        for metric, measured in case.measured.items():
            predicted = res.predicted.get(metric)
            bad_measured = case.unusable.get(metric)
            reason = bad_measured or _prediction_problem(metric, predicted)
            err = None
            if not bad_measured and predicted is not None and math.isfinite(predicted):
                err = 100.0 * (predicted - measured) / measured
            low, high = band.get(metric, (None, None))
            out.append(
                Row(
                    case.id,
                    metric,
                    measured,
                    predicted,
                    err,
                    reason=reason or "",
                    band_low=low,
                    band_high=high,
                    **common,
                )
            )
    return out


def _prediction_problem(metric: str, predicted: float | None) -> str | None:
    if predicted is None:
        return f"the simulation does not report {metric}"
    if math.isnan(predicted):
        return f"the simulation's {metric} is NaN (no request it could measure it on)"
    if math.isinf(predicted):
        return f"the simulation's {metric} is infinite"
    if predicted == 0:
        return "predicted 0 (counted as a -100% error)"
    return None


def case_dtype(case: Case, res: CaseResult) -> str:
    """The weights' dtype a case states (fp8, fp8_block, fp4, bf16), else the one its
    simulation resolved (`auto` from the checkpoint), else "auto"."""
    stated = str(case.data.get("dtype", "auto"))
    if stated != "auto":
        return stated
    return res.facts.dtype if res.facts is not None else "auto"


def engine_family(case: Case, res: CaseResult) -> str:
    """vllm-v0 / vllm-v1 by the scheduler the simulation ran (the release's default engine);
    otherwise the engine's name (sglang, trtllm, ...), also for a refused vLLM case."""
    scheduler = res.facts.scheduler if res.facts is not None else ""
    if scheduler in ("vllm_v0", "vllm_v1"):
        return scheduler.replace("_", "-")
    return str(case.data.get("engine", "?")).split("@")[0]


def headline(table: Sequence[Row]) -> dict[str, list[Row]]:
    """Each headline quantity -> one row per case that reports it (HEADLINE's first metric
    with a finite error)."""
    out: dict[str, list[Row]] = {}
    by_case: dict[str, dict[str, Row]] = {}
    for r in table:
        if r.error_pct is not None and math.isfinite(r.error_pct):
            by_case.setdefault(r.case, {})[r.metric] = r
    for quantity, metrics in HEADLINE.items():
        for metrics_of_case in by_case.values():
            chosen = next((metrics_of_case[m] for m in metrics if m in metrics_of_case), None)
            if chosen is not None:
                out.setdefault(quantity, []).append(chosen)
    return out


@dataclass(frozen=True, slots=True)
class Accuracy:
    """Median and p90 absolute percent error per metric, over the rows with a finite error."""

    median_abs_pct_error: dict[str, float]  # metric -> %
    p90_abs_pct_error: dict[str, float]  # metric -> %
    num_values: dict[str, int]  # metric -> rows

    @property
    def summary(self) -> dict:
        return {
            "median_abs_pct_error": self.median_abs_pct_error,
            "p90_abs_pct_error": self.p90_abs_pct_error,
            "num_values": self.num_values,
        }


def accuracy(table: Sequence[Row]) -> Accuracy:
    by_metric: dict[str, list[float]] = {}
    for r in table:
        if r.error_pct is not None and math.isfinite(r.error_pct):
            by_metric.setdefault(r.metric, []).append(abs(r.error_pct))
    return _accuracy(by_metric)


def _accuracy(by_metric: dict[str, list[float]]) -> Accuracy:
    """The accuracy of absolute percent errors grouped by metric (or headline quantity)."""
    return Accuracy(
        {m: float(np.median(v)) for m, v in sorted(by_metric.items())},
        {m: float(np.percentile(v, 90)) for m, v in sorted(by_metric.items())},
        {m: len(v) for m, v in sorted(by_metric.items())},
    )


@dataclass(frozen=True, slots=True)
class SliceAccuracy:
    """The accuracy over the rows of one value of a slice (one GPU, one engine, ...)."""

    num_cases: int
    accuracy: Accuracy

    @property
    def summary(self) -> dict:
        return {"num_cases": self.num_cases} | self.accuracy.summary


def by_slice(table: Sequence[Row]) -> dict[str, dict[str, SliceAccuracy]]:
    """Slice (hardware, ...) -> its value (h200, ...) -> the accuracy over its rows (the
    simulated cases': a refused case has no error to count)."""
    out = {}
    for dim in SLICES:
        groups: dict[str, list[Row]] = {}
        for r in table:
            if r.metric != REFUSED:
                groups.setdefault(getattr(r, dim), []).append(r)
        out[dim] = {
            value: SliceAccuracy(len({r.case for r in rs}), accuracy(rs))
            for value, rs in sorted(groups.items())
        }
    return out


@dataclass(frozen=True, slots=True)
class CombinedSlice:
    """One GPU x dtype x engine family x workload kind: its cases (simulated and refused), the
    accuracy per metric and per headline quantity."""

    key: tuple[str, str, str, str]  # COMBINED's values
    num_cases: int  # simulated
    num_refused: int
    accuracy: Accuracy  # per metric
    headline: Accuracy  # per headline quantity (TPOT, ITL, output throughput, TTFT)

    @property
    def worse(self) -> list[str]:
        """The headline quantities with >= SLICE_MIN_RUNS runs whose median |error| is worse
        than SLICE_LIMIT_PCT."""
        h = self.headline
        return [
            q
            for q, med in h.median_abs_pct_error.items()
            if h.num_values[q] >= SLICE_MIN_RUNS and med > SLICE_LIMIT_PCT
        ]

    @property
    def summary(self) -> dict:
        gpu, dtype, family, workload = self.key
        return {
            "gpu": gpu,
            "dtype": dtype,
            "engine_family": family,
            "workload": workload,
            "num_cases": self.num_cases,
            "num_refused": self.num_refused,
            **self.accuracy.summary,
            "headline": self.headline.summary,
            "worse_than_limit": self.worse,
        }


def combined_slices(table: Sequence[Row]) -> list[CombinedSlice]:
    """The accuracy per GPU x dtype x engine family x workload kind, in key order."""
    groups: dict[tuple, list[Row]] = {}
    for r in table:
        groups.setdefault(tuple(getattr(r, d) for d in COMBINED), []).append(r)
    out = []
    for key, rs in sorted(groups.items()):
        simulated = {r.case for r in rs if r.metric != REFUSED}
        refused = {r.case for r in rs if r.metric == REFUSED}
        quantities = {q: [abs(r.error_pct) for r in hs] for q, hs in headline(rs).items()}
        acc = accuracy(rs)
        out.append(CombinedSlice(key, len(simulated), len(refused), acc, _accuracy(quantities)))
    return out


@dataclass(frozen=True, slots=True)
class Validation:
    """The cases of the case files and their results, one per case."""

    cases: tuple[Case, ...]
    results: tuple[CaseResult, ...]  # one per case: its predicted metrics, or its error
    title: str  # the case files
    # case -> metric -> (low, high): the prediction over the plausible benchmark settings
    bands: dict = field(default_factory=dict)
    band_runs: tuple[CaseResult, ...] = ()  # the band's own simulations (their audits)

    @property
    def table(self) -> list[Row]:
        return rows(self.cases, self.results, self.bands)

    @property
    def overall(self) -> Accuracy:
        return accuracy(self.table)

    @property
    def num_cases(self) -> int:
        return len(self.cases)

    @property
    def num_failed(self) -> int:
        return sum(1 for r in self.results if r.error)

    @property
    def failed(self) -> dict[str, str]:
        """Case id -> why it could not be simulated."""
        return {r.id: r.error for r in self.results if r.error}

    @property
    def distributions(self) -> dict[str, dict[str, KsTest]]:
        """Case id -> its KS tests, for the cases measured per request."""
        return {r.id: r.ks for r in self.results if r.ks}

    @property
    def audit(self) -> dict:
        """The physics audit of every case's run, and of the band's, together
        (sim/run/audit.py)."""
        ran = [r for r in (*self.results, *self.band_runs) if r.audit]
        return merge_records([r.audit for r in ran], [r.id for r in ran])

    @property
    def summary(self) -> dict:
        table = self.table
        overall = accuracy(table)
        return {
            "validation": {
                "num_cases": self.num_cases,
                "num_failed": self.num_failed,
                **overall.summary,
                "by_slice": {
                    dim: {value: s.summary for value, s in groups.items()}
                    for dim, groups in by_slice(table).items()
                },
                "distributions": {
                    cid: {q: t.summary for q, t in tests.items()}
                    for cid, tests in self.distributions.items()
                },
                "failed": self.failed,
                "audit": self.audit,
                "num_rows_with_reason": sum(1 for r in table if r.reason),
                "slices": [s.summary for s in combined_slices(table)],
                "slice_rule": {
                    "keys": ["gpu", "dtype", "engine_family", "workload"],
                    "headline": {q: list(ms) for q, ms in HEADLINE.items()},
                    "min_runs": SLICE_MIN_RUNS,
                    "limit_pct": SLICE_LIMIT_PCT,
                },
            }
        }
