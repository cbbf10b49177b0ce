"""A validation: cases, their results, and what comparing them gives. The table of errors
(`Row`, one per case and metric: validation.csv), the accuracy over it (`Accuracy`: median and
p90 absolute percent error per metric, overall and by slice), and `Validation`, whose
`summary` is summary.json."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sim.scenarios.validate.cases import Case
from sim.scenarios.validate.runs import CaseResult, KsTest

SLICES = ("hardware", "engine", "workload", "model")  # the Row fields the accuracy is sliced by


@dataclass(frozen=True, slots=True)
class Row:
    """One measured metric of a simulated case, against its prediction."""

    case: str
    metric: str
    measured: float
    predicted: float | None  # None where the simulation does not report the metric
    error_pct: float | None  # (predicted - measured) / measured, in percent
    hardware: str
    engine: str
    workload: str  # the workload kind: closed_loop, poisson, ...
    model: str
    flags: str  # the case's data-quality flags, comma-separated


def rows(cases: Sequence[Case], results: Sequence[CaseResult]) -> list[Row]:
    """validation.csv: one row per (case, metric) of every case that was simulated."""
    out = []
    for case, res in zip(cases, results, strict=True):
        if res.error:
            continue
        for metric, measured in case.measured.items():
            predicted = res.predicted.get(metric)
            err = None
            if predicted is not None:
                err = 100.0 * (predicted - measured) / measured
            out.append(
                Row(
                    case.id,
                    metric,
                    float(measured),
                    predicted,
                    err,
                    **case.slices,
                    flags=",".join(case.flags),
                )
            )
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
    """Slice (hardware, ...) -> its value (h200, ...) -> the accuracy over its rows."""
    out = {}
    for dim in SLICES:
        groups: dict[str, list[Row]] = {}
        for r in table:
            groups.setdefault(getattr(r, dim), []).append(r)
        out[dim] = {
            value: SliceAccuracy(len({r.case for r in rs}), accuracy(rs))
            for value, rs in sorted(groups.items())
        }
    return out


@dataclass(frozen=True, slots=True)
class Validation:
    """The cases of the case files and their results, one per case."""

    cases: tuple[Case, ...]
    results: tuple[CaseResult, ...]  # one per case: its predicted metrics, or its error
    title: str  # the case files

    @property
    def table(self) -> list[Row]:
        return rows(self.cases, self.results)

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
            }
        }
