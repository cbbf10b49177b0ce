"""scenario=disagg's outputs: summary.json, probes.csv, report.md with the splits probed and
the TTFT of each in parts."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from sim.report.disagg_run import plot_ttft_split
from sim.report.figures import plt, save_png
from sim.report.html import write_report
from sim.run.disagg_driver import TTFT_PARTS as PARTS
from sim.run.outputs import atomic_write, write_json


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
    return save_png(fig, path)


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
