"""report.md and its plots, written into the run dir."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from sim.report.figures import md_table, plt, save_png
from sim.report.html import write_report as write_md_html
from sim.run.overview import StepOverview

GIB = 2**30


CDF_POINTS = 20_000  # a longer run's CDF is drawn through this many of its points


def plot_latency_cdfs(requests: pd.DataFrame, path: Path) -> str:
    done = requests.loc[requests["status"] == "finished", ["ttft_s", "tpot_s", "e2el_s"]]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    fig.subplots_adjust(left=0.06, right=0.99, bottom=0.16, top=0.86, wspace=0.28)
    for ax, (col, label) in zip(
        axes, [("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2el_s", "E2E latency")], strict=True
    ):
        ms = np.sort(done[col].dropna().to_numpy() * 1e3)
        if len(ms):
            shown = np.unique(np.linspace(0, len(ms) - 1, min(len(ms), CDF_POINTS)).astype(int))
            ax.plot(ms[shown], (shown + 1) / len(ms), color="C0")  # every point up to 20,000
            for p, style in ((50, ":"), (99, "--")):
                ax.axvline(np.percentile(ms, p), color="grey", ls=style, lw=1, label=f"p{p}")
        ax.set_xlabel(f"{label} (ms)")
        ax.set_ylim(0, 1.01)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("fraction of requests")
    axes[0].legend(loc="lower right")
    fig.suptitle("Latency distributions (finished requests)")
    return save_png(fig, path)


def plot_throughput_kv(view: StepOverview, num_blocks: int, path: Path) -> str:
    edges = view.edges
    width = edges[1] - edges[0]
    mids = (edges[:-1] + edges[1:]) / 2
    steps = view.sample
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(11, 5.5), sharex=True)
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.1, top=0.92, hspace=0.12)
    ax1.plot(mids, view.decode_tokens / width, label="decode (output) tokens/s")
    ax1.plot(mids, view.prefill_tokens / width, label="prefill tokens/s", alpha=0.7)
    ax1.set_ylabel("tokens / s")
    ax1.legend(loc="upper right")
    ax1.grid(alpha=0.3)
    ax2.step(
        steps["start_s"],
        steps["kv_blocks_used"] / max(num_blocks - 1, 1) * 100,
        where="post",
        lw=0.8,
    )
    ax2.set_ylabel("KV blocks in use (%)" + _every(view))
    ax2.set_xlabel("simulated time (s)")
    ax2.set_ylim(0, 100)
    ax2.grid(alpha=0.3)
    fig.suptitle("Throughput and KV-cache usage over time")
    return save_png(fig, path)


def _every(view: StepOverview) -> str:
    return "" if view.every == 1 else f"\n(every {view.every}th step)"


def plot_batch_composition(view: StepOverview, budget: int, path: Path) -> str:
    """Per step: requests by phase, tokens by phase (log scale), and the waiting queue."""
    steps = view.sample
    fig, (ax1, ax2, ax3) = plt.subplots(3, 1, figsize=(11, 7), sharex=True)
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.08, top=0.94, hspace=0.12)
    t = steps["start_s"].to_numpy()
    decode = steps["decode_tokens"].to_numpy()  # one token per decoding request
    prefill_reqs = steps["batch_size"].to_numpy() - decode
    ax1.fill_between(t, 0, decode, step="post", label="decoding", alpha=0.8)
    ax1.fill_between(t, decode, decode + prefill_reqs, step="post", label="prefilling", alpha=0.7)
    ax1.set_ylabel("requests in step")
    ax1.legend(loc="upper right")
    ax2.step(
        t,
        np.maximum(steps["prefill_tokens"], 0.8),
        where="post",
        lw=0.8,
        label="prefill tokens",
        color="C1",
    )
    ax2.step(t, np.maximum(decode, 0.8), where="post", lw=0.8, label="decode tokens", color="C0")
    ax2.axhline(budget, color="grey", ls="--", lw=1, label="token budget")
    ax2.set_yscale("log")
    ax2.set_ylim(bottom=0.8)
    ax2.set_ylabel("tokens in step")
    ax2.legend(loc="upper right")
    ax3.step(t, steps["num_waiting"], where="post", lw=0.8, color="C3")
    ax3.set_ylabel("waiting requests")
    ax3.set_xlabel("simulated time (s)")
    for ax in (ax1, ax2, ax3):
        ax.grid(alpha=0.3)
    fig.suptitle("Batch composition per step" + _every(view).replace("\n", " "))
    return save_png(fig, path)


def write_report(result, out_dir: Path) -> Path:
    """report.md beside three PNG plots. `result` is a sim.run.simulate.RunResult."""
    s, setup = result.summary, result.setup
    cfg, sim = setup.config, s["sim"]
    view = result.overview  # the steps as the plots read them (built once)
    plots = [
        plot_latency_cdfs(result.requests, out_dir / "latency_cdf.png"),
        plot_throughput_kv(view, setup.memory.num_blocks, out_dir / "throughput_kv.png"),
        plot_batch_composition(
            view,
            setup.settings.max_num_batched_tokens,
            out_dir / "batch_composition.png",
        ),
    ]
    c = sim["conservation"]
    headline = [
        ("completed / rejected", f"{s['completed']} / {s['failed']}"),
        ("duration (s)", f"{s['duration']:.2f}"),
        ("request throughput (req/s)", f"{s['request_throughput']:.3f}"),
        ("output throughput (tok/s)", f"{s['output_throughput']:.1f}"),
        ("total token throughput (tok/s)", f"{s['total_token_throughput']:.1f}"),
    ]
    if sim["stopped_at_s"] is not None:
        headline.append(
            (
                "stopped by max_sim_time_s at (s)",
                f"{sim['stopped_at_s']:.2f}: {c['in_flight_running']:,} running and "
                f"{c['in_flight_waiting']:,} waiting in flight, {c['not_sent']:,} not yet sent",
            )
        )
    if "request_goodput" in s:
        slo = ", ".join(f"{k.removesuffix('_ms').upper()} <= {v:g} ms" for k, v in s["slo"].items())
        headline.append(
            (f"request goodput (req/s; {slo})", f"{s['request_goodput']:.3f}"),
        )
        headline.append(("finished requests within every SLO", f"{s['slo_met_pct']:.1f}%"))
    latency = [
        (m.upper(), *(f"{s[f'{k}_{m}_ms']:.2f}" for k in ("mean", "median", "p90", "p99")))
        for m in ("ttft", "tpot", "itl", "e2el")
    ]
    figures = [
        (
            "requests: arrived = finished + rejected + in flight",
            f"{c['arrived']:,} = {c['finished']:,} + {c['rejected']:,} + {c['in_flight']:,}"
            + (f" ({c['not_sent']:,} not yet sent)" if c["not_sent"] else ""),
        ),
        ("engine steps", sim["steps"]),
        ("mean batch size", f"{sim['mean_batch_size']:.1f}"),
        ("preemptions", sim["preemptions"]),
        ("prefix-cache hit rate (prompt tokens)", f"{sim['prefix_cache_hit_rate']:.1%}"),
        (
            "KV usage peak / time-weighted mean",
            f"{sim['kv_usage_peak']:.1%} / {sim['kv_usage_mean']:.1%}",
        ),
    ]
    mem = setup.memory
    memory = [
        (
            "GPU memory x utilisation",
            f"{mem.total_bytes / GIB:.2f} GiB x {mem.gpu_memory_utilization}",
        ),
        ("weights (per GPU)", f"{mem.weight_bytes / GIB:.2f} GiB"),
        ("peak activations", f"{mem.activation_bytes / GIB:.2f} GiB"),
        (
            "CUDA-graph pool + non-torch",
            f"{(mem.cudagraph_bytes + mem.non_torch_bytes) / GIB:.2f} GiB",
        ),
        (
            "KV cache",
            f"{mem.kv_cache_bytes / GIB:.2f} GiB = {mem.num_blocks} blocks of "
            f"{mem.block_size} tokens ({mem.kv_bytes_per_token} B/token/GPU)",
        ),
        ("KV capacity", f"{mem.kv_capacity_tokens:,} tokens"),
    ]
    settings = [
        (
            r["name"],
            r["value"]
            if not isinstance(r["value"], list)
            else f"{len(r['value'])} sizes, max {max(r['value'], default=0)}",
            r["category"],
            r["rule"],
        )
        for r in setup.settings.records()
    ]
    pricing = setup.pricing
    calibrated = (
        f"calibrated on measured kernels ({pricing.source})"
        if pricing.calibrated
        else f"**{pricing.source}** (roofline x fixed efficiencies: absolute times are estimates)"
    )
    priced = ", ".join(f"{k}: {v}" for k, v in sim["priced_with"].items())
    text = f"""# Simulation report

{setup.model.name} on {_gpus(cfg.parallel)} x {setup.hardware.display_name}
({_layout(cfg.parallel)}), {s["backend"].removeprefix("sim:")} ({cfg.entry_point} entry point),
weights {setup.model.resolve_weight_dtype(cfg.dtype)}. Workload: {result.workload.description};
seed {cfg.seed}. Cost profile `{pricing.profile}`: {calibrated}.
Kernel classes priced with: {priced}.

## Headline (vllm bench serve fields)

{md_table(headline, ("metric", "value"))}

{md_table(latency, ("latency (ms)", "mean", "median", "p90", "p99"))}

![latency CDFs]({plots[0]})

## Engine behaviour

{md_table(figures, ("figure", "value"))}

![throughput and KV usage]({plots[1]})

![batch composition]({plots[2]})
{_timeline_section(out_dir)}
## Memory plan (per GPU)

{md_table(memory, ("item", "value"))}

## Resolved engine settings

{md_table(settings, ("setting", "value", "category", "rule"))}

Files: `summary.json` (these figures, vllm bench field names), `requests.parquet` (one row per
request), `steps.parquet` (one row per engine step).
"""
    return write_md_html(out_dir, text)


def _timeline_section(out_dir: Path) -> str:
    """With trace=true: the timeline figure and where the trace is."""
    if not (out_dir / "timeline.png").is_file():
        return ""
    return """
## Timeline (trace=true)

Per step: prompt (prefill) and decode tokens, batch size, KV blocks in use (red: the pool),
waiting requests; below, each request's phases: queued, prefill chunks, decode, preempted.
`trace.json` holds the same as a Perfetto / Chrome trace (open it in ui.perfetto.dev): a track
of steps per replica with each step's batch, counters for KV blocks and the queue, and a track
per request. The figure is also `timeline.svg`.

![timeline](timeline.png)
"""


def _gpus(par) -> int:
    return par.dp * par.tp * par.pp


def _layout(par) -> str:
    """'dp 1 x tp 1', with pp, ep and the router when they are in play."""
    text = f"dp {par.dp} x tp {par.tp}" + (f" x pp {par.pp}" if par.pp > 1 else "")
    if par.ep > 1:
        text += f", ep {par.ep}"
    if par.dp > 1:
        text += f", router {par.router}"
    return text
