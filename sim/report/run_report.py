"""report.md and its plots, written into the run dir."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from sim.report.escape import md_code, md_text
from sim.report.html import md_table
from sim.report.html import write_report as write_md_html
from sim.report.plot_workers import Pending, PlotWorkers, done
from sim.run.overview import PLOTTED

GIB = 2**30


def draw_plots(result, out_dir: Path, workers: PlotWorkers | None = None) -> list[Pending]:
    """The report's three figures (sim/report/run_plots.py), drawn by `workers` while the
    caller goes on, or here, now, without them; write_report waits for them."""
    setup, view = result.setup, result.overview  # the steps as the plots read them
    view = replace(view, sample=view.sample[PLOTTED])  # the columns they read (sent to workers)
    requests = result.requests[["status", "ttft_s", "tpot_s", "e2el_s"]]  # what the CDFs read
    jobs = [
        ("plot_latency_cdfs", requests, out_dir / CDF),
        ("plot_batch_composition", view, setup.settings.max_num_batched_tokens, out_dir / BATCH),
        ("plot_throughput_kv", view, setup.memory.num_blocks, out_dir / THROUGHPUT),
    ]
    if workers is None:
        from sim.report import run_plots  # matplotlib: imported where a figure is drawn

        return [done(getattr(run_plots, name)(*args)) for name, *args in jobs]
    return [workers.submit(PLOTS, name, *args) for name, *args in jobs]


PLOTS = "sim.report.run_plots"
CDF, THROUGHPUT, BATCH = "latency_cdf.png", "throughput_kv.png", "batch_composition.png"


def write_report(result, out_dir: Path, plots: list[Pending] | None = None) -> Path:
    """report.md beside three PNG plots. `result` is a sim.run.simulate.RunResult; `plots`,
    from draw_plots, when its figures are being drawn already."""
    s, setup = result.summary, result.setup
    cfg, sim = setup.config, s["sim"]
    pending = plots if plots is not None else draw_plots(result, out_dir)
    plots = [CDF, THROUGHPUT, BATCH]
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
        f"calibrated on measured kernels ({md_text(pricing.source)})"
        if pricing.calibrated
        else f"**{md_text(pricing.source)}** (roofline x fixed efficiencies: absolute times are "
        "estimates)"
    )
    priced = md_text(", ".join(f"{k}: {v}" for k, v in sim["priced_with"].items()))
    # the model, the GPU and the cost profile may be a user's files, with their names
    model, gpu = md_text(setup.model.name), md_text(setup.hardware.display_name)
    backend = md_text(s["backend"].removeprefix("sim:"))
    workload = md_text(result.workload.description)
    text = f"""# Simulation report

{model} on {_gpus(cfg.parallel)} x {gpu}
({_layout(cfg.parallel)}), {backend} ({cfg.entry_point} entry point),
weights {setup.model.resolve_weight_dtype(cfg.dtype)}. Workload: {workload};
seed {cfg.seed}. Cost profile {md_code(pricing.profile)}: {calibrated}.
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
{_audit_section(s.get("audit"))}
Files: `summary.json` (these figures, vllm bench field names), `requests.parquet` (one row per
request), `steps.parquet` (one row per engine step).
"""
    for figure in pending:  # report.html embeds them
        figure.result()  # a figure that failed raises here
    return write_md_html(out_dir, text)


AUDIT_CHECKS = {
    "hbm_bandwidth": "each step's weights and touched experts within HBM bandwidth",
    "tensor_flops": "each step's GEMM FLOPs within the tensor-core peaks",
    "kernel_prices": "the kernels at the run's shapes within their bytes and FLOPs at the peaks",
    "link_bandwidth": "every collective within the links it crosses",
    "memory": "the memory plan within the engine's share and the GPU",
}


def _audit_section(audit: dict | None) -> str:
    """The physics audit (sim/run/audit.py): what was checked, and the tightest of each."""
    if not audit:
        return ""
    rows = [
        (AUDIT_CHECKS.get(name, name), f"{t['checked']:,}", f"{t['violations']:,}",
         f"{t['worst']['ratio']:.3g}: {t['worst']['subject']}, {t['worst']['where']}")
        for name, t in audit["checks"].items() if t["worst"]
    ]  # fmt: skip
    w = audit["worst"]  # its subject may be a user's GPU or model, by name
    found = (
        "**no figure beyond what the hardware allows**"
        if not audit["violations"]
        else f"**{audit['violations']:,} figure(s) beyond what the hardware allows**; the worst: "
        + md_text(f"{w['subject']}, {w['where']}: {w['detail']}")
    )
    return f"""
## Physics audit

{audit["checked_steps"]:,} steps, the kernels priced at their shapes and the memory plan, held
against the GPU's and the links' limits: {found}. A ratio is the least time (or memory) physics
needs over what the run gave it: 1 is at the limit.

{md_table(rows, ("check", "checked", "violations", "closest to its limit"))}
"""


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
