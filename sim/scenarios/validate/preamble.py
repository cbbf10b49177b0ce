"""The validation suite's preamble to report.md: how to regenerate it, its sources, the
targets and what each reached, the client-start sensitivity, the vLLM rows by model and GPU
with what the analysis of each group found, and what the importers skipped."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sim.report.escape import Md, md_code, md_row, md_text
from sim.scenarios.validate.importers.silicon import IMPLAUSIBLE_PREFILL_SHARE
from sim.scenarios.validate.settings import (
    FRONT_END_MS,
    SETTINGS,
    SettingsBand,
    inside_band,
    setting_name,
)
from sim.scenarios.validate.targets import VLLM_ROWS, MedianError, Target, select_rows
from sim.scenarios.validate.validation import REFUSED, Row

# What the analysis of each group of vLLM rows found (docs/validation.md has the detail); the
# report prints an explanation only for a group present in the table.
GROUP_CAUSES = {
    "gpt-oss-120b": "MXFP4 experts at their MoE tables' timings under the routing "
    "AIConfigurator prices served MoE models with (a power law: a long prefill waits on the "
    "hot expert, a decode batch reads fewer experts than independent picks would); TTFT is "
    "over on vLLM 0.18, which plans a step ahead (async scheduling), where the replayed "
    "clients, one step apart, wait behind each other's prefills. The 0.11.2 rows at "
    "concurrency 512 report a TPOT below the time to read the weights and their sequences' "
    "KV once (flagged decode_below_floor): the server ran far fewer requests at a time than "
    "the row's concurrency, through a limit the row does not record.",
    "llama-3.1-8b": "nvidia/Llama-3.1-8B-Instruct-FP8 on vLLM 0.12, run with the FP8 KV cache "
    "AIConfigurator's generator launches FP8 checkpoints with and, as its run holds rows that "
    "need more prefill than the GPU has (flagged), with prompts drawn from AIPerf's default "
    "pool of 100 and served from vLLM's prefix cache; TTFT is over at high concurrency (the "
    "first wave's prompts are cold) and under at 8,000-token prompts.",
    "qwen3-235b-a22b": "block-FP8 MoE on two and four H200s: the TP2 rows measure about the "
    "same TPOT at every concurrency, as if every expert were read each step, which the kernel "
    "tables do not show; rows whose experts span more GPUs than their TP (data-parallel "
    "attention) are skipped.",
    "qwen3-32b": "dense bf16, priced by tables measured for the same GPU: the closest match.",
}


STATISTICS = {
    "median_abs_pct_error": "median abs error",
    "abs_pct_error": "abs error",
    "worst_slice_median_abs_pct_error": "worst slice's median abs error",
    "max_abs_pct_of_gpu_memory": "largest abs error, as a share of the GPU's memory",
    "inside_band_pct": "share of measured values inside the band",
}


def _pct(v) -> str:
    return "" if v is None else f"{v:.1f}%"


def group_table(table: Sequence[Row]) -> list[str]:
    """The vLLM silicon rows by model and GPU: how many, the signed and absolute median TPOT
    error, the absolute median TTFT error, and how many were flagged; then the causes."""
    groups: dict[tuple, dict] = {}
    for r in select_rows(table, VLLM_ROWS):
        if r.metric == REFUSED:  # refused cases are listed at the report's end
            continue
        g = groups.setdefault((r.model, r.hardware, r.engine), {"cases": set()})
        g["cases"].add(r.case)
        if r.flags:
            g.setdefault("flagged", set()).add(r.case)
        if r.error_pct is not None:
            g.setdefault(r.metric, []).append(r.error_pct)
    if not groups:
        return []
    lines = [
        "",
        "### The vLLM rows by model and GPU",
        "",
        "| model | GPU | engine | cases | TPOT median error | TPOT median abs error | "
        "TTFT median abs error | flagged |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (model, hw, engine), g in sorted(groups.items()):
        tpot, ttft = g.get("mean_tpot_ms", []), g.get("mean_ttft_ms", [])
        errors = (_median(tpot, False), _median(tpot, True).lstrip("+"))
        errors += (_median(ttft, True).lstrip("+"), len(g.get("flagged", ())))
        lines.append(md_row((model, hw, engine, len(g["cases"]), *errors)))
    models = sorted({m for m, _, _ in groups})
    lines += ["", *[f"- **{md_text(m)}**: {GROUP_CAUSES[m]}" for m in models if m in GROUP_CAUSES]]
    lines.append(
        "- **TTFT, every model**: each row is replayed as AIConfigurator's benchmark runners "
        "measure (ten requests per client, every client starting at once, that burst counted) "
        "against the server its generator launches (a token budget of concurrency + ISL + "
        "1500, so one or two prompts share a prefill step); neither is recorded in the row, so "
        "the band also runs the first wave left out and the engine's default launch."
    )
    return lines


def _median(errors: list[float], absolute: bool) -> str:
    """The signed median percent error (of the absolute errors when `absolute`), or ""."""
    return f"{np.median(np.abs(errors) if absolute else errors):+.1f}%" if len(errors) else ""


def preamble(
    reached: Sequence[Target],
    notes: list[str],
    command: str,
    spread: dict[str, MedianError] | None = None,
    table: Sequence[Row] | None = None,
    band: SettingsBand | None = None,
) -> str:
    lines = [
        f"Regenerate with {md_code(command)} (needs ../shared/data; it prints how long it took). "
        "Sources: AIConfigurator `silicon_sample.csv` (vLLM and "
        "SGLang rows on H100/H200, aggregated deployments; mean TTFT and TPOT at fixed "
        "concurrency, replayed as closed loops, output throughput by Little's law) and "
        "LLMServingSim `bench_examples` (four vLLM 0.19.0 runs, per-request timestamps, "
        "replayed request by request), and the committed case files of public runs under "
        "`validation/` (AccelMark and GPUStack's performance lab; sources and assumptions in "
        "validation/README.md). Nothing is fitted to these runs: kernel costs come from "
        "isolated-kernel tables, CPU overheads by release from calibration/engine_overheads.yaml.",
        *_targets(reached),
        "",
        "Flagged rows: the importer marks a silicon row `prefill_above_peak` when its measured "
        "request rate needs the prompts' linear layers alone to run at "
        f"{100 * IMPLAUSIBLE_PREFILL_SHARE:.0f}% or more of the GPUs' dense tensor peak, "
        "which leaves no time for "
        "decode: such runs must have reused cached prompt prefixes, which the row does not "
        "record, so the simulator (which prefills every prompt) cannot match them; and "
        "`decode_below_floor` when its measured TPOT is below the time to read, at the GPUs' "
        "HBM peak, the KV of its concurrency's sequences at their mean context and the weights "
        "they touch: the server ran fewer requests at a time than the row's concurrency. They "
        "stay in every headline number; the last column shows the median without them.",
    ]
    if spread:
        lines += _spread(reached, spread)
    if band is not None:
        lines += band_lines(band, table or [])
    if table:
        lines += group_table(table)
    if notes:
        lines += ["", *[f"- {md_text(n)}" for n in notes]]  # the importers' (a data file's)
    return "\n".join(lines) + "\n"


def _targets(reached: Sequence[Target]) -> list[str]:
    lines = [
        "",
        "## Targets",
        "",
        "| rows | metric | limit | reached | values | met | without flagged rows |",
        "|---|---|---|---|---|---|---|",
    ]
    for t in reached:
        met = {True: "yes", False: Md("**no**"), None: "(no target)"}[t.met]
        if t.met is None and t.limit_pct is not None:
            met = "(no values)"
        unflagged = ""
        if t.unflagged is not None and t.unflagged.median_abs_pct_error is not None:
            unflagged = f"{_pct(t.unflagged.median_abs_pct_error)} ({t.unflagged.num_values})"
        stat = STATISTICS.get(t.statistic, t.statistic)
        limit = "" if t.limit_pct is None else f"{t.limit_pct:.0f}%"
        cells = (t.target, f"{t.metric} ({stat})", limit, _pct(t.value_pct), t.num_values)
        lines.append(md_row((*cells, met, unflagged)))
    return lines


def _spread(reached: Sequence[Target], spread: dict[str, MedianError]) -> list[str]:
    """The client-start sensitivity beside the targets' values."""
    lines = [
        "",
        "Client start (the vLLM rows again, their clients' first wave spread evenly over one "
        "request lifetime, `workload.stagger=true`, instead of all at t=0; the rows do not "
        "record how the benchmark's clients started, and with fixed lengths a closed loop "
        "keeps whatever grouping its first wave had):",
        "",
        "| metric | median abs error, clients together | clients spread |",
        "|---|---|---|",
    ]
    together = {t.metric: t.value_pct for t in reached if t.target == VLLM_ROWS}
    for metric, s in spread.items():
        lines.append(md_row((metric, _pct(together.get(metric)), _pct(s.median_abs_pct_error))))
    return lines


def band_lines(band: SettingsBand, table: Sequence[Row]) -> list[str]:
    """The plausible benchmark settings: the median absolute error per setting and metric, and
    per metric the share of measured values inside the band of predictions."""
    accs = {s: band.accuracy(s) for s in SETTINGS}
    metrics = sorted({m for a in accs.values() for m in a.median_abs_pct_error})
    engines = sorted({str(c.data.get("engine", "?")).split("@")[0] for c in band.cases})
    lines = [
        "",
        "### Plausible benchmark settings",
        "",
        f"The sources do not say how the benchmark's clients started nor whether the server's "
        f"prefix cache was warm from an earlier run of the same prompts, so the "
        f"{len(band.cases)} {md_text('/'.join(engines)) or 'chosen'} cases are simulated under "
        "every plausible setting (`workload.stagger`, `workload.cache_warm` and, for a closed "
        "loop, its first wave treated the other way: counted, `workload.warmup_requests=0`, "
        "where the case leaves a warm-up out, left out, one wave more sent first, where the "
        "case counts it, as the silicon cases do after AIConfigurator's benchmark runners; "
        "and where an importer assumed the server's launch arguments, as for the silicon rows "
        "launched as AIConfigurator's generator launches them, the engine's defaults instead; "
        "for a closed loop that does not state its server's front end, each request reaching "
        f"the engine {FRONT_END_MS:g} ms after its send, `workload.frontend_ms`, so that a "
        "client's next request misses the step that starts as its previous one ends; a "
        "setting a case states is kept; an open loop has no client start to vary). "
        "validation.csv's "
        "band_low/band_high give each case's lowest and highest prediction over them "
        f"({band.num_runs} extra simulations, {band.num_failed} failed).",
        "",
        md_row(("setting", "cases", *metrics)),
        "|---|---|" + "---|" * len(metrics),
    ]
    for s, a in accs.items():
        cells = [_pct(a.median_abs_pct_error.get(m)) for m in metrics]
        n = len(band.results.get(s, {}))
        lines.append(md_row((setting_name(s), n, *cells)))
    lines += ["", "(median absolute error per metric)"]
    inside = inside_band(table)
    if inside:
        lines += ["", "| metric | measured values inside the band | values with a band |"]
        lines.append("|---|---|---|")
        for m, (f, n) in inside.items():
            lines.append(md_row((m, f"{100 * f:.0f}%", n)))
    return lines
