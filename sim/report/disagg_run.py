"""The report of one disaggregated simulation (task=simulate with disagg.enabled): where TTFT
goes part by part, the KV transfers, and both pools over time."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from sim.report.escape import Md, md_text
from sim.report.figures import md_table, plt, save_png
from sim.report.html import write_report
from sim.report.run_plots import plot_latency_cdfs
from sim.run.disagg_driver import TTFT_PARTS as PARTS

PART_LABELS = {
    "queue": "queued for prefill",
    "prefill": "prefill",
    "decode_wait": "waiting for decode blocks",
    "transfer": "KV transfer",
    "first_decode": "first decode step (queue + step)",
}
PART_COLOURS = {"queue": "C7", "prefill": "C1", "decode_wait": "C3", "transfer": "C4",
                "first_decode": "C0"}  # fmt: skip


def plot_ttft_split(
    bars: dict[str, dict[str, float]], path: Path, title: str, top_ms: float | None = None
) -> str:
    """Stacked bars: each bar's TTFT parts (ms); with `top_ms` the axis stops there and a
    taller bar's total is written at the top."""
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(bars) + 4), 3.8))
    names = list(bars)
    bottom = np.zeros(len(names))
    for part in PARTS:
        values = np.array([bars[n].get(part, 0.0) for n in names])
        ax.bar(names, values, bottom=bottom, label=PART_LABELS[part], color=PART_COLOURS[part])
        bottom += values
    if top_ms is not None and len(bottom) and bottom.max() > top_ms:
        ax.set_ylim(0, top_ms)
        for k, total in enumerate(bottom):
            if total > top_ms:
                ax.annotate(f"{total:,.0f} ms", (k, top_ms), ha="center", va="top", fontsize=7,
                            color="white", xytext=(0, -3), textcoords="offset points")  # fmt: skip
    ax.tick_params(axis="x", labelsize=8)
    ax.set_ylabel("ms")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(alpha=0.3, axis="y")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return save_png(fig, path)


def plot_pools(steps: pd.DataFrame, summary: dict, path: Path, bins: int = 100) -> str:
    """Per pool over time: tokens computed per second and KV blocks in use."""
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(11, 5.5), sharex=True)
    end = float((steps["start_s"] + steps["duration_s"]).max()) if len(steps) else 1.0
    edges = np.linspace(0.0, end, bins + 1)
    width = edges[1] - edges[0]
    for name, colour in (("prefill", "C1"), ("decode", "C0")):
        part = steps[steps["pool"] == name]
        tokens = part["prefill_tokens"] + part["decode_tokens"]
        hist, _ = np.histogram(part["start_s"], bins=edges, weights=tokens)
        ax1.plot((edges[:-1] + edges[1:]) / 2, hist / width, color=colour,
                 label=f"{name} pool: tokens computed / s")  # fmt: skip
        pool = summary["disagg"][name]
        usable = max(pool["num_blocks"] - 1, 1) * pool["replicas"]
        used = _blocks_in_use(part)
        ax2.step(used.index, used.to_numpy() / usable * 100, where="post", lw=0.8,
                 color=colour, label=f"{name} pool")  # fmt: skip
    ax1.set_ylabel("tokens / s")
    ax1.set_yscale("symlog", linthresh=100)
    ax1.legend(loc="upper right", fontsize=8)
    ax2.set_ylabel("KV blocks in use (%)")
    ax2.set_xlabel("simulated time (s)")
    ax2.set_ylim(0, 100)
    ax2.legend(loc="upper right", fontsize=8)
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    fig.suptitle("The two pools over time")
    fig.tight_layout()
    return save_png(fig, path)


def _blocks_in_use(part: pd.DataFrame) -> pd.Series:
    """The pool's KV blocks in use over time, summed over its replicas (each replica's count
    holds from its step's start until its next step)."""
    if not len(part):
        return pd.Series(dtype=float)
    wide = part.pivot_table(index="start_s", columns="replica", values="kv_blocks_used",
                            aggfunc="last")  # fmt: skip
    return wide.sort_index().ffill().fillna(0).sum(axis=1)


def _split_rows(split: dict) -> list[tuple]:
    rows = [
        (PART_LABELS[p], *(f"{split[p][k]:,.1f}" for k in ("mean", "median", "p99"))) for p in PARTS
    ]
    total = sum(split[p]["mean"] for p in PARTS)
    rows.append((Md("**TTFT (sum of the means)**"), Md(f"**{total:,.1f}**"), "", ""))
    return rows


POOL_HEADER = ("pool", "GPUs", "busy", "mean batch", "KV peak", "preemptions", "KV blocks each")


def write_run_report(result, out_dir: Path) -> Path:
    """report.md of one disaggregated simulation."""
    s = result.summary
    d = s["disagg"]
    plots = [
        plot_latency_cdfs(result.requests, out_dir / "latency_cdf.png"),
        plot_ttft_split(
            {k: {p: d["ttft_split_ms"][p][k] for p in PARTS} for k in ("mean", "median", "p99")},
            out_dir / "ttft_split.png",
            "TTFT in parts: mean, median and p99 of each part (ms)",
        ),
        plot_pools(result.steps, s, out_dir / "pools.png"),
    ]
    headline = [
        ("completed / rejected", f"{s['completed']} / {s['failed']}"),
        ("duration (s)", f"{s['duration']:.2f}"),
        ("request throughput (req/s)", f"{s['request_throughput']:.3f}"),
        ("output throughput (tok/s)", f"{s['output_throughput']:.1f}"),
    ]
    if "request_goodput" in s:
        slo = ", ".join(f"{k.removesuffix('_ms').upper()} <= {v:g} ms" for k, v in s["slo"].items())
        headline.append((f"request goodput (req/s; {slo})", f"{s['request_goodput']:.3f}"))
    latency = [
        (m.upper(), *(f"{s[f'{k}_{m}_ms']:.2f}" for k in ("mean", "median", "p90", "p99")))
        for m in ("ttft", "tpot", "itl", "e2el")
    ]
    pools = [
        (
            name,
            f"{p['replicas']} x {p['tp']} {p['hardware']}",
            f"{p['busy_fraction']:.1%}",
            f"{p['mean_batch_size']:.1f}",
            f"{p['kv_usage_peak']:.1%}",
            p["preemptions"],
            f"{p['num_blocks']:,}",
        )
        for name, p in ((n, d[n]) for n in ("prefill", "decode"))
    ]
    t, link = d["transfer"], d["link"]
    c = s["sim"]["conservation"]
    model, backend = md_text(s["model_id"]), md_text(s["backend"].removeprefix("sim:"))
    over = md_text(link["display_name"])  # the model, the GPU, the link: maybe a user's files
    text = f"""# Disaggregated prefill/decode

{model}, {backend}: {d["prefill"]["gpus"]} prefill GPUs and
{d["decode"]["gpus"]} decode GPUs ({d["ratio"]}, {d["gpus"]} in all), KV over
{over} ({link["bytes_per_s"] / 1e9:g} GB/s per GPU, {link["latency_s"] * 1e6:g} us
per transfer), {"layer by layer" if d["kv_transfer_layerwise"] else "after the prefill"}.
Workload: {md_text(s["sim"]["workload"])}.

## Headline

{md_table(headline, ("metric", "value"))}

{md_table(latency, ("latency (ms)", "mean", "median", "p90", "p99"))}

![latency CDFs]({plots[0]})

## Where TTFT goes

Each part per finished request; the means add up to the mean TTFT.

{md_table(_split_rows(d["ttft_split_ms"]), ("part (ms)", "mean", "median", "p99"))}

![TTFT split]({plots[1]})

KV transfers: {t["requests"]:,} requests, {t["mean_tokens"]:,.0f} tokens and
{t["mean_bytes"] / 2**20:,.1f} MiB each on average, {t["total_bytes"] / 2**30:,.2f} GiB in all;
exposed transfer time mean {t["mean_ms"]:.2f} ms, p99 {t["p99_ms"]:.2f} ms.

## The pools

{md_table(pools, POOL_HEADER)}

Every request was prefilled once, its KV sent once and its answer decoded once:
{c["prefilled"]:,} prefilled, {c["kv_sent"]:,} sent, {c["finished"]:,} finished of
{c["arrived"]:,} arrived ({c["rejected"]:,} rejected, {c["in_flight"]:,} in flight).

![pools]({plots[2]})

Files: `summary.json` (`disagg`: pools, link, transfers, TTFT split), `requests.parquet` (per
request: prefill and decode replica, transfer times and bytes, `ttft_*_s` parts),
`steps.parquet` (one row per step of either pool, `pool` column).
"""
    return write_report(out_dir, text)
