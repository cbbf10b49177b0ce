"""What a calibration writes: PATH (YAML, read back by calibration=PATH: sim/run/calibration.py),
and beside it PATH's stem + .md, a report of measured against predicted before and after
calibration per figure, with its plot (stem + .png). Nothing in either depends on the machine
or the time it ran: the same runs give the same bytes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sim.run.calibration import ENVELOPE, SCHEMA, TERM, TERMS, describe
from sim.run.outputs import write_text
from sim.scenarios.fit_runs.fit import Fit, errors
from sim.scenarios.fit_runs.inputs import Run
from sim.user_files import yaml_text

LABELS = {"tpot": "TPOT", "ttft": "TTFT", "throughput": "output throughput"}
UNITS = {"tpot": "ms", "ttft": "ms", "throughput": "tokens/s"}


@dataclass(frozen=True)
class Calibrated:
    deployment: dict
    runs: list[Run]
    fit: Fit


def _round(x: float, digits: int = 6) -> float:
    return float(f"{x:.{digits}g}")


def deployment_entry(c: Calibrated) -> dict:
    fit = c.fit
    terms = {}
    for t in TERMS:
        fitted = t.name in fit.names
        terms[t.name] = {
            "value": _round(fit.terms[t.name]),
            "sd": _round(fit.sd[t.name], 3) if fitted else None,
            "prior": t.prior,
            "fitted": fitted,
            "at_bound": t.name in fit.at_bound,
            "carries": t.carries,
            "unit": t.unit,
        }
    runs = []
    for i, run in enumerate(c.runs):
        after = errors(run, fit.after[i])
        held = errors(run, fit.held_out[i])
        runs.append(
            {
                "id": run.id,
                "workload": {k: _maybe(v) for k, v in (fit.after[i].point or {}).items()},
                "measured": {k: _round(run.case.measured[k]) for k in run.keys.values()},
                "before": {k: _round(fit.before[i].predicted[k]) for k in run.keys.values()},
                "after": {k: _round(fit.after[i].predicted[k]) for k in run.keys.values()},
                "error_before": _pct(errors(run, fit.before[i])),
                "error_after": _pct(after),
                "held_out_error": _pct(held),
            }
        )
    return {
        "deployment": c.deployment,
        "terms": terms,
        "fitted": list(fit.names),
        "runs": runs,
        "leave_one_run_out": _loo_summary(c),
        "envelope": envelope(c),
        "fit": {"iterations": fit.iterations, "simulations": fit.simulations},
    }


def _maybe(v):
    return None if v is None else _round(float(v))


def _pct(e: dict | None) -> dict | None:
    return None if e is None else {k: _round(v, 4) for k, v in e.items()}


def _loo_summary(c: Calibrated) -> dict | None:
    """Median |error| per figure of each run predicted from the others (None: one run)."""
    if len(c.runs) < 2:
        return None
    out = {}
    for family in LABELS:
        errs = [
            abs(e[run.keys[family]])
            for run, res in zip(c.runs, c.fit.held_out, strict=True)
            if family in run.keys and (e := errors(run, res)) is not None
        ]
        if errs:
            out[family] = _round(float(np.median(errs)), 4)
    return out


def envelope(c: Calibrated) -> dict:
    """Each dimension's [least, most] over the runs (null where no run has it)."""
    out = {}
    for dim in ENVELOPE:
        values = [r.point[dim] for r in c.fit.after if r.point and r.point.get(dim) is not None]
        out[dim] = [_round(min(values)), _round(max(values))] if values else None
    return out


def write(path: Path, calibrated: list[Calibrated], command: str) -> list[Path]:
    """PATH, its report and plot; the paths written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    header = (
        f"# Written by `{command}`.\n"
        "# Each deployment's terms (sim/run/calibration.py): value +- sd, fitted to its runs;\n"
        "# give this file as calibration=PATH to any scenario.\n"
    )
    doc = {"calibration": SCHEMA, "deployments": [deployment_entry(c) for c in calibrated]}
    write_text(path, header + yaml_text(doc))
    png = path.with_suffix(".png")
    plot(calibrated, png)
    md = path.with_suffix(".md")
    write_text(md, report(calibrated, command, png.name))
    return [path, md, png]


def report(calibrated: list[Calibrated], command: str, png: str) -> str:
    lines = ["# Calibration to the deployment's own runs", "", f"`{command}`", ""]
    lines += [f"![measured against predicted, before and after]({png})", ""]
    for c in calibrated:
        fit = c.fit
        lines += [f"## {describe(c.deployment)}", ""]
        for name in fit.names:
            t = TERM[name]
            at = " (at its bound)" if name in fit.at_bound else ""
            lines.append(
                f"- **{name}** = {fit.terms[name]:.4g} ± {fit.sd[name]:.2g} {t.unit} "
                f"(prior {t.prior:g}){at}: {t.what}"
            )
        lines += ["", "| run | figure | measured | before | after | held out |",
                  "|---|---|---:|---:|---:|---:|"]  # fmt: skip
        for i, run in enumerate(c.runs):
            held = errors(run, fit.held_out[i])
            for key in run.keys.values():
                m = run.case.measured[key]
                b, a = fit.before[i].predicted[key], fit.after[i].predicted[key]
                h = f"{held[key] * 100:+.1f}%" if held else "-"
                lines.append(
                    f"| {run.id} | {key} | {m:.4g} | {b:.4g} ({(b / m - 1) * 100:+.1f}%) | "
                    f"{a:.4g} ({(a / m - 1) * 100:+.1f}%) | {h} |"
                )
        lines.append("")
    return "\n".join(lines)


def plot(calibrated: list[Calibrated], path: Path) -> None:
    """Predicted against measured per figure: hollow before calibration, filled after."""
    from sim.report.figures import plain_ticks, plt, save_png  # (matplotlib: a report's only)

    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
    for ax, family in zip(axes, LABELS, strict=True):
        pts = [
            (run.case.measured[run.keys[family]], c.fit.before[i].predicted[run.keys[family]],
             c.fit.after[i].predicted[run.keys[family]])
            for c in calibrated for i, run in enumerate(c.runs) if family in run.keys
        ]  # fmt: skip
        ax.set_title(f"{LABELS[family]} ({UNITS[family]})")
        if not pts:
            ax.text(0.5, 0.5, "not measured", ha="center", transform=ax.transAxes)
            continue
        m, b, a = (np.array(x) for x in zip(*pts, strict=True))
        ax.scatter(m, b, facecolors="none", edgecolors="tab:gray", label="before")
        ax.scatter(m, a, color="tab:blue", label="after calibration")
        lo, hi = min(m.min(), b.min(), a.min()) * 0.9, max(m.max(), b.max(), a.max()) * 1.1
        ax.plot([lo, hi], [lo, hi], color="black", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        plain_ticks(ax)
        ax.set_xlabel("measured")
        ax.set_ylabel("predicted")
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_png(fig, path)
