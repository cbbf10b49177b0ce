"""A sweep report's figures (sim/scenarios/sweep/report.py): pareto.png, p99 TTFT against p99
TPOT per load with the settings no other beats on both joined and labelled, and goodput.png
(or another metric) against the first setting, per load. Labels and legends are placed by
sim/report/placement.py: no label overlaps another or leaves its panel, and the legend fits
the figure's width."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from sim.report.figures import plain_formatter, plain_ticks, plt, save_png
from sim.report.placement import SW_FIRST, legend_below, place_labels, suptitle_fitted
from sim.scenarios.sweep.table import fmt_value, label

UNITS = {"prefix_cache_hit_rate": "", "mean_ttft_ms": "ms", "output_throughput": "tok/s"}
MARKERS = "os^Dv<>P*X"


def settings_key(frame: pd.DataFrame, settings: list[str]) -> pd.Series:
    """Each run's settings as one label (sim/scenarios/sweep/table.py's label)."""
    return frame.apply(lambda r: label(r, settings), axis=1)


def pareto_mask(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Points no other point beats on both (lower is better), ties kept."""
    keep = np.ones(len(x), dtype=bool)
    for i in range(len(x)):
        worse = (x <= x[i]) & (y <= y[i]) & ((x < x[i]) | (y < y[i]))
        keep[i] = not worse.any()
    return keep


def plot_pareto(frame: pd.DataFrame, load: str | None, settings: list[str], path: Path) -> str:
    loads = sorted(frame[load].unique()) if load else [None]
    cols = 2 if len(loads) == 4 else min(len(loads), 3)
    rows = math.ceil(len(loads) / cols)
    # below the panels: the legends and, above, the title (about an inch and a half)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.2 * rows + 1.5), squeeze=False)
    colour_key = settings[0] if settings else None
    values = sorted(frame[colour_key].dropna().unique()) if colour_key else []
    cmap = plt.get_cmap("viridis", max(len(values), 2))
    colour = {v: cmap(i) for i, v in enumerate(values)}
    others = settings[1:]
    other_values = sorted(set(settings_key(frame, others))) if others else [""]
    marker = {v: MARKERS[i % len(MARKERS)] for i, v in enumerate(other_values)}
    fronts = []  # per panel: the front's points and their labels, placed once laid out
    for ax, value in zip(axes.flat, loads, strict=False):
        df = frame if load is None else frame[frame[load] == value]
        df = df.dropna(subset=["p99_ttft_ms", "p99_tpot_ms"])
        x, y = df["p99_tpot_ms"].to_numpy(float), df["p99_ttft_ms"].to_numpy(float)
        keep = pareto_mask(x, y)
        rest = settings_key(df, others) if others else pd.Series([""] * len(df), index=df.index)
        for (_, r), m in zip(df.iterrows(), rest, strict=True):
            c = colour.get(r[colour_key], "C0") if colour_key else "C0"
            ax.scatter(r["p99_tpot_ms"], r["p99_ttft_ms"], color=c, marker=marker[m], s=40)
        order = np.argsort(x[keep])
        ax.plot(x[keep][order], y[keep][order], color="black", lw=1, ls="--", alpha=0.7)
        names: dict[tuple, list[str]] = {}  # settings with the very same point share a label
        for xi, yi, (_, r) in zip(x[keep], y[keep], df[keep].iterrows(), strict=True):
            names.setdefault((xi, yi), []).append("/".join(fmt_value(r[k]) for k in settings))
        others_xy = [(xi, yi, xi, yi) for xi, yi in zip(x[~keep], y[~keep], strict=True)]
        fronts.append((ax, names, others_xy))
        slo = frame.attrs.get("slo", {})
        if "ttft" in slo:
            ax.axhline(slo["ttft"], color="red", lw=0.8, ls=":")
        if "tpot" in slo:
            ax.axvline(slo["tpot"], color="red", lw=0.8, ls=":")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.margins(0.08, 0.12)  # room for the front's labels inside the panel
        plain_ticks(ax)
        ax.set_xlabel("p99 TPOT (ms)")
        ax.set_ylabel("p99 TTFT (ms)")
        ax.set_title(f"{load} = {fmt_value(value)}" if load else "all runs", fontsize=10)
        ax.grid(alpha=0.3, which="both")
    for ax in list(axes.flat)[len(loads) :]:
        ax.axis("off")
    edge = 0.0
    if values:
        handles = [plt.Line2D([], [], color=colour[v], marker="o", ls="", label=fmt_value(v))
                   for v in values]  # fmt: skip
        edge = legend_below(fig, handles, title=f"colour: {colour_key}")
    if others:
        handles = [plt.Line2D([], [], color="grey", marker=marker[v], ls="", label=v)
                   for v in other_values]  # fmt: skip
        edge = legend_below(fig, handles, title="marker", bottom=edge)
    suptitle_fitted(
        fig,
        "Trade-off: p99 TTFT vs p99 TPOT. Dashed: the settings no other beats on both, labelled "
        + "/".join(settings)
        + " (one label for settings at the same point); red: SLOs",
        fontsize=9,
    )
    fig.tight_layout(rect=(0, edge, 1, 1))
    for ax, names, others_xy in fronts:
        points = list(names)
        place_labels(ax, [p[0] for p in points], [p[1] for p in points],
                     [" = ".join(names[p]) for p in points], fontsize=7,
                     avoid=others_xy, directions=SW_FIRST)  # fmt: skip
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
        series = settings_key(df, others) if others else pd.Series([""] * len(df), index=df.index)
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
