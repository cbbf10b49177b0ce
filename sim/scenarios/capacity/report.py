"""scenario=capacity's outputs: summary.json, probes.csv, report.md and capacity.png."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from sim.report.escape import md_text
from sim.report.figures import plain_ticks, plt, save_png
from sim.report.html import write_report
from sim.report.placement import place_labels
from sim.run.outputs import atomic_write, write_json
from sim.scenarios.capacity.result import CapacityResult, Probe, ReplicaAnswer


def _slo_text(r: CapacityResult) -> str:
    return " and ".join(f"p99 {m.upper()} <= {t:g} ms" for m, t in r.targets_ms.items())


def headline(r: CapacityResult) -> str:
    """The answer in one sentence."""
    slo = _slo_text(r)
    a, cost = r.answer, r.cost
    where = f"{r.model} on {cost.gpus} x {r.hardware} ({r.engine})"
    if isinstance(a, ReplicaAnswer):
        text = (
            f"{a.replicas} replica(s) ({cost.gpus} GPUs) of {r.model} on {r.hardware} "
            f"({r.engine}) serve {a.rate:g} req/s within {slo}"
        )
    elif not a.capacity_rate:
        text = f"{where} does not meet {slo} even at light load"
    else:
        upper = a.capacity_rate_upper
        text = (
            f"{where} serves {a.capacity_rate:.2f} req/s within {slo}"
            + (f" (not at {upper:.2f})" if upper else "")
            + f", {a.capacity_rate / a.saturated_rate:.0%} of its saturated "
            f"{a.saturated_rate:.2f} req/s"
        )
    if cost.cost_per_million_output_tokens:
        text += (
            f"; at ${cost.gpu_hour_usd:.2f} per GPU-hour that is "
            f"${cost.cost_per_million_output_tokens:.3f} per million output tokens"
        )
    return text + "."


def plot_probes(r: CapacityResult, path: Path) -> str:
    probes = pd.DataFrame([p.record() for p in r.probes])
    x = "replicas" if r.answer.mode == "replicas" else "rate"
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    colour = {"meets": "C2", "fails": "C3", "unclear": "C1", "overloaded": "C7"}
    probes = probes[probes["seeds"] > 0]  # overloaded rates were not simulated
    ax = axes[0]
    clipped = probes["margin_half_width"].clip(upper=10)
    for v, part in probes.groupby("verdict"):
        ax.errorbar(part[x], part["margin"], yerr=clipped[part.index],
                    fmt="o", color=colour[v], label=v, capsize=3)  # fmt: skip
    ax.axhline(1.0, color="grey", ls="--", lw=1)
    if x == "rate":
        ax.axvline(r.answer.saturated_rate, color="C7", ls=":", lw=1, label="saturated")
    ax.set_xlabel("request rate (req/s)" if x == "rate" else "replicas")
    ax.set_ylabel("worst p99 / SLO (mean over seeds)")
    ax.set_yscale("log")
    plain_ticks(ax)
    ax.set_title("probes in order (numbers); bars: interval", fontsize=9)
    legend = ax.legend(fontsize=7)
    for ax, m in zip(axes[1:], ("ttft", "tpot"), strict=True):
        part = probes.sort_values(x)
        ax.plot(part[x], part[f"p99_{m}_ms"], marker="o")
        if m in r.targets_ms:
            ax.axhline(r.targets_ms[m], color="red", ls=":", lw=1, label="SLO")
            ax.legend(fontsize=7)
        if x == "rate" and r.answer.capacity_rate:
            ax.axvline(r.answer.capacity_rate, color="C2", lw=1)
        ax.set_xlabel("request rate (req/s)" if x == "rate" else "replicas")
        ax.set_ylabel(f"p99 {m.upper()} (ms)")
        ax.set_yscale("log")
        plain_ticks(ax)
        ax.grid(alpha=0.3, which="both")
    axes[0].grid(alpha=0.3, which="both")
    fig.suptitle("Capacity search: each probe's margin (worse p99 over its SLO) and p99s")
    fig.tight_layout()
    # numbered as in the report's table, clear of each other, the error bars and the legend
    bars = [(r[x], r["margin"] - h, r[x], r["margin"] + h)
            for (_, r), h in zip(probes.iterrows(), clipped, strict=True)]  # fmt: skip
    place_labels(axes[0], probes[x].tolist(), probes["margin"].tolist(),
                 [str(k + 1) for k in probes.index], fontsize=7, avoid=bars,
                 clear_of=[legend])  # fmt: skip
    return save_png(fig, path)


def _stop_text(r: CapacityResult) -> str:
    """Why the search ended, and what the noise left open."""
    a = r.answer
    if isinstance(a, ReplicaAnswer):
        text = "Replica counts were bisected to the fewest that meet the SLOs."
        if a.unclear_replicas:
            text += (
                f" {', '.join(map(str, a.unclear_replicas))} replica(s) stayed too close to "
                "call after capacity.max_seeds seeds and count as not enough."
            )
        return text
    why = {
        "tolerance": f"the bracket was narrower than capacity.tolerance ({r.tolerance:.0%})",
        "noise": "two probes in a row stayed too close to call: finer steps are below the noise",
        "max_probes": "capacity.max_probes probes were spent",
        "no rate meets the SLOs": "no rate tried meets the SLOs",
    }[a.stopped_by]
    text = f"The search stopped because {why}."
    if a.unclear_rates:
        rates = ", ".join(f"{rate:.2f}" for rate in a.unclear_rates)
        text += (
            f" Probes at {rates} req/s stayed too close to call after capacity.max_seeds seeds "
            "(the p99 of a finite run is noisy): the capacity is at least the rate shown to "
            "meet, and these rates could not be told apart from the SLO; more requests per "
            "simulation (workload.num_requests) or seeds narrow it."
        )
    return text


def _probe_row(k: int, p: Probe, saturated_rate_per_replica: float) -> str:
    if not p.seeded.seeds:
        return (
            f"| {k} | {p.rate:.3f} | {p.replicas} | 0 | overloaded: at or above "
            f"{p.replicas} x the saturated {saturated_rate_per_replica:.2f} req/s, "
            "not simulated | - | - | - | - | - |"
        )
    s = p.seeded
    return (
        f"| {k} | {p.rate:.3f} | {p.replicas} | {s.seeds} | {s.verdict} | "
        f"{s.margin:.3f} ± {s.margin_half_width:.3f} | {p.p99_ttft_ms:,.1f} | "
        f"{p.p99_tpot_ms:.1f} | {p.request_throughput:.2f} | "
        f"{p.output_throughput:,.0f} |"
    )


def _cost_text(r: CapacityResult) -> str:
    cost = r.cost
    if not cost.cost_per_million_output_tokens:
        return (
            "no price: set capacity.gpu_hour_usd=PRICE (the hardware catalogue has none for "
            "this GPU)"
        )
    at = r.answer.at_capacity
    gpus = f"{cost.gpus} GPU" + ("s" if cost.gpus > 1 else "")
    return (
        f"${cost.cost_per_million_output_tokens:.3f} per million output tokens "
        f"({gpus} x ${cost.gpu_hour_usd:.2f}/h from {cost.price_source}, over "
        f"{at.output_throughput_at_rate:,.0f} output tokens/s: the capacity x "
        f"{at.output_tokens_per_request:.1f} output tokens per request)"
    )


def report_text(r: CapacityResult, plot: str) -> str:
    rows = [
        "| # | rate (req/s) | replicas | seeds | verdict | worst p99 / SLO | p99 TTFT (ms) "
        "| p99 TPOT (ms) | req/s done | output tok/s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    per_replica = r.answer.saturated_rate_per_replica
    rows += [_probe_row(k, p, per_replica) for k, p in enumerate(r.probes, 1)]
    slos = ", ".join(f"{m}_ms <= {t:g}" for m, t in r.targets_ms.items())
    # the model, the GPU, the workload and the price's source may name a user's files
    return f"""# Capacity within latency SLOs

**{md_text(headline(r))}**

- Workload: {md_text(r.workload)}, {r.num_requests} requests per simulation; SLOs on p99
  ({slos}); every probe's verdict is a
  {r.confidence:.0%} Student t interval of the worse p99 / SLO over its seeds (the same
  seeds at every probe).
- Cost: {md_text(_cost_text(r))}.
- {_stop_text(r)}
- {r.simulations_run} simulations in {r.wall_time_s:.1f} s.

![{plot}]({plot})

## Probes

{chr(10).join(rows)}
"""


def write_capacity_outputs(r: CapacityResult, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame([p.record() for p in r.probes])
    atomic_write(out_dir / "probes.csv", lambda tmp: frame.to_csv(tmp, index=False))
    plot = plot_probes(r, out_dir / "capacity.png")
    write_report(out_dir, report_text(r, plot))
    write_json(out_dir / "summary.json", r.summary)
