"""The aggregated report of a multirun: report.md with its plots in the sweep dir.

Written by the sweep callback from the sweep table alone (sim/scenarios/sweep/table.py), so it
is the same however many processes or machines ran the points. The swept columns split into the load
(`rate` or `concurrency`, when swept) and the settings (everything else swept). Then:

- a trade-off table per load: p50/p99 TTFT, TPOT and ITL, throughput and, with SLOs set
  (slo.*), goodput as `vllm bench serve --goodput` counts it;
- pareto.png: p99 TTFT against p99 TPOT per load, the settings no other beats on both joined;
- goodput.png: goodput (or throughput) against the first setting, per load; when the prefix
  cache's hit rate differs between runs, hit_rate.png and ttft.png the same way (the figures:
  sim/scenarios/sweep/plots.py);
- a recommendation in one sentence: the settings with the most goodput over the loads swept,
  and why, against the engine's default when the sweep has it (else the runner-up), then what
  that default is and what every run sets besides the swept settings, and why
  (sim/scenarios/sweep/defaults.py); a sweep
  of the load alone says what it shows instead (sim/scenarios/sweep/load.py) above one table
  with a row per load;
- for a sweep of scenario=capacity: capacity and cost per million output tokens per setting.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from sim.report.escape import md_text
from sim.report.figures import md_table as _md
from sim.report.html import write_report
from sim.run.outputs import write_json
from sim.scenarios.sweep.defaults import EngineDefaults
from sim.scenarios.sweep.load import load_findings
from sim.scenarios.sweep.plots import plot_goodput, plot_pareto, settings_key
from sim.scenarios.sweep.table import fmt_value, label, split_columns

LATENCY = ("ttft", "tpot", "itl")
NAMES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2E latency"}


TIE = 0.01  # goodputs within 1% of each other are a tie (durations differ by a few steps)


def headroom(frame: pd.DataFrame) -> pd.Series:
    """Per run, the worse of p99 TTFT / its target and p99 TPOT / its target (p99 TTFT alone
    without SLOs): below 1 the p99 request meets the SLOs, and the lower the more room."""
    slo = frame.attrs.get("slo", {})
    ratios = [frame[f"p99_{m}_ms"] / slo[m] for m in ("ttft", "tpot") if m in slo]
    return pd.concat(ratios, axis=1).max(axis=1) if ratios else frame["p99_ttft_ms"]


def rank_settings(frame: pd.DataFrame, load: str | None, settings: list[str]) -> pd.DataFrame:
    """One row per setting: mean goodput over the loads swept (throughput without SLOs), mean
    p99 TTFT and TPOT, mean headroom; best first. Settings within 1% of the most goodput tie,
    and among them the one with the most headroom (lowest worst p99 / target) leads."""
    metric = "request_goodput" if "request_goodput" in frame else "request_throughput"
    df = frame.assign(setting=settings_key(frame, settings), headroom=headroom(frame))
    agg = df.groupby("setting", sort=False).agg(
        score=(metric, "mean"),
        p99_ttft_ms=("p99_ttft_ms", "mean"),
        p99_tpot_ms=("p99_tpot_ms", "mean"),
        headroom=("headroom", "mean"),
    )
    agg = agg.reset_index()
    top = agg["score"] >= agg["score"].max() * (1 - TIE)
    agg["tier"] = np.where(top, 0, 1)
    agg["order"] = np.where(top, agg["headroom"], -agg["score"])
    agg = agg.sort_values(["tier", "order"], kind="stable")
    return agg.drop(columns=["tier", "order"]).reset_index(drop=True)


def recommend(
    frame: pd.DataFrame, load: str | None, settings: list[str], default: str | None
) -> dict | None:
    """The recommended settings and the reason, in one sentence, or None without metrics."""
    if "p99_ttft_ms" not in frame or frame.empty:
        return None
    ranked = rank_settings(frame, load, settings)
    best = ranked.iloc[0]["setting"]
    if len(ranked) == 1 and load and not settings:  # the load alone: what it shows
        return {"setting": best, "load": load, **load_findings(frame, load)}
    if len(ranked) == 1:
        return {"setting": best, "sentence": f"Only one setting was swept: {best}."}
    df = frame.assign(setting=settings_key(frame, settings))
    goodput = "request_goodput" in frame
    metric = "request_goodput" if goodput else "request_throughput"
    what = "goodput" if goodput else "throughput"
    ref_name = default if default in set(ranked["setting"]) and default != best else None
    ref = ref_name or ranked.iloc[1]["setting"]
    ref_role = "the engine's default" if ref_name else "the runner-up"
    # rows of the two settings, matched by load (no load swept: one row each, matched as such)
    a = df[df["setting"] == best]
    b = df[df["setting"] == ref]
    a = a.set_index(load) if load else a.reset_index(drop=True).head(1)
    b = b.set_index(load) if load else b.reset_index(drop=True).head(1)
    common = a.index.intersection(b.index)
    gap = (a.loc[common, metric] - b.loc[common, metric]).astype(float)
    at = gap.idxmax() if len(gap) else a.index[0]
    ra, rb = a.loc[at], b.loc[at]
    where = f"at {load} {fmt_value(at)}" if load else "in the run"
    slo = frame.attrs.get("slo", {})
    within = (
        " within " + " and ".join(f"{NAMES[m]} <= {t:g} ms" for m, t in slo.items())
        if goodput
        else ""
    )
    mean = ranked.iloc[0]["score"]
    tie = len(gap) and float(gap.max()) <= TIE * max(float(ra[metric]), 1e-12)
    if tie:
        room = ranked.set_index("setting")["headroom"]
        bound = "its target" if slo else "p99 TTFT"
        sentence = (
            f"Use {best}: it serves as much {what} as {ref} ({ref_role}; mean {mean:.2f} req/s"
            f"{within}) with more room to spare: its worse p99 is on average "
            f"{room[best]:.0%} of {bound} against {room[ref]:.0%}"
            if slo
            else f"Use {best}: it serves as much {what} as {ref} ({ref_role}; mean {mean:.2f} "
            f"req/s) at a lower p99 TTFT ({ranked.iloc[0]['p99_ttft_ms']:,.0f} ms against "
            f"{room[ref]:,.0f})"
        )
    else:
        why = _miss_reason(ra, rb) if goodput else ""
        runs = "loads" if load else "runs"
        top = ranked["score"].max()
        claim = (
            f"it has the most {what} over the {runs} swept (mean {mean:.2f} req/s{within})"
            if mean >= top
            else f"its {what} over the {runs} swept is within 1% of the most (mean {mean:.2f} "
            f"against {top:.2f} req/s{within}) and it has the most room below the SLOs of those"
        )
        sentence = (
            f"Use {best}: {claim}; {where} it gives {ra[metric]:.2f} req/s against "
            f"{rb[metric]:.2f} for {ref} ({ref_role}){why}"
        )
    return {
        "setting": best,
        "compared_with": ref,
        "compared_role": ref_role,
        "at_load": None if not load else _plain(at),
        "sentence": sentence + ".",
    }


def _miss_reason(best, ref) -> str:
    """Which target the compared setting misses most, against the recommended one."""
    misses = {
        m: 100.0 - float(ref[f"{m}_slo_met_pct"])
        for m in ("ttft", "tpot", "e2el")
        if f"{m}_slo_met_pct" in ref and not pd.isna(ref[f"{m}_slo_met_pct"])
    }
    if not misses:
        return ""
    m = max(misses, key=misses.get)
    ours = 100.0 - float(best[f"{m}_slo_met_pct"])
    if misses[m] <= ours:
        return ""
    p99 = f"p99_{m}_ms"
    return (
        f", because {misses[m]:.0f}% of its requests miss the {NAMES[m]} target "
        f"(p99 {ref[p99]:,.0f} ms) against {ours:.0f}% here (p99 {best[p99]:,.0f} ms)"
    )


def _plain(v):
    return v.item() if hasattr(v, "item") else v


def _num(v, digits: int = 1) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:,.{digits}f}"


def tradeoff_tables(frame: pd.DataFrame, load: str | None, settings: list[str]) -> str:
    goodput = "request_goodput" in frame
    header = [*settings]
    for m in LATENCY:
        header += [f"p50 {NAMES[m]}", f"p99 {NAMES[m]}"]
    header += ["req/s"] + (["goodput", "within SLOs"] if goodput else [])
    out = []
    loads = sorted(frame[load].unique()) if load else [None]
    for value in loads:
        df = frame if load is None else frame[frame[load] == value]
        rows = []
        for _, r in df.iterrows():
            row = [fmt_value(r[k]) for k in settings]
            for m in LATENCY:
                row += [_num(r.get(f"median_{m}_ms")), _num(r.get(f"p99_{m}_ms"))]
            row.append(_num(r.get("request_throughput"), 2))
            if goodput:
                row += [_num(r.get("request_goodput"), 2), f"{_num(r.get('slo_met_pct'))}%"]
            rows.append(row)
        title = f"### {load} = {fmt_value(value)} req/s\n\n" if load else ""
        out.append(title + _md(rows, header))
    return "\n\n".join(out)


def capacity_table(frame: pd.DataFrame, settings: list[str]) -> str:
    cols = [
        ("capacity_rate", "capacity (req/s)", 2),
        ("gpus", "GPUs", 0),
        ("capacity_rate_per_gpu", "req/s per GPU", 2),
        ("output_throughput_at_capacity", "output tok/s", 0),
        ("cost_per_million_output_tokens", "$ per 1M output tokens", 3),
    ]
    df = frame.sort_values("capacity_rate_per_gpu", ascending=False, kind="stable")
    rows = [
        [*(fmt_value(r[k]) for k in settings), *(_num(r.get(c), d) for c, _, d in cols)]
        for _, r in df.iterrows()
    ]
    return _md(rows, [*settings, *(h for _, h, _ in cols)])


def write_sweep_report(
    sweep_dir: Path,
    frame: pd.DataFrame,
    default: str | None = None,
    engine: EngineDefaults | None = None,
) -> dict:
    """report.md, pareto.png and goodput.png (when the table has the metrics) and
    sweep_summary.json in `sweep_dir`. `default`: the label of the engine's default settings
    among the swept ones, when known; `engine`: what the runs resolved to and what every run
    sets against the engine's own values (sim/scenarios/sweep/defaults.py)."""
    load, settings = split_columns(frame)
    # swept values (and so the settings' labels), run dirs, GPU and model names are a user's
    # strings: md_table escapes its cells, md_text the rest
    parts = [f"# Sweep report\n\n{len(frame)} runs (one dir each beside this report)"]
    unfinished = frame.attrs.get("unfinished", [])
    if unfinished:
        parts[0] += f"; unfinished (no summary.json): {md_text(', '.join(unfinished))}"
    parts[0] += (
        f". Swept: {md_text(', '.join(settings)) or 'nothing but the load'}"
        + (f"; load: {load}" if load else "")
        + ". Every number comes from the runs' summary.json (the table: sweep.csv)."
    )
    summary: dict = {"runs": len(frame), "load": load, "settings": settings}
    if engine:
        parts.append("**The engine's defaults.** " + md_text(" ".join(engine.sentences())))
        summary["engine_defaults"] = engine.record
    plots = []
    if "capacity_rate" in frame and not frame.empty:
        parts.append("## Capacity within the SLOs\n\n" + capacity_table(frame, settings))
        best = frame.sort_values("capacity_rate_per_gpu", ascending=False, kind="stable").iloc[0]
        sentence = (
            f"Most requests per GPU: {label(best, settings)}, "
            f"{best['capacity_rate']:.2f} req/s on {best['gpus']:.0f} GPU(s)"
        )
        if not pd.isna(best.get("cost_per_million_output_tokens", np.nan)):
            sentence += f", ${best['cost_per_million_output_tokens']:.3f} per million output tokens"
        summary["recommendation"] = {"setting": label(best, settings), "sentence": sentence + "."}
        parts.insert(1, f"**{md_text(sentence)}.**")
    elif "p99_ttft_ms" in frame and not frame.empty:
        rec = recommend(frame, load, settings, default)
        if rec:
            summary["recommendation"] = rec
            lead = "What the sweep shows" if load and not settings else "Recommendation"
            parts.insert(1, f"**{lead}.** {md_text(rec['sentence'])}")
        if settings:
            plots.append(plot_pareto(frame, load, settings, sweep_dir / "pareto.png"))
            plots.append(plot_goodput(frame, load, settings, sweep_dir / "goodput.png"))
            if frame.get("prefix_cache_hit_rate", pd.Series(dtype=float)).nunique() > 1:
                for metric, name in (
                    ("prefix_cache_hit_rate", "hit_rate"),
                    ("mean_ttft_ms", "ttft"),
                ):
                    plots.append(
                        plot_goodput(frame, load, settings, sweep_dir / f"{name}.png", metric)
                    )
        if load and not settings:  # the load alone: one table, a row per load
            return _finish(sweep_dir, parts, summary, plots, frame, load)
        ranked = rank_settings(frame, load, settings)
        metric = "goodput" if "request_goodput" in frame else "throughput"
        rows = [
            [
                r["setting"] + (" (engine default)" if r["setting"] == default else ""),
                _num(r["score"], 2),
                _num(r["p99_ttft_ms"]),
                _num(r["p99_tpot_ms"]),
                f"{r['headroom']:.2f}",
            ]
            for _, r in ranked.iterrows()
        ]
        room = "worst p99 / SLO" if frame.attrs.get("slo") else "p99 TTFT"
        parts.append(
            f"## Settings ranked by mean {metric} over the loads\n\n"
            f"Within 1% of the most {metric} the one with the lowest mean {room} leads.\n\n"
            + _md(
                rows,
                ["settings", f"mean {metric} (req/s)", "mean p99 TTFT", "mean p99 TPOT", room],
            )
        )
        if slo := frame.attrs.get("slo", {}):
            parts.append(goodput_note(slo))
        for p in plots:
            parts.append(f"![{p}]({p})")
        parts.append(
            "## Trade-off per load (ms; p50 / p99)\n\n" + tradeoff_tables(frame, load, settings)
        )
    summary["plots"] = plots
    write_report(sweep_dir, "\n\n".join(parts) + "\n")
    write_json(sweep_dir / "sweep_summary.json", summary)
    return summary


def goodput_note(slo: dict) -> str:
    return (
        "Goodput as `vllm bench serve --goodput` counts it: finished requests meeting "
        + " and ".join(f"{NAMES[m]} <= {t:g} ms" for m, t in slo.items())
        + " (TPOT counted 0 for one-token answers), per second of the run."
    )


def _finish(sweep_dir: Path, parts, summary: dict, plots, frame: pd.DataFrame, load: str):
    """A sweep of the load alone: its SLO note and one table with a row per load."""
    if slo := frame.attrs.get("slo", {}):
        parts.append(goodput_note(slo))
    by_load = frame.sort_values(load, kind="stable")
    parts.append(
        f"## Trade-off per {load} (ms; p50 / p99)\n\n" + tradeoff_tables(by_load, None, [load])
    )
    summary["plots"] = plots
    write_report(sweep_dir, "\n\n".join(parts) + "\n")
    write_json(sweep_dir / "sweep_summary.json", summary)
    return summary
