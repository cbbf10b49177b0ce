"""scenario=disagg's outputs: summary.json, probes.csv, report.md with the splits probed and
the TTFT of each in parts."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from sim.report.disagg_run import plot_ttft_split
from sim.report.escape import md_text
from sim.report.figures import plot_text, plt, save_png
from sim.report.html import write_report
from sim.run.outputs import atomic_write, write_json
from sim.scenarios.disagg.result import Colocated, DisaggResult, Probe


def _slo_text(r: DisaggResult) -> str:
    return " and ".join(f"p99 {m.upper()} <= {t:g} ms" for m, t in r.targets_ms.items())


def _saved_text(col: Colocated, best: Probe) -> str:
    saved = col.gpus - best.gpus
    if saved > 0:
        return f": disaggregation saves {saved} GPUs ({saved / col.gpus:.0%})"
    return ": the same GPU count" if saved == 0 else f": disaggregation takes {-saved} GPUs more"


def headline(r: DisaggResult) -> str:
    """scenario=disagg's answer in one sentence."""
    slo = _slo_text(r)
    b = r.best
    if b is None:
        text = (
            f"No split of up to {r.max_replicas} prefill and {r.max_replicas} decode "
            f"replicas serves {r.rate:g} req/s of {r.model} within {slo}"
        )
    else:
        pp, dp = r.prefill_pool, r.decode_pool
        text = (
            f"{b.prefill_replicas} prefill x {pp.tp} {pp.hardware} + "
            f"{b.decode_replicas} decode x {dp.tp} {dp.hardware} ({b.gpus} GPUs) "
            f"serve {r.rate:g} req/s of {r.model} within {slo}"
        )
    col = r.colocated
    if col is not None and col.gpus:
        text += (
            f"; colocated, {col.replicas} replicas x {col.tp} {col.hardware} ({col.gpus} GPUs) do"
        )
        if b is not None:
            text += _saved_text(col, b)
    elif col is not None:
        text += "; colocated replicas do not within the search"
    return text + "."


def plot_probes(r: DisaggResult, path: Path) -> str:
    """Each probed split: decode replicas against prefill replicas, coloured by verdict."""
    probes = pd.DataFrame([p.record() for p in r.probes])
    fig, ax = plt.subplots(figsize=(7, 4.6))
    colour = {"meets": "C2", "fails": "C3", "unclear": "C1"}
    for v, part in probes.groupby("verdict"):
        ax.scatter(part["prefill_replicas"], part["decode_replicas"], s=160, color=colour[v],
                   label=v, zorder=3)  # fmt: skip
    for _, row in probes.iterrows():
        ax.annotate(f"{int(row['gpus'])}", (row["prefill_replicas"], row["decode_replicas"]),
                    ha="center", va="center", fontsize=7, color="white", zorder=4)  # fmt: skip
    if r.best is not None:
        b = r.best
        ax.scatter([b.prefill_replicas], [b.decode_replicas], s=420, facecolors="none",
                   edgecolors="black", lw=1.5, label="fewest GPUs", zorder=5)  # fmt: skip
    pp, dp = r.prefill_pool, r.decode_pool  # a GPU's name: maybe a user's file's
    ax.set_xlabel(plot_text(f"prefill replicas (x {pp.tp} {pp.hardware})"))
    ax.set_ylabel(plot_text(f"decode replicas (x {dp.tp} {dp.hardware})"))
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("Splits probed at the rate (numbers: GPUs)", fontsize=10)
    fig.tight_layout()
    return save_png(fig, path)


def _probe_row(k: int, p: Probe) -> str:
    s = p.seeded
    parts = " / ".join(f"{ms:,.1f}" for ms in p.ttft_parts_ms.values())
    return (
        f"| {k} | {p.prefill_replicas} | {p.decode_replicas} | {p.gpus} | "
        f"{s.seeds} | {s.verdict} | {s.margin:.3f} ± {s.margin_half_width:.3f} | "
        f"{s.mean('p99_ttft_ms'):,.1f} | {s.mean('p99_tpot_ms'):.1f} | "
        f"{s.mean('prefill_busy'):.0%} | {s.mean('decode_busy'):.0%} | {parts} |"
    )


def _colocated_text(col: Colocated | None) -> str:
    if col is None:
        return "Not searched (disagg.colocated=false)."
    if col.answer is None:
        return f"Colocated replicas: {md_text(col.why)}"
    at = col.answer.at_capacity
    return (
        f"Colocated (prefill and decode on the same GPUs, scenario=capacity's replica "
        f"search, the same SLOs and seeds): **{col.replicas} replicas x {col.tp} "
        f"{md_text(col.hardware)} = {col.gpus} GPUs**, p99 TTFT {at.p99_ttft_ms:,.0f} ms, "
        f"p99 TPOT {at.p99_tpot_ms:.1f} ms ({col.simulations_run} simulations)."
    )


def report_text(r: DisaggResult, plots: list[str]) -> str:
    rows = [
        "| # | prefill | decode | GPUs | seeds | verdict | worst p99 / SLO | p99 TTFT (ms) "
        "| p99 TPOT (ms) | prefill busy | decode busy | mean TTFT: queue / prefill / wait / "
        "transfer / first decode (ms) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    rows += [_probe_row(k, p) for k, p in enumerate(r.probes, 1)]
    per = ", ".join(
        f"{f.prefill_replicas} prefill -> "
        + (f"{f.decode_replicas} decode ({f.gpus} GPUs)" if f.gpus else "none meets")
        for f in r.per_prefill
    )
    link = r.link
    when = "layer by layer" if r.kv_transfer_layerwise else "after each prefill"
    slos = ", ".join(f"{m}_ms <= {t:g}" for m, t in r.targets_ms.items())
    # the model, the GPUs and the link may be a user's files, by name
    return f"""# Disaggregated prefill/decode: the split that meets the SLOs

**{md_text(headline(r))}**

- {md_text(r.model)}, {md_text(r.engine)}, {r.num_requests} requests per simulation at {r.rate:g}
  req/s; SLOs on p99 ({slos}); each probe's
  verdict is a 95% Student t interval of the worse p99 / SLO over its seeds.
- KV over {md_text(link.display_name)} ({link.bytes_per_s / 1e9:g} GB/s per GPU,
  {link.latency_s * 1e6:g} us per transfer), {when}.
- Fewest decode replicas for each prefill count: {per}.
- {_colocated_text(r.colocated)}
- {r.simulations_run} simulations in {r.wall_time_s:.1f} s.

![probes]({plots[0]})

![TTFT split]({plots[1]})

## Probes

{chr(10).join(rows)}
"""


def write_search_outputs(r: DisaggResult, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame([p.record() for p in r.probes])
    atomic_write(out_dir / "probes.csv", lambda tmp: frame.to_csv(tmp, index=False))
    shown = sorted(r.probes, key=lambda p: (p.prefill_replicas, p.decode_replicas))
    bars = {
        f"{p.prefill_replicas}P+{p.decode_replicas}D\n{p.verdict}": p.ttft_parts_ms for p in shown
    }
    top = 1.5 * r.targets_ms["ttft"] if "ttft" in r.targets_ms else None
    plots = [
        plot_probes(r, out_dir / "splits.png"),
        plot_ttft_split(bars, out_dir / "ttft_split.png", "Mean TTFT in parts, each split probed",
                        top),
    ]  # fmt: skip
    write_report(out_dir, report_text(r, plots))
    write_json(out_dir / "summary.json", r.summary)
