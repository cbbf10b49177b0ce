"""The outputs of scenario=validate: validation.csv, summary.json, report.md and its plots."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from sim.report.figures import plt, save_png
from sim.report.html import write_report
from sim.run.outputs import atomic_write, write_json
from sim.scenarios.validate.cases import Case
from sim.scenarios.validate.runs import SLICES, likely_causes, rows, summarize

CSV_COLUMNS = ("case", "metric", "measured", "predicted", "error_pct")
BAND = 0.10  # the +-10% band drawn around y = x
WORST = 15  # worst (case, metric) pairs listed


def write_validation(
    cases: list[Case],
    results: list[dict],
    out_dir: Path,
    title: str,
    preamble: str = "",
    extra: dict | None = None,
) -> dict:
    """Write the outputs; `preamble` goes under the report's title, `extra` into
    summary.json's `validation` block."""
    table = rows(cases, results)
    df = pd.DataFrame(table, columns=[*CSV_COLUMNS, *SLICES, "flags"])
    atomic_write(
        out_dir / "validation.csv",
        lambda tmp: df[list(CSV_COLUMNS)].to_csv(tmp, index=False, float_format="%.6g"),
    )
    summary = {"validation": summarize(cases, results, table) | (extra or {})}
    write_json(out_dir / "summary.json", summary)
    write_report(
        out_dir, _report(cases, results, df, summary["validation"], out_dir, title, preamble)
    )
    return summary


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


def _report(cases, results, df, v: dict, out_dir: Path, title: str, preamble: str = "") -> str:
    res_by_id = {r["id"]: r for r in results}
    case_by_id = {c.id: c for c in cases}
    lines = [
        f"# Validation: {title}",
        "",
        *([preamble, ""] if preamble else []),
        "## All cases",
        "",
        f"{v['num_cases']} cases, {v['num_failed']} could not be simulated. Error is "
        "(predicted - measured) / measured; the tables give the median and 90th percentile of "
        "its absolute value over the cases that report the metric.",
        "",
        "| metric | values | median abs error | p90 abs error |",
        "|---|---|---|---|",
    ]
    for m, med in v["median_abs_pct_error"].items():
        lines.append(
            f"| {m} | {v['num_values'][m]} | {med:.1f}% | {v['p90_abs_pct_error'][m]:.1f}% |"
        )
    for dim, groups in v["by_slice"].items():
        metrics = sorted({m for g in groups.values() for m in g["median_abs_pct_error"]})
        lines += ["", f"## By {dim}", "", f"| {dim} | cases | " + " | ".join(metrics) + " |"]
        lines.append("|---|---|" + "---|" * len(metrics))
        for value, g in groups.items():
            cells = [_pct(g["median_abs_pct_error"].get(m)) for m in metrics]
            lines.append(f"| {value} | {g['num_cases']} | " + " | ".join(cells) + " |")
        lines.append("")
        lines.append("(median absolute error per metric)")
    plots = [
        plot_metric(df, m, out_dir / f"validation_{m}.png")
        for m in sorted(df.metric.unique())
        if df[(df.metric == m) & df.predicted.notna()].shape[0]
    ]
    if plots:
        lines += ["", "## Predicted vs measured", ""]
        lines += [f"![{p}]({p})" for p in plots]
    if v["distributions"]:
        lines += [
            "",
            "## Distributions (two-sample Kolmogorov-Smirnov, measured vs predicted)",
            "",
            "| case | quantity | KS statistic | p-value | requests (measured / predicted) |",
            "|---|---|---|---|---|",
        ]
        for cid, tests in v["distributions"].items():
            for q, t in tests.items():
                lines.append(
                    f"| {cid} | {q} | {t['statistic']:.3f} | {t['pvalue']:.3g} | "
                    f"{t['n'][0]} / {t['n'][1]} |"
                )
    ok = df[df.error_pct.notna()].copy()
    if len(ok):
        ok["abs"] = ok.error_pct.abs()
        worst = ok.sort_values(["abs", "case", "metric"], ascending=[False, True, True]).head(WORST)
        lines += [
            "",
            "## Worst cases",
            "",
            "| case | metric | measured | predicted | error | likely cause |",
            "|---|---|---|---|---|---|",
        ]
        for _, r in worst.iterrows():
            why = likely_causes(case_by_id[r.case], res_by_id[r.case], r.metric, r.error_pct)
            lines.append(
                f"| {r.case} | {r.metric} | {_fmt(r.measured, 2)} | {_fmt(r.predicted, 2)} | "
                f"{r.error_pct:+.1f}% | {why} |"
            )
    if v["failed"]:
        lines += ["", "## Cases that could not be simulated", "", "| case | reason |", "|---|---|"]
        for cid, why in v["failed"].items():
            lines.append(f"| {cid} | {str(why).replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def _pct(v) -> str:
    return "" if v is None else f"{v:.1f}%"
