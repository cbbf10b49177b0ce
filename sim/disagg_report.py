"""Disaggregated prefill/decode outputs: the report of one run (task=simulate with
disagg.enabled) and of the pool-size search (scenario=disagg)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from sim.disagg_driver import TTFT_PARTS as PARTS
from sim.html_report import write_report
from sim.outputs import atomic_write, write_json
from sim.report import _save, _table, plot_latency_cdfs, plt

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
    return _save(fig, path)


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
    return _save(fig, path)


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
    rows.append(("**TTFT (sum of the means)**", f"**{total:,.1f}**", "", ""))
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
    text = f"""# Disaggregated prefill/decode

{s["model_id"]}, {s["backend"].removeprefix("sim:")}: {d["prefill"]["gpus"]} prefill GPUs and
{d["decode"]["gpus"]} decode GPUs ({d["ratio"]}, {d["gpus"]} in all), KV over
{link["display_name"]} ({link["bytes_per_s"] / 1e9:g} GB/s per GPU, {link["latency_s"] * 1e6:g} us
per transfer), {"layer by layer" if d["kv_transfer_layerwise"] else "after the prefill"}.
Workload: {s["sim"]["workload"]}.

## Headline

{_table(headline, ("metric", "value"))}

{_table(latency, ("latency (ms)", "mean", "median", "p90", "p99"))}

![latency CDFs]({plots[0]})

## Where TTFT goes

Each part per finished request; the means add up to the mean TTFT.

{_table(_split_rows(d["ttft_split_ms"]), ("part (ms)", "mean", "median", "p99"))}

![TTFT split]({plots[1]})

KV transfers: {t["requests"]:,} requests, {t["mean_tokens"]:,.0f} tokens and
{t["mean_bytes"] / 2**20:,.1f} MiB each on average, {t["total_bytes"] / 2**30:,.2f} GiB in all;
exposed transfer time mean {t["mean_ms"]:.2f} ms, p99 {t["p99_ms"]:.2f} ms.

## The pools

{_table(pools, POOL_HEADER)}

Every request was prefilled once, its KV sent once and its answer decoded once:
{c["prefilled"]:,} prefilled, {c["kv_sent"]:,} sent, {c["finished"]:,} finished of
{c["arrived"]:,} arrived ({c["rejected"]:,} rejected, {c["in_flight"]:,} in flight).

![pools]({plots[2]})

Files: `summary.json` (`disagg`: pools, link, transfers, TTFT split), `requests.parquet` (per
request: prefill and decode replica, transfer times and bytes, `ttft_*_s` parts),
`steps.parquet` (one row per step of either pool, `pool` column).
"""
    return write_report(out_dir, text)


def headline(s: dict) -> str:
    """scenario=disagg's answer in one sentence."""
    slo = " and ".join(
        f"p99 {k.removesuffix('_ms').upper()} <= {v:g} ms" for k, v in s["slo"].items()
    )
    b = s["best"]
    if b is None:
        text = (
            f"No split of up to {s['max_replicas']} prefill and {s['max_replicas']} decode "
            f"replicas serves {s['rate']:g} req/s of {s['model']} within {slo}"
        )
    else:
        pp, dp = s["prefill_pool"], s["decode_pool"]
        text = (
            f"{b['prefill_replicas']} prefill x {pp['tp']} {pp['hardware']} + "
            f"{b['decode_replicas']} decode x {dp['tp']} {dp['hardware']} ({b['gpus']} GPUs) "
            f"serve {s['rate']:g} req/s of {s['model']} within {slo}"
        )
    col = s.get("colocated")
    if col and col.get("gpus"):
        text += (
            f"; colocated, {col['replicas']} replicas x {col['tp']} {col['hardware']} "
            f"({col['gpus']} GPUs) do"
        )
        if b is not None:
            saved = col["gpus"] - b["gpus"]
            text += (
                f": disaggregation saves {saved} GPUs ({saved / col['gpus']:.0%})"
                if saved > 0
                else (
                    ": the same GPU count"
                    if saved == 0
                    else f": disaggregation takes {-saved} GPUs more"
                )
            )
    elif col:
        text += "; colocated replicas do not within the search"
    return text + "."


def plot_probes(s: dict, path: Path) -> str:
    """Each probed split: decode replicas against prefill replicas, coloured by verdict."""
    probes = pd.DataFrame(s["probes"])
    fig, ax = plt.subplots(figsize=(7, 4.6))
    colour = {"meets": "C2", "fails": "C3", "unclear": "C1"}
    for v, part in probes.groupby("verdict"):
        ax.scatter(part["prefill_replicas"], part["decode_replicas"], s=160, color=colour[v],
                   label=v, zorder=3)  # fmt: skip
    for _, r in probes.iterrows():
        ax.annotate(f"{int(r['gpus'])}", (r["prefill_replicas"], r["decode_replicas"]),
                    ha="center", va="center", fontsize=7, color="white", zorder=4)  # fmt: skip
    if s["best"] is not None:
        b = s["best"]
        ax.scatter([b["prefill_replicas"]], [b["decode_replicas"]], s=420, facecolors="none",
                   edgecolors="black", lw=1.5, label="fewest GPUs", zorder=5)  # fmt: skip
    ax.set_xlabel(f"prefill replicas (x {s['prefill_pool']['tp']} {s['prefill_pool']['hardware']})")
    ax.set_ylabel(f"decode replicas (x {s['decode_pool']['tp']} {s['decode_pool']['hardware']})")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("Splits probed at the rate (numbers: GPUs)", fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def report_text(s: dict, plots: list[str]) -> str:
    rows = [
        "| # | prefill | decode | GPUs | seeds | verdict | worst p99 / SLO | p99 TTFT (ms) "
        "| p99 TPOT (ms) | prefill busy | decode busy | mean TTFT: queue / prefill / wait / "
        "transfer / first decode (ms) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for k, p in enumerate(s["probes"], 1):
        parts = " / ".join(f"{p[f'ttft_{q}_ms']:,.1f}" for q in PARTS)
        rows.append(
            f"| {k} | {p['prefill_replicas']} | {p['decode_replicas']} | {p['gpus']} | "
            f"{p['seeds']} | {p['verdict']} | {p['margin']:.3f} ± {p['margin_half_width']:.3f} | "
            f"{p['p99_ttft_ms']:,.1f} | {p['p99_tpot_ms']:.1f} | {p['prefill_busy']:.0%} | "
            f"{p['decode_busy']:.0%} | {parts} |"
        )
    col = s.get("colocated")
    if col is None:
        colocated = "Not searched (disagg.colocated=false)."
    elif col.get("gpus") is None:
        colocated = f"Colocated replicas: {col['why']}"
    else:
        colocated = (
            f"Colocated (prefill and decode on the same GPUs, scenario=capacity's replica "
            f"search, the same SLOs and seeds): **{col['replicas']} replicas x {col['tp']} "
            f"{col['hardware']} = {col['gpus']} GPUs**, p99 TTFT {col['p99_ttft_ms']:,.0f} ms, "
            f"p99 TPOT {col['p99_tpot_ms']:.1f} ms ({col['simulations_run']} simulations)."
        )
    per = ", ".join(
        f"{r['prefill_replicas']} prefill -> "
        + (f"{r['decode_replicas']} decode ({r['gpus']} GPUs)" if r["gpus"] else "none meets")
        for r in s["per_prefill"]
    )
    link = s["link"]
    when = "layer by layer" if s["kv_transfer_layerwise"] else "after each prefill"
    return f"""# Disaggregated prefill/decode: the split that meets the SLOs

**{headline(s)}**

- {s["model"]}, {s["engine"]}, {s["num_requests"]} requests per simulation at {s["rate"]:g}
  req/s; SLOs on p99 ({", ".join(f"{k} <= {v:g}" for k, v in s["slo"].items())}); each probe's
  verdict is a 95% Student t interval of the worse p99 / SLO over its seeds.
- KV over {link["display_name"]} ({link["bytes_per_s"] / 1e9:g} GB/s per GPU,
  {link["latency_s"] * 1e6:g} us per transfer), {when}.
- Fewest decode replicas for each prefill count: {per}.
- {colocated}
- {s["simulations_run"]} simulations in {s["wall_time_s"]:.1f} s.

![probes]({plots[0]})

![TTFT split]({plots[1]})

## Probes

{chr(10).join(rows)}
"""


def write_search_outputs(s: dict, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(s["probes"])
    atomic_write(out_dir / "probes.csv", lambda tmp: frame.to_csv(tmp, index=False))
    shown = sorted(s["probes"], key=lambda p: (p["prefill_replicas"], p["decode_replicas"]))
    bars = {
        f"{p['prefill_replicas']}P+{p['decode_replicas']}D\n{p['verdict']}": {
            q: p[f"ttft_{q}_ms"] for q in PARTS
        }
        for p in shown
    }
    top = 1.5 * s["slo"]["ttft_ms"] if "ttft_ms" in s["slo"] else None
    plots = [
        plot_probes(s, out_dir / "splits.png"),
        plot_ttft_split(bars, out_dir / "ttft_split.png", "Mean TTFT in parts, each split probed",
                        top),
    ]  # fmt: skip
    write_report(out_dir, report_text(s, plots))
    write_json(out_dir / "summary.json", s)
