"""upgrade_diff's outputs: summary.json, attribution.csv, report.md (its text: text.py), the
waterfall and load plots."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from sim.report.figures import plt, save_png
from sim.report.html import write_report
from sim.run.outputs import write_json, write_text
from sim.scenarios.upgrade_diff.outcomes import METRICS
from sim.scenarios.upgrade_diff.result import UpgradeResult
from sim.scenarios.upgrade_diff.text import report_text
from sim.scenarios.upgrade_diff.verdict import NAMES


def plot_waterfall(s: UpgradeResult, path: Path) -> str:
    """The headline metric from before to after, one bar per change's Shapley value (with its
    95% interval), biggest first; inert changes in one bar."""
    m = s.headline
    title, unit, _ = NAMES[m]
    base = s.before.metrics[m]
    rows = [r for r in s.attribution if not r.inert]
    inert = [r for r in s.attribution if r.inert]
    labels, deltas, errors = [], [], []
    for r in rows:
        labels.append(f"{r.setting}\n({r.category})")
        deltas.append(r.effect_pct[m] / 100 * base)
        errors.append(r.ci_pct[m] / 100 * base)
    residual = s.shapley.inert_residual_pct[m] / 100 * base
    if inert:
        labels.append(f"{len(inert)} inert\nsetting{'s' if len(inert) > 1 else ''}")
        deltas.append(residual)
        errors.append(0.0)
    fig, ax = plt.subplots(figsize=(max(6.5, 1.1 * (len(labels) + 2)), 4.6))
    ax.bar(0, base, color="#7f7f7f")
    level = base
    for k, (d, e) in enumerate(zip(deltas, errors, strict=True), start=1):
        worse = d > 0 if not m.endswith("throughput") else d < 0
        ax.bar(k, d, bottom=level, color="#d62728" if worse else "#2ca02c")
        if e:
            ax.errorbar(k, level + d, yerr=e, color="black", capsize=3, lw=1)
        level += d
    end = len(labels) + 1
    ax.bar(end, s.after.metrics[m], color="#1f77b4")
    ax.set_xticks(
        range(end + 1),
        [s.before.engine, *labels, s.after.engine],
        rotation=30,
        ha="right",
        fontsize=8,
    )
    ax.set_ylabel(f"{title} ({unit})")
    ax.set_title(f"{title}: each changed setting's share (Shapley value, 95% interval)")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return save_png(fig, path)


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
