"""The outputs of a validation: validation.csv, summary.json, report.md and its plots."""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from sim.report.figures import plt, save_png
from sim.report.html import write_report
from sim.run.outputs import atomic_write, write_json
from sim.scenarios.validate.causes import likely_causes
from sim.scenarios.validate.validation import SLICES, Row, Validation, by_slice

CSV_COLUMNS = ("case", "metric", "measured", "predicted", "error_pct")
BAND = 0.10  # the +-10% band drawn around y = x
WORST = 15  # worst (case, metric) pairs listed


def write_validation(
    validation: Validation, out_dir: Path, preamble: str = "", extra: dict | None = None
) -> None:
    """Write the outputs; `preamble` goes under the report's title, `extra` into
    summary.json's `validation` block."""
    table = validation.table
    df = pd.DataFrame([asdict(r) for r in table], columns=[*CSV_COLUMNS, *SLICES, "flags"])
    atomic_write(
        out_dir / "validation.csv",
        lambda tmp: df[list(CSV_COLUMNS)].to_csv(tmp, index=False, float_format="%.6g"),
    )
    summary = validation.summary
    write_json(out_dir / "summary.json", {"validation": summary["validation"] | (extra or {})})
    write_report(out_dir, _report(validation, df, out_dir, preamble))


def plot_metric(df: pd.DataFrame, metric: str, path: Path) -> str:
    d = df[(df.metric == metric) & df.predicted.notna()]
    fig, ax = plt.subplots(figsize=(5.2, 4.6))
    lo = float(min(d.measured.min(), d.predicted.min())) * 0.7
    hi = float(max(d.measured.max(), d.predicted.max())) * 1.4
    xs = np.geomspace(lo, hi, 50)
    ax.fill_between(xs, xs * (1 - BAND), xs * (1 + BAND), color="0.88", label="±10%")
    ax.plot(xs, xs, color="0.4", lw=1, label="y = x")
    for hw, g in d.groupby("hardware", sort=True):
        ax.scatter(g.measured, g.predicted, s=14, label=hw, alpha=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel(f"measured {metric}")
    ax.set_ylabel(f"predicted {metric}")
    ax.set_title(metric)
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
    lines = [
        f"# Validation: {v.title}",
        "",
        *([preamble, ""] if preamble else []),
        *_overall(v),
        *_slices(v.table),
        *_plots(df, out_dir),
        *_distributions(v),
        *_worst(v, df),
        *_failed(v),
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
        lines.append(f"| {m} | {a.num_values[m]} | {med:.1f}% | {a.p90_abs_pct_error[m]:.1f}% |")
    return lines


def _slices(table: list[Row]) -> list[str]:
    lines = []
    for dim, groups in by_slice(table).items():
        metrics = sorted({m for g in groups.values() for m in g.accuracy.median_abs_pct_error})
        lines += ["", f"## By {dim}", "", f"| {dim} | cases | " + " | ".join(metrics) + " |"]
        lines.append("|---|---|" + "---|" * len(metrics))
        for value, g in groups.items():
            cells = [_pct(g.accuracy.median_abs_pct_error.get(m)) for m in metrics]
            lines.append(f"| {value} | {g.num_cases} | " + " | ".join(cells) + " |")
        lines.append("")
        lines.append("(median absolute error per metric)")
    return lines


def _plots(df: pd.DataFrame, out_dir: Path) -> list[str]:
    plots = [
        plot_metric(df, m, out_dir / f"validation_{m}.png")
        for m in sorted(df.metric.unique())
        if df[(df.metric == m) & df.predicted.notna()].shape[0]
    ]
    if not plots:
        return []
    return ["", "## Predicted vs measured", "", *[f"![{p}]({p})" for p in plots]]


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
            lines.append(
                f"| {cid} | {q} | {t.statistic:.3f} | {t.pvalue:.3g} | "
                f"{t.num_measured} / {t.num_predicted} |"
            )
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
        lines.append(
            f"| {r.case} | {r.metric} | {_fmt(r.measured, 2)} | {_fmt(r.predicted, 2)} | "
            f"{r.error_pct:+.1f}% | {why} |"
        )
    return lines


def _failed(v: Validation) -> list[str]:
    failed = v.failed
    if not failed:
        return []
    lines = ["", "## Cases that could not be simulated", "", "| case | reason |", "|---|---|"]
    for cid, why in failed.items():
        lines.append(f"| {cid} | {str(why).replace('|', '/')} |")
    return lines
