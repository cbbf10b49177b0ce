"""scenario=capacity's outputs: summary.json, probes.csv, report.md and capacity.png."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from sim.report.html import write_report
from sim.run.outputs import atomic_write, write_json


def headline(s: dict) -> str:
    """The answer in one sentence, from the summary."""
    slo = " and ".join(
        f"p99 {k.removesuffix('_ms').upper()} <= {v:g} ms" for k, v in s["slo"].items()
    )
    where = f"{s['model']} on {s['gpus']} x {s['hardware']} ({s['engine']})"
    if s["mode"] == "replicas":
        text = (
            f"{s['replicas']} replica(s) ({s['gpus']} GPUs) of {s['model']} on {s['hardware']} "
            f"({s['engine']}) serve {s['rate']:g} req/s within {slo}"
        )
    elif not s["capacity_rate"]:
        text = f"{where} does not meet {slo} even at light load"
    else:
        upper = s.get("capacity_rate_upper")
        text = (
            f"{where} serves {s['capacity_rate']:.2f} req/s within {slo}"
            + (f" (not at {upper:.2f})" if upper else "")
            + f", {s['capacity_rate'] / s['saturated_rate']:.0%} of its saturated "
            f"{s['saturated_rate']:.2f} req/s"
        )
    if s.get("cost_per_million_output_tokens"):
        text += (
            f"; at ${s['gpu_hour_usd']:.2f} per GPU-hour that is "
            f"${s['cost_per_million_output_tokens']:.3f} per million output tokens"
        )
    return text + "."


def plot_probes(s: dict, path: Path) -> str:
    from sim.report.figures import plt, save_png
    from sim.scenarios.sweep.report import _plain_ticks

    probes = pd.DataFrame(s["probes"])
    x = "replicas" if s["mode"] == "replicas" else "rate"
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    colour = {"meets": "C2", "fails": "C3", "unclear": "C1", "overloaded": "C7"}
    probes = probes[probes["seeds"] > 0]  # overloaded rates were not simulated
    ax = axes[0]
    for v, part in probes.groupby("verdict"):
        ax.errorbar(part[x], part["margin"], yerr=part["margin_half_width"].clip(upper=10),
                    fmt="o", color=colour[v], label=v, capsize=3)  # fmt: skip
    for k, r in probes.iterrows():  # numbered as in the report's table
        ax.annotate(str(k + 1), (r[x], r["margin"]), fontsize=6, xytext=(3, 3),
                    textcoords="offset points")  # fmt: skip
    ax.axhline(1.0, color="grey", ls="--", lw=1)
    if x == "rate":
        ax.axvline(s["saturated_rate"], color="C7", ls=":", lw=1, label="saturated")
    ax.set_xlabel("request rate (req/s)" if x == "rate" else "replicas")
    ax.set_ylabel("worst p99 / SLO (mean over seeds)")
    ax.set_yscale("log")
    _plain_ticks(ax)
    ax.set_title("probes in order (numbers); bars: interval", fontsize=9)
    ax.legend(fontsize=7)
    for ax, m in zip(axes[1:], ("ttft", "tpot"), strict=True):
        part = probes.sort_values(x)
        ax.plot(part[x], part[f"p99_{m}_ms"], marker="o")
        if f"{m}_ms" in s["slo"]:
            ax.axhline(s["slo"][f"{m}_ms"], color="red", ls=":", lw=1, label="SLO")
            ax.legend(fontsize=7)
        if x == "rate" and s.get("capacity_rate"):
            ax.axvline(s["capacity_rate"], color="C2", lw=1)
        ax.set_xlabel("request rate (req/s)" if x == "rate" else "replicas")
        ax.set_ylabel(f"p99 {m.upper()} (ms)")
        ax.set_yscale("log")
        _plain_ticks(ax)
        ax.grid(alpha=0.3, which="both")
    axes[0].grid(alpha=0.3, which="both")
    fig.suptitle("Capacity search: each probe's margin (worse p99 over its SLO) and p99s")
    fig.tight_layout()
    return save_png(fig, path)


def _stop_text(s: dict) -> str:
    """Why the search ended, and what the noise left open."""
    if s["mode"] == "replicas":
        text = "Replica counts were bisected to the fewest that meet the SLOs."
        if s["unclear_replicas"]:
            text += (
                f" {', '.join(map(str, s['unclear_replicas']))} replica(s) stayed too close to "
                "call after capacity.max_seeds seeds and count as not enough."
            )
        return text
    why = {
        "tolerance": f"the bracket was narrower than capacity.tolerance ({s['tolerance']:.0%})",
        "noise": "two probes in a row stayed too close to call: finer steps are below the noise",
        "max_probes": "capacity.max_probes probes were spent",
        "no rate meets the SLOs": "no rate tried meets the SLOs",
    }[s["stopped_by"]]
    text = f"The search stopped because {why}."
    if s["unclear_rates"]:
        rates = ", ".join(f"{r:.2f}" for r in s["unclear_rates"])
        text += (
            f" Probes at {rates} req/s stayed too close to call after capacity.max_seeds seeds "
            "(the p99 of a finite run is noisy): the capacity is at least the rate shown to "
            "meet, and these rates could not be told apart from the SLO; more requests per "
            "simulation (workload.num_requests) or seeds narrow it."
        )
    return text


def report_text(s: dict, plot: str) -> str:
    probes = s["probes"]
    rows = [
        "| # | rate (req/s) | replicas | seeds | verdict | worst p99 / SLO | p99 TTFT (ms) "
        "| p99 TPOT (ms) | req/s done | output tok/s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for k, p in enumerate(probes, 1):
        if not p["seeds"]:
            rows.append(
                f"| {k} | {p['rate']:.3f} | {p['replicas']} | 0 | overloaded: at or above "
                f"{p['replicas']} x the saturated {s['saturated_rate_per_replica']:.2f} req/s, "
                "not simulated | - | - | - | - | - |"
            )
            continue
        rows.append(
            f"| {k} | {p['rate']:.3f} | {p['replicas']} | {p['seeds']} | {p['verdict']} | "
            f"{p['margin']:.3f} ± {p['margin_half_width']:.3f} | {p['p99_ttft_ms']:,.1f} | "
            f"{p['p99_tpot_ms']:.1f} | {p['request_throughput']:.2f} | "
            f"{p['output_throughput']:,.0f} |"
        )
    gpus = f"{s['gpus']} GPU" + ("s" if s["gpus"] > 1 else "")
    cost = (
        f"${s['cost_per_million_output_tokens']:.3f} per million output tokens "
        f"({gpus} x ${s['gpu_hour_usd']:.2f}/h from {s['price_source']}, over "
        f"{s['output_throughput_at_capacity']:,.0f} output tokens/s: the capacity x "
        f"{s['output_tokens_per_request']:.1f} output tokens per request)"
        if s.get("cost_per_million_output_tokens")
        else "no price: set capacity.gpu_hour_usd=PRICE (the hardware catalogue has none for "
        "this GPU)"
    )
    noise = _stop_text(s)
    return f"""# Capacity within latency SLOs

**{headline(s)}**

- Workload: {s["workload"]}, {s["num_requests"]} requests per simulation; SLOs on p99
  ({", ".join(f"{k} <= {v:g}" for k, v in s["slo"].items())}); every probe's verdict is a
  {s["confidence"]:.0%} Student t interval of the worse p99 / SLO over its seeds (the same
  seeds at every probe).
- Cost: {cost}.
- {noise}
- {s["simulations_run"]} simulations in {s["wall_time_s"]:.1f} s.

![{plot}]({plot})

## Probes

{chr(10).join(rows)}
"""


def write_capacity_outputs(s: dict, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(s["probes"])
    atomic_write(out_dir / "probes.csv", lambda tmp: frame.to_csv(tmp, index=False))
    plot = plot_probes(s, out_dir / "capacity.png")
    write_report(out_dir, report_text(s, plot))
    write_json(out_dir / "summary.json", s)
