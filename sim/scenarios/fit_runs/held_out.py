"""The held-out study (`python -m sim.calibrate --runs FILE ... --held-out --out PATH`): for
every deployment with at least MIN_RUNS runs, calibrate on one run, the lowest concurrency (a
burst's size, or an open loop's rate; ties: the shortest prompt, then output, then id), and
predict the others with those terms; each held-out run's error before and after, per figure,
per deployment and pooled. Written as PATH (YAML), PATH's stem + .md (the tables) and + .png
(the plot)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sim.errors import UserError
from sim.run.calibration import TERMS, describe
from sim.run.outputs import write_text
from sim.scenarios.fit_runs.fit import Simulations, choose_terms, errors, fit
from sim.scenarios.fit_runs.inputs import Run, by_deployment
from sim.scenarios.fit_runs.output import LABELS, _round
from sim.user_files import yaml_text

MIN_RUNS = 4


@dataclass(frozen=True)
class Slice:
    deployment: dict
    calibrated_on: Run
    terms: dict[str, float]
    fitted: list[str]
    held_out: list[Run]
    before: list[dict]  # each held-out run's errors at the priors
    after: list[dict]  # ... and with the terms


def _order(run: Run) -> tuple:
    """Lowest load first: a closed loop's concurrency, a burst's size (every request at once),
    an open loop's rate; then the shortest prompt and output."""
    w = run.case.config.workload
    if w.concurrency:
        load = float(w.concurrency)
    elif w.kind == "burst":
        load = float(w.num_requests or 1e30)
    else:
        load = float(w.rate) if isinstance(w.rate, (int, float)) else 1e30
    return (load, w.input_len, w.output_len, run.id)


def study(runs: list[Run], jobs: int | None, asked: list[str] | None = None) -> list[Slice]:
    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    unset: dict[str, int] = {}  # runs that cannot be set up (a model the catalogue lacks)
    groups = [(d, g) for d, g in by_deployment(runs, unset) if len(g) >= MIN_RUNS]
    for why, n in unset.items():
        say(f"left out {n} runs: {why}")
    slices = []
    for k, (deployment, group) in enumerate(groups):
        group = sorted(group, key=_order)
        first, others = group[0], group[1:]
        names = choose_terms([first], asked)
        try:
            result = fit([first], names, jobs, held_out=False)
        except UserError as exc:  # (its one run cannot be fitted: the others stay unjudged)
            say(f"skip {describe(deployment)}: {exc}")
            continue
        prior = {t.name: t.prior for t in TERMS}
        before, after = Simulations(others, jobs).at([prior, result.terms])
        errs_b = [errors(r, x) for r, x in zip(others, before, strict=True)]
        errs_a = [errors(r, x) for r, x in zip(others, after, strict=True)]
        kept = [i for i in range(len(others)) if errs_b[i] is not None and errs_a[i] is not None]
        slices.append(
            Slice(deployment, first, result.terms, result.names, [others[i] for i in kept],
                  [errs_b[i] for i in kept], [errs_a[i] for i in kept])
        )  # fmt: skip
        shown = ", ".join(f"{n} {result.terms[n]:.3g}" for n in result.names)
        say(f"[{k + 1}/{len(groups)}] {describe(deployment)}: on {first.id}: {shown}")
    return slices


def medians(slices: list[Slice], when: str) -> dict[str, float | None]:
    """Median |error| per figure over every held-out run of `slices` (`when`: before, after)."""
    out = {}
    for family in LABELS:
        errs = [
            abs(e[run.keys[family]])
            for s in slices
            for run, e in zip(s.held_out, getattr(s, when), strict=True)
            if family in run.keys
        ]
        out[family] = float(np.median(errs)) if errs else None
    return out


def write(path: Path, slices: list[Slice], command: str) -> list[Path]:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "held_out_study": 1,
        "pooled": {"before": _rounded(medians(slices, "before")),
                   "after": _rounded(medians(slices, "after")),
                   "held_out_runs": sum(len(s.held_out) for s in slices)},
        "deployments": [
            {
                "deployment": s.deployment,
                "calibrated_on": s.calibrated_on.id,
                "terms": {n: _round(s.terms[n]) for n in s.fitted},
                "held_out_runs": len(s.held_out),
                "before": _rounded(medians([s], "before")),
                "after": _rounded(medians([s], "after")),
            }
            for s in slices
        ],
    }  # fmt: skip
    write_text(path, f"# Written by `{command}`.\n" + yaml_text(doc))
    png = path.with_suffix(".png")
    _plot(slices, png)
    md = path.with_suffix(".md")
    write_text(md, _report(slices, command, png.name))
    return [path, md, png]


def _rounded(d: dict) -> dict:
    return {k: None if v is None else _round(v, 4) for k, v in d.items()}


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:.1f}%"


def _report(slices: list[Slice], command: str, png: str) -> str:
    b, a = medians(slices, "before"), medians(slices, "after")
    n = sum(len(s.held_out) for s in slices)
    lines = [
        "# Held-out calibration: one run per deployment, the others predicted", "",
        f"`{command}`", "",
        f"{len(slices)} deployments with at least {MIN_RUNS} runs; each calibrated on its lowest "
        f"concurrency (or rate) run; {n} held-out runs. Median |error| over them:", "",
        "| figure | before | after |", "|---|---:|---:|",
        *(f"| {LABELS[f]} | {_pct(b[f])} | {_pct(a[f])} |" for f in LABELS), "",
        f"![held-out errors before and after]({png})", "",
        "| deployment | calibrated on | terms | runs | TPOT before | after | throughput before "
        "| after | TTFT before | after |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]  # fmt: skip
    for s in slices:
        sb, sa = medians([s], "before"), medians([s], "after")
        terms = ", ".join(f"{k} {s.terms[k]:.3g}" for k in s.fitted)
        cells = " | ".join(f"{_pct(sb[f])} | {_pct(sa[f])}" for f in ("tpot", "throughput", "ttft"))
        lines.append(
            f"| {describe(s.deployment)} | {s.calibrated_on.id} | {terms} | {len(s.held_out)} | "
            f"{cells} |"
        )
    return "\n".join(lines) + "\n"


def _plot(slices: list[Slice], path: Path) -> None:
    from sim.report.figures import plt, save_png  # (matplotlib: only a report pays it)

    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
    for ax, family in zip(axes, LABELS, strict=True):
        data = []
        for when in ("before", "after"):
            errs = [
                abs(e[run.keys[family]]) * 100
                for s in slices
                for run, e in zip(s.held_out, getattr(s, when), strict=True)
                if family in run.keys
            ]
            data.append(errs or [np.nan])
        ax.boxplot(data, tick_labels=["before", "after"], showfliers=False)
        ax.set_title(f"{LABELS[family]}: held-out |error| (%)")
        ax.set_ylim(bottom=0)
    fig.tight_layout()
    save_png(fig, path)
