"""The aggregated report of a multirun: report.md with its plots in the sweep dir.

Written by the sweep callback from the sweep table alone (sim/scenarios/sweep/table.py), so it
is the same however many processes or machines ran the points. The swept columns split into the load
(`rate` or `concurrency`, when swept) and the settings (everything else swept). Then:

- a trade-off table per load: p50/p99 TTFT, TPOT and ITL, throughput and, with SLOs set
  (slo.*), goodput as `vllm bench serve --goodput` counts it;
- pareto.png: p99 TTFT against p99 TPOT per load, the settings no other beats on both joined;
- goodput.png: goodput (or throughput) against the first setting, per load; when the prefix
  cache's hit rate differs between runs, hit_rate.png and ttft.png the same way;
- a recommendation in one sentence: the settings with the most goodput over the loads swept,
  and why, against the engine's default when the sweep has it (else the runner-up); a sweep
  of the load alone says what it shows instead (sim/scenarios/sweep/load.py) above one table
  with a row per load;
- for a sweep of scenario=capacity: capacity and cost per million output tokens per setting.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from sim.report.figures import md_table as _md
from sim.report.figures import plain_formatter, plain_ticks, plt, save_png
from sim.report.html import write_report
from sim.run.outputs import write_json
from sim.scenarios.sweep.load import load_findings
from sim.scenarios.sweep.table import fmt_value, label, split_columns

UNITS = {"prefix_cache_hit_rate": "", "mean_ttft_ms": "ms", "output_throughput": "tok/s"}
LATENCY = ("ttft", "tpot", "itl")
NAMES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2E latency"}


def _settings_key(frame: pd.DataFrame, settings: list[str]) -> pd.Series:
    return frame.apply(lambda r: label(r, settings), axis=1)


def pareto_mask(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Points no other point beats on both (lower is better), ties kept."""
    keep = np.ones(len(x), dtype=bool)
    for i in range(len(x)):
        worse = (x <= x[i]) & (y <= y[i]) & ((x < x[i]) | (y < y[i]))
        keep[i] = not worse.any()
    return keep


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
    df = frame.assign(setting=_settings_key(frame, settings), headroom=headroom(frame))
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
    df = frame.assign(setting=_settings_key(frame, settings))
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


def plot_pareto(frame: pd.DataFrame, load: str | None, settings: list[str], path: Path) -> str:
    loads = sorted(frame[load].unique()) if load else [None]
    cols = 2 if len(loads) == 4 else min(len(loads), 3)
    rows = math.ceil(len(loads) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.2 * rows), squeeze=False)
    colour_key = settings[0] if settings else None
    values = sorted(frame[colour_key].dropna().unique()) if colour_key else []
    cmap = plt.get_cmap("viridis", max(len(values), 2))
    colour = {v: cmap(i) for i, v in enumerate(values)}
    markers = "os^Dv<>P*X"
    others = settings[1:]
    other_values = sorted(set(_settings_key(frame, others))) if others else [""]
    marker = {v: markers[i % len(markers)] for i, v in enumerate(other_values)}
    for ax, value in zip(axes.flat, loads, strict=False):
        df = frame if load is None else frame[frame[load] == value]
        df = df.dropna(subset=["p99_ttft_ms", "p99_tpot_ms"])
        x, y = df["p99_tpot_ms"].to_numpy(float), df["p99_ttft_ms"].to_numpy(float)
        keep = pareto_mask(x, y)
        rest = _settings_key(df, others) if others else pd.Series([""] * len(df), index=df.index)
        for (_, r), m in zip(df.iterrows(), rest, strict=True):
            c = colour.get(r[colour_key], "C0") if colour_key else "C0"
            ax.scatter(r["p99_tpot_ms"], r["p99_ttft_ms"], color=c, marker=marker[m], s=40)
        order = np.argsort(x[keep])
        ax.plot(x[keep][order], y[keep][order], color="black", lw=1, ls="--", alpha=0.7)
        names: dict[tuple, list[str]] = {}  # settings with the very same point share a label
        for xi, yi, (_, r) in zip(x[keep], y[keep], df[keep].iterrows(), strict=True):
            names.setdefault((xi, yi), []).append("/".join(fmt_value(r[k]) for k in settings))
        for (xi, yi), same in names.items():
            ax.annotate(" = ".join(same), (xi, yi), fontsize=7, alpha=0.8, xytext=(3, 3),
                        textcoords="offset points")  # fmt: skip
        slo = frame.attrs.get("slo", {})
        if "ttft" in slo:
            ax.axhline(slo["ttft"], color="red", lw=0.8, ls=":")
        if "tpot" in slo:
            ax.axvline(slo["tpot"], color="red", lw=0.8, ls=":")
        ax.set_xscale("log")
        ax.set_yscale("log")
        plain_ticks(ax)
        ax.set_xlabel("p99 TPOT (ms)")
        ax.set_ylabel("p99 TTFT (ms)")
        ax.set_title(f"{load} = {fmt_value(value)}" if load else "all runs", fontsize=10)
        ax.grid(alpha=0.3, which="both")
    for ax in list(axes.flat)[len(loads) :]:
        ax.axis("off")
    handles = [
        plt.Line2D([], [], color=colour[v], marker="o", ls="", label=f"{colour_key}={v}")
        for v in values
    ]
    handles += [
        plt.Line2D([], [], color="grey", marker=marker[v], ls="", label=v)
        for v in other_values
        if v
    ]
    if handles:
        fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 5), fontsize=7)
    fig.suptitle(
        "Trade-off: p99 TTFT vs p99 TPOT. Dashed: the settings no other beats on both, labelled "
        + "/".join(settings)
        + "; red: SLOs",
        fontsize=9,
    )
    fig.tight_layout(rect=(0, 0.08 if handles else 0, 1, 0.96))
    return save_png(fig, path)


def plot_goodput(
    frame: pd.DataFrame, load: str | None, settings: list[str], path: Path, metric: str = ""
) -> str:
    """A metric (default: goodput, else throughput) against the first setting, per load."""
    metric = metric or ("request_goodput" if "request_goodput" in frame else "request_throughput")
    unit = UNITS.get(metric, "req/s")
    x_key, others = settings[0], settings[1:]
    loads = sorted(frame[load].unique()) if load else [None]
    fig, axes = plt.subplots(1, len(loads), figsize=(4.6 * len(loads), 3.8), squeeze=False)
    for ax, value in zip(axes.flat, loads, strict=True):
        df = frame if load is None else frame[frame[load] == value]
        series = _settings_key(df, others) if others else pd.Series([""] * len(df), index=df.index)
        for k, (name, part) in enumerate(df.groupby(series, sort=True)):
            part = part.sort_values(x_key)
            ax.plot(part[x_key], part[metric], marker="o", color=f"C{k}", label=name or None)
        if _numeric(df[x_key]) and df[x_key].min() > 0 and df[x_key].max() / df[x_key].min() > 8:
            ax.set_xscale("log", base=2)
            ax.set_xticks(sorted(df[x_key].unique()))
            ax.xaxis.set_major_formatter(plain_formatter())
            ax.tick_params(axis="x", labelrotation=45, labelsize=7)
        ax.set_xlabel(x_key)
        ax.set_ylabel(f"{metric} ({unit})" if unit else metric)
        ax.set_title(f"{load} = {fmt_value(value)}" if load else "", fontsize=10)
        if load and unit == "req/s":
            ax.axhline(float(value), color="grey", lw=0.8, ls=":")  # offered load
        ax.grid(alpha=0.3)
    if others:
        axes.flat[0].legend(fontsize=7)
    offered = load and unit == "req/s"
    fig.suptitle(f"{metric} per setting" + (" (dotted: offered load)" if offered else ""))
    fig.tight_layout()
    return save_png(fig, path)


def _numeric(s: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(s)


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


def write_sweep_report(sweep_dir: Path, frame: pd.DataFrame, default: str | None = None) -> dict:
    """report.md, pareto.png and goodput.png (when the table has the metrics) and
    sweep_summary.json in `sweep_dir`. `default`: the label of the engine's default settings
    among the swept ones, when known."""
    load, settings = split_columns(frame)
    parts = [f"# Sweep report\n\n{len(frame)} runs (one dir each beside this report)"]
    unfinished = frame.attrs.get("unfinished", [])
    if unfinished:
        parts[0] += f"; unfinished (no summary.json): {', '.join(unfinished)}"
    parts[0] += (
        f". Swept: {', '.join(settings) or 'nothing but the load'}"
        + (f"; load: {load}" if load else "")
        + ". Every number comes from the runs' summary.json (the table: sweep.csv)."
    )
    summary: dict = {"runs": len(frame), "load": load, "settings": settings}
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
        parts.insert(1, f"**{sentence}.**")
    elif "p99_ttft_ms" in frame and not frame.empty:
        rec = recommend(frame, load, settings, default)
        if rec:
            summary["recommendation"] = rec
            lead = "What the sweep shows" if load and not settings else "Recommendation"
            parts.insert(1, f"**{lead}.** {rec['sentence']}")
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
