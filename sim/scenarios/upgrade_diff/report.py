"""upgrade_diff's outputs: summary.json, attribution.csv, report.md (its text: text.py), the
waterfall and load plots."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from sim.report.figures import plt, save_png
from sim.report.html import write_report
from sim.report.placement import suptitle_fitted
from sim.run.outputs import write_json, write_text
from sim.scenarios.upgrade_diff.outcomes import METRICS
from sim.scenarios.upgrade_diff.result import UpgradeResult
from sim.scenarios.upgrade_diff.text import report_text
from sim.scenarios.upgrade_diff.verdict import NAMES


def plot_waterfall(s: UpgradeResult, path: Path) -> str:
    """The headline metric from before to after, one bar per change's Shapley value (with its
    95% interval), biggest first; inert changes in one bar. The axis spans the bars, not zero
    (a 5% change is then readable), and every bar is labelled with its value."""
    m = s.headline
    title, unit, digits = NAMES[m]
    base = s.before.metrics[m]
    rows = [r for r in s.attribution if not r.inert]
    inert = [r for r in s.attribution if r.inert]
    labels, deltas, errors, points = [], [], [], []
    for r in rows:
        labels.append(f"{r.setting}\n({r.category})")
        deltas.append(r.effect_pct[m] / 100 * base)
        errors.append(r.ci_pct[m] / 100 * base)
        points.append(r.effect_pct[m])
    residual = s.shapley.inert_residual_pct[m] / 100 * base
    if inert:
        labels.append(f"{len(inert)} inert\nsetting{'s' if len(inert) > 1 else ''}")
        deltas.append(residual)
        errors.append(0.0)
        points.append(s.shapley.inert_residual_pct[m])
    after = s.after.metrics[m]
    levels = np.cumsum([base, *deltas])
    lo, hi = _span(levels, deltas, errors, after)
    fig, ax = plt.subplots(figsize=(max(6.5, 1.1 * (len(labels) + 2)), 4.8))
    ax.set_ylim(lo, hi)
    for x, value in ((0, base), (len(labels) + 1, after)):  # the two sides, from the axis' foot
        ax.bar(x, value - lo, bottom=lo, color="#7f7f7f" if x == 0 else "#1f77b4")
        ax.annotate(f"{value:,.{digits}f}", (x, value), ha="center", va="bottom", fontsize=8,
                    xytext=(0, 2), textcoords="offset points")  # fmt: skip
    for k, (d, e, pts) in enumerate(zip(deltas, errors, points, strict=True), start=1):
        start = levels[k - 1]
        worse = d > 0 if not m.endswith("throughput") else d < 0
        ax.bar(k, d, bottom=start, color="#d62728" if worse else "#2ca02c")
        if e:
            ax.errorbar(k, start + d, yerr=e, color="black", capsize=3, lw=1)
        ax.annotate(f"{pts:+.1f} pts", (k, max(start, start + d + e)), ha="center",
                    va="bottom", fontsize=7, xytext=(0, 2), textcoords="offset points")  # fmt: skip
    ax.set_xticks(
        range(len(labels) + 2),
        [s.before.engine, *labels, s.after.engine],
        rotation=30,
        ha="right",
        fontsize=8,
    )
    ax.set_ylabel(f"{title} ({unit}; axis from {lo:,.{digits}f}, not 0)")
    change = s.change_pct[m]
    ax.grid(axis="y", alpha=0.3)
    suptitle_fitted(  # wrapped to the figure's width: a narrow waterfall cut its title off
        fig, f"{title}: {change:+.1f}% in all; each changed setting's share "
        "(Shapley value, points of %, 95% interval)",
    )  # fmt: skip
    fig.tight_layout()
    return save_png(fig, path)


def _span(levels, deltas, errors, after: float) -> tuple[float, float]:
    """The axis' range: every bar's ends and error bars, with room for the labels."""
    ends = [*levels, after]
    ends += [lv + d + e for lv, d, e in zip(levels, deltas, errors, strict=False)]
    ends += [lv + d - e for lv, d, e in zip(levels, deltas, errors, strict=False)]
    lo, hi = min(ends), max(ends)
    pad = (hi - lo) * 0.25 or abs(hi) * 0.05 or 1.0
    return max(lo - pad, 0.0), hi + pad


def plot_load_sweep(s: UpgradeResult, path: Path) -> str:
    sweep = s.load_sweep
    m = s.headline
    title, unit, _ = NAMES[m]
    pts = sweep.points
    x = [p.rate if p.rate is not None else p.concurrency for p in pts]
    xlabel = "request rate (req/s)" if sweep.swept == "rate" else "concurrency"
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 4))
    ax.plot(x, [p.before[m] for p in pts], "o-", label=s.before.engine)
    ax.plot(x, [p.after[m] for p in pts], "s-", label=s.after.engine)
    if sweep.capacity_rps:
        ax.axvline(sweep.capacity_rps, color="gray", ls=":", lw=1, label="before's capacity")
    ax.set(xlabel=xlabel, ylabel=f"{title} ({unit})", title=f"{title} by load")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    for metric in METRICS:
        bx.plot(
            x,
            [p.change_pct[metric] for p in pts],
            "o-",
            label=NAMES[metric][0],
            lw=2.5 if metric == m else 1,
        )
    bx.axhline(0, color="black", lw=0.8)
    bx.set(xlabel=xlabel, ylabel="after vs before (%)", title="change by load")
    bx.legend(fontsize=7)
    bx.grid(alpha=0.3)
    fig.tight_layout()
    return save_png(fig, path)


def attribution_frame(s: UpgradeResult) -> pd.DataFrame:
    rows = []
    for r in s.attribution:
        row = {
            "setting": r.setting,
            "category": r.category,
            "rule": r.rule,
            "inert": r.inert,
            "in_minimal_set": r.in_minimal_set,
            "before": str(r.before),
            "after": str(r.after),
        }
        for m in METRICS:
            row[f"effect_pct.{m}"] = r.effect_pct[m]
            row[f"ci_pct.{m}"] = r.ci_pct[m]
            row[f"added_pct.{m}"] = r.added_pct[m]
            row[f"removed_pct.{m}"] = r.removed_pct[m]
        row["restore_flag"] = r.restore_flag or ""
        rows.append(row)
    return pd.DataFrame(rows)


def write_upgrade_outputs(s: UpgradeResult, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    frame = attribution_frame(s)
    write_text(out_dir / "attribution.csv", frame.to_csv(index=False))
    plots = {"waterfall": plot_waterfall(s, out_dir / "waterfall.png")}
    if s.load_sweep:
        plots["load"] = plot_load_sweep(s, out_dir / "load_sweep.png")
    write_report(out_dir, report_text(s, plots))
    write_json(out_dir / "summary.json", s.summary)
