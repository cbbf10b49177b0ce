"""The outputs of a validation: validation.csv, summary.json, report.md and its plots."""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from sim.report.escape import Md, md_row, md_text
from sim.report.figures import plot_text, plt, save_png
from sim.report.html import write_report
from sim.run.outputs import atomic_write, write_json
from sim.scenarios.validate.causes import likely_causes
from sim.scenarios.validate.validation import (
    COMBINED,
    HEADLINE,
    REFUSED,
    SLICE_LIMIT_PCT,
    SLICE_MIN_RUNS,
    SLICES,
    Row,
    Validation,
    by_slice,
    combined_slices,
)

CSV_COLUMNS = ("case", "metric", "measured", "predicted", "error_pct")  # kept as they were
EXTRA_COLUMNS = ("reason", "band_low", "band_high")  # appended after them
BAND = 0.10  # the +-10% band drawn around y = x
WORST = 15  # worst (case, metric) pairs listed


def write_validation(
    validation: Validation, out_dir: Path, preamble: str = "", extra: dict | None = None
) -> None:
    """Write the outputs; `preamble` goes under the report's title, `extra` into
    summary.json's `validation` block."""
    table = validation.table
    columns = [*CSV_COLUMNS, *EXTRA_COLUMNS, *SLICES, "flags"]
    df = pd.DataFrame([asdict(r) for r in table], columns=columns)
    for col in ("measured", "predicted", "error_pct", "band_low", "band_high"):
        df[col] = pd.to_numeric(df[col], errors="coerce")
    atomic_write(
        out_dir / "validation.csv",
        lambda tmp: df[[*CSV_COLUMNS, *EXTRA_COLUMNS]].to_csv(
            tmp, index=False, float_format="%.6g"
        ),
    )
    summary = validation.summary
    write_json(out_dir / "summary.json", {"validation": summary["validation"] | (extra or {})})
    write_report(out_dir, _report(validation, df, out_dir, preamble))


def plottable(df: pd.DataFrame, metric: str) -> tuple[pd.DataFrame, int]:
    """(the rows of `metric` a log-log plot can show: measured and predicted finite and > 0,
    how many of its rows it leaves out)."""
    d = df[df.metric == metric]
    ok = np.isfinite(d.measured) & np.isfinite(d.predicted) & (d.measured > 0) & (d.predicted > 0)
    return d[ok], int((~ok).sum())


def plot_metric(df: pd.DataFrame, metric: str, path: Path) -> str:
    """Predicted against measured on log axes; a value <= 0 or missing cannot be drawn there:
    those rows are left out and the title says how many."""
    d, left_out = plottable(df, metric)
    fig, ax = plt.subplots(figsize=(5.2, 4.6))
    if len(d):
        lo = float(min(d.measured.min(), d.predicted.min())) * 0.7
        hi = float(max(d.measured.max(), d.predicted.max())) * 1.4
    else:
        lo, hi = 0.1, 10.0
        ax.text(1.0, 1.0, "no value > 0 to draw", ha="center", va="center", color="0.3")
    xs = np.geomspace(lo, hi, 50)
    ax.fill_between(xs, xs * (1 - BAND), xs * (1 + BAND), color="0.88", label="±10%")
    ax.plot(xs, xs, color="0.4", lw=1, label="y = x")
    for hw, g in d.groupby("hardware", sort=True):
        ax.scatter(g.measured, g.predicted, s=14, label=plot_text(hw), alpha=0.8)
    banded = d[np.isfinite(d.band_low) & np.isfinite(d.band_high) & (d.band_low > 0)]
    if len(banded):
        ax.vlines(banded.measured, banded.band_low, banded.band_high, color="0.5", lw=0.6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel(f"measured {metric}")
    ax.set_ylabel(f"predicted {metric}")
    ax.set_title(metric + (f" ({left_out} left out: <= 0 or missing)" if left_out else ""))
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return save_png(fig, path)


def _fmt(v, digits=1) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return ""
    return f"{v:,.{digits}f}"


def _pct(v) -> str:
    return "" if v is None else f"{v:.1f}%"


def _report(v: Validation, df: pd.DataFrame, out_dir: Path, preamble: str = "") -> str:
    """report.md. A case file's ids, models, GPUs, engines and reasons are a user's strings:
    every table row goes through md_row, every other such string through md_text."""
    lines = [
        f"# Validation: {md_text(v.title)}",
        "",
        *([preamble, ""] if preamble else []),
        *_overall(v),
        *_slices(v.table),
        *_combined(v.table),
        *_plots(df, out_dir),
        *_distributions(v),
        *_worst(v, df),
        *_failed(v),
        *_reasons(v.table),
    ]
    return "\n".join(lines) + "\n"


def _overall(v: Validation) -> list[str]:
    a = v.overall
    lines = [
        "## All cases",
        "",
        f"{v.num_cases} cases, {v.num_failed} could not be simulated. Error is "
        "(predicted - measured) / measured; the tables give the median and 90th percentile of "
        "its absolute value over the cases that report the metric.",
        "",
        "| metric | values | median abs error | p90 abs error |",
        "|---|---|---|---|",
    ]
    for m, med in a.median_abs_pct_error.items():
        lines.append(md_row((m, a.num_values[m], f"{med:.1f}%", f"{a.p90_abs_pct_error[m]:.1f}%")))
    return [*lines, "", audit_sentence(v.audit, md_text)]


def audit_sentence(audit: dict, text=str) -> str:
    """What the physics audit of every case's run found (sim/run/audit.py), in one line; the
    worst's subject (a case's id) and detail through `text` (md_text for report.md)."""
    if not audit["runs"]:
        return "Physics audit: no case ran."
    worst = audit["worst"]
    where = f"{text(worst['subject'])}, {text(worst['where'])}"
    closest = f"{worst['ratio']:.3g} of its limit ({where})"
    if not audit["violations"]:
        return (
            f"Physics audit of the {audit['runs']} runs: {audit['checked_steps']:,} steps, the "
            "kernels priced at their shapes and the memory plans within the GPUs' and links' "
            f"limits, **0 violations**; the closest: {closest}."
        )
    return (
        f"Physics audit of the {audit['runs']} runs: **{audit['violations']:,} violations** of "
        f"the GPUs' and links' limits; the worst: {closest}: {text(worst['detail'])}."
    )


def _slices(table: list[Row]) -> list[str]:
    lines = []
    for dim, groups in by_slice(table).items():
        metrics = sorted({m for g in groups.values() for m in g.accuracy.median_abs_pct_error})
        lines += ["", f"## By {dim}", "", md_row((dim, "cases", *metrics))]
        lines.append("|---|---|" + "---|" * len(metrics))
        for value, g in groups.items():
            cells = [_pct(g.accuracy.median_abs_pct_error.get(m)) for m in metrics]
            lines.append(md_row((value, g.num_cases, *cells)))
        lines.append("")
        lines.append("(median absolute error per metric)")
    return lines


def _combined(table: list[Row]) -> list[str]:
    """The issue's slices, GPU x dtype x engine family x workload kind, with the median and
    p90 absolute error of each headline quantity; marked where a quantity with enough runs
    is worse than the limit."""
    slices = combined_slices(table)
    if not slices:
        return []
    quantities = list(HEADLINE)
    lines = [
        "",
        "## By " + " x ".join(COMBINED),
        "",
        "Median / p90 absolute error of each headline quantity (the case's mean, else its "
        f"median); **worse**: a quantity with >= {SLICE_MIN_RUNS} runs whose median absolute "
        f"error is above {SLICE_LIMIT_PCT:.0f}%. Runs: simulated (refused).",
        "",
        md_row(("GPU", "dtype", "engine", "workload", "runs", *quantities, "worse")),
        "|---|---|---|---|---|" + "---|" * len(quantities) + "---|",
    ]
    for s in slices:
        h = s.headline
        cells = [
            f"{_pct(h.median_abs_pct_error[q])} / {_pct(h.p90_abs_pct_error[q])} "
            f"({h.num_values[q]})"
            if q in h.median_abs_pct_error
            else ""
            for q in quantities
        ]
        refused = f" ({s.num_refused})" if s.num_refused else ""
        worse = Md(", ".join(f"**{md_text(q)}**" for q in s.worse))
        lines.append(md_row((*s.key, f"{s.num_cases}{refused}", *cells, worse)))
    return lines


def _plots(df: pd.DataFrame, out_dir: Path) -> list[str]:
    lines = []
    for m in sorted(m for m in df.metric.unique() if m != REFUSED):
        if not df[(df.metric == m) & df.predicted.notna()].shape[0]:
            continue
        p = plot_metric(df, m, out_dir / f"validation_{m}.png")
        lines.append(f"![{p}]({p})")
        left_out = plottable(df, m)[1]
        if left_out:
            lines += [
                "",
                f"({md_text(m)}: {left_out} rows left out of the plot: a value <= 0 or missing)",
            ]
    if not lines:
        return []
    return ["", "## Predicted vs measured", "", *lines]


def _distributions(v: Validation) -> list[str]:
    distributions = v.distributions
    if not distributions:
        return []
    lines = [
        "",
        "## Distributions (two-sample Kolmogorov-Smirnov, measured vs predicted)",
        "",
        "| case | quantity | KS statistic | p-value | requests (measured / predicted) |",
        "|---|---|---|---|---|",
    ]
    for cid, tests in distributions.items():
        for q, t in tests.items():
            counts = f"{t.num_measured} / {t.num_predicted}"
            lines.append(md_row((cid, q, f"{t.statistic:.3f}", f"{t.pvalue:.3g}", counts)))
    return lines


def _worst(v: Validation, df: pd.DataFrame) -> list[str]:
    """The WORST largest absolute errors, each with its likely cause."""
    ok = df[df.error_pct.notna()].copy()
    if not len(ok):
        return []
    # rows come only from simulated cases, whose ids are unique (cases.py)
    simulated = {c.id: (c, r) for c, r in zip(v.cases, v.results, strict=True) if not r.error}
    ok["abs"] = ok.error_pct.abs()
    worst = ok.sort_values(["abs", "case", "metric"], ascending=[False, True, True]).head(WORST)
    lines = [
        "",
        "## Worst cases",
        "",
        "| case | metric | measured | predicted | error | likely cause |",
        "|---|---|---|---|---|---|",
    ]
    for _, r in worst.iterrows():
        case, res = simulated[r.case]
        why = likely_causes(case, res.facts, r.metric, r.error_pct)
        values = (_fmt(r.measured, 2), _fmt(r.predicted, 2), f"{r.error_pct:+.1f}%")
        lines.append(md_row((r.case, r.metric, *values, why)))
    return lines


def _failed(v: Validation) -> list[str]:
    failed = v.failed
    if not failed:
        return []
    lines = ["", "## Cases that could not be simulated", "", "| case | reason |", "|---|---|"]
    for cid, why in failed.items():
        lines.append(md_row((cid, why)))
    return lines


def _reasons(table: list[Row]) -> list[str]:
    """The rows of simulated cases that carry a reason (a measured value of 0 or missing, a
    prediction the simulation does not give or gives as 0), counted by reason."""
    groups: dict[str, list[Row]] = {}
    for r in table:
        if r.reason and r.metric != REFUSED:
            groups.setdefault(r.reason, []).append(r)
    if not groups:
        return []
    lines = [
        "",
        "## Rows with a reason (in validation.csv's `reason` column)",
        "",
        "| reason | rows | counted in the errors | first case, metric |",
        "|---|---|---|---|",
    ]
    for why, rs in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        counted = sum(1 for r in rs if r.error_pct is not None)
        first = rs[0]
        lines.append(md_row((why, len(rs), counted, f"{first.case}, {first.metric}")))
    return lines
