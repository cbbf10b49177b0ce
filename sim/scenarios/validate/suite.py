"""`python -m sim.validation_suite`: the committed validation report, rebuilt from the real runs.

It imports the real end-to-end runs in ../shared/data into case files (the vLLM and SGLang
rows on H100 and H200 of AIConfigurator's silicon sample, and LLMServingSim's four vLLM runs
with per-request timestamps), replays every case, and writes under --out (default
reports/validation/): the case files, validation.csv, summary.json, report.md and its plots,
with the issue's accuracy targets checked at the top of the report.

Nothing here is fitted to these runs: the kernel costs come from isolated-kernel tables
(calibration/profiles), the CPU overheads by release from calibration/engine_overheads.yaml.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

from sim.errors import UserError
from sim.paths import REPO_DIR, SHARED_DATA_DIR
from sim.scenarios.validate.importers import IMPLAUSIBLE_PREFILL_SHARE

DEFAULT_DATA = SHARED_DATA_DIR
DEFAULT_OUT = REPO_DIR / "reports" / "validation"
SILICON_BACKENDS = ("vllm", "sglang")
SILICON_SYSTEMS = ("h100_sxm", "h200_sxm")

# The accuracy targets the report checks: (name, selector, metric, statistic, limit %).
VLLM_ROWS = "vLLM rows of the silicon sample on H100/H200"
SGLANG_ROWS = "SGLang rows of the silicon sample on H100/H200"
TARGETS = (
    (VLLM_ROWS, "mean_tpot_ms", 10.0),
    (VLLM_ROWS, "output_throughput", 10.0),
    (VLLM_ROWS, "mean_ttft_ms", 15.0),
)
LSS_METRICS = ("p50_ttft_ms", "p90_ttft_ms", "p50_tpot_ms", "p90_tpot_ms")
LSS_LIMIT = 15.0


def build_cases(data: Path, out: Path) -> tuple[list[Path], list[str]]:
    """Case files from the shared data, written under out/cases; and what was skipped."""
    from sim.scenarios.validate.importers import llmservingsim, silicon, write_cases

    cases_dir = out / "cases"
    cases_dir.mkdir(parents=True, exist_ok=True)
    csv = data / "aiconfigurator" / "silicon_sample.csv"
    lss = data / "LLMServingSim" / "bench_examples"
    for need in (csv, lss):
        if not need.exists():
            raise UserError(
                f"{need} does not exist: the validation suite replays the real runs in "
                "../shared/data (give --data PATH where the shared data folder is elsewhere)"
            )
    notes = []
    files = []
    sil_out = cases_dir / "silicon.yaml"
    sil, skipped = silicon(csv, sil_out, SILICON_BACKENDS, SILICON_SYSTEMS)
    rel = os.path.relpath(csv, sil_out.parent)
    write_cases(
        sil,
        sil_out,
        f"Written by `python -m sim.validation_suite` (sim.importers silicon) from {rel}:\n"
        f"the {', '.join(SILICON_BACKENDS)} rows on {', '.join(SILICON_SYSTEMS)}. Measured "
        "values are AIConfigurator's (Apache-2.0).",
    )
    files.append(sil_out)
    notes += [f"silicon sample: skipped {n} rows ({why})" for why, n in sorted(skipped.items())]
    lss_out = cases_dir / "llmservingsim.yaml"
    runs = llmservingsim([str(lss)], lss_out)
    write_cases(
        runs,
        lss_out,
        "Written by `python -m sim.validation_suite` (sim.importers llmservingsim) from "
        f"{os.path.relpath(lss, lss_out.parent)}. Measured values are LLMServingSim's (MIT).",
    )
    files.append(lss_out)
    return files, notes


def _select(table: list[dict], name: str) -> list[dict]:
    engine = "vllm@" if name == VLLM_ROWS else "sglang@"
    return [
        r
        for r in table
        if r["case"].startswith("aic-")
        and r["engine"].startswith(engine)
        and r["hardware"] in ("h100-sxm", "h200")
    ]


def targets(table: list[dict]) -> list[dict]:
    """Each target with the value reached, over all rows and over the rows no importer flagged
    as physically inconsistent."""
    out = []

    def errs(rs, metric):
        return [
            abs(r["error_pct"])
            for r in rs
            if r["metric"] == metric and r["error_pct"] is not None and np.isfinite(r["error_pct"])
        ]

    for name, metric, limit in TARGETS:
        rs = _select(table, name)
        all_, clean = errs(rs, metric), errs([r for r in rs if not r["flags"]], metric)
        value = float(np.median(all_)) if all_ else None
        out.append(
            {
                "target": name,
                "metric": metric,
                "statistic": "median_abs_pct_error",
                "limit_pct": limit,
                "value_pct": value,
                "num_values": len(all_),
                "met": value is not None and value <= limit,
                "value_pct_unflagged": float(np.median(clean)) if clean else None,
                "num_unflagged": len(clean),
            }
        )
    for name, metric, _ in TARGETS:  # the same statistics for the SGLang rows, no target
        if name != VLLM_ROWS:
            continue
        rs = _select(table, SGLANG_ROWS)
        all_ = errs(rs, metric)
        if all_:
            out.append(
                {
                    "target": SGLANG_ROWS,
                    "metric": metric,
                    "statistic": "median_abs_pct_error",
                    "limit_pct": None,
                    "value_pct": float(np.median(all_)),
                    "num_values": len(all_),
                    "met": None,
                }
            )
    for r in table:
        if r["case"].startswith("llmservingsim-") and r["metric"] in LSS_METRICS:
            e = r["error_pct"]
            out.append(
                {
                    "target": r["case"],
                    "metric": r["metric"],
                    "statistic": "abs_pct_error",
                    "limit_pct": LSS_LIMIT,
                    "value_pct": None if e is None else abs(e),
                    "num_values": 1,
                    "met": e is not None and abs(e) <= LSS_LIMIT,
                }
            )
    return out


def client_sensitivity(cases, jobs, progress=None) -> dict:
    """The vLLM silicon rows replayed again with their clients' first wave spread evenly over
    one request lifetime (workload.stagger) instead of all at t=0: the rows do not record how
    the benchmark's clients started, and a closed loop of fixed lengths keeps whatever grouping
    its first wave had. Median absolute error per metric under that assumption."""
    from dataclasses import replace

    from sim.scenarios.validate.runs import rows as table_rows
    from sim.scenarios.validate.runs import run_all

    chosen = []
    for c in cases:
        if c.error or not (c.id.startswith("aic-") and c.data["engine"].startswith("vllm@")):
            continue
        if c.data["hardware"] not in ("h100-sxm", "h200"):
            continue
        workload = replace(c.config.workload, stagger=True)
        chosen.append(replace(c, config=replace(c.config, workload=workload)))
    table = table_rows(chosen, run_all(chosen, jobs, progress=progress))
    out = {}
    for metric in ("mean_tpot_ms", "output_throughput", "mean_ttft_ms"):
        errs = [
            abs(r["error_pct"])
            for r in table
            if r["metric"] == metric and r["error_pct"] is not None
        ]
        if errs:
            out[metric] = {"median_abs_pct_error": float(np.median(errs)), "num_values": len(errs)}
    return out


# What the analysis of each group of vLLM rows found (docs/validation.md has the detail); the
# report prints an explanation only for a group present in the table.
GROUP_CAUSES = {
    "gpt-oss-120b": "MXFP4 experts: the measured MXFP4 MoE tables run well above the bandwidth "
    "roofline at decode token counts, and at TP1 the table's MoE time alone is almost the whole "
    "measured step, leaving too little for attention, the dense layers and the CPU; on H200 the "
    "error falls from over-prediction at TP1 to under-prediction at TP8 (a per-GPU cost the "
    "tables miss). "
    "The 0.11.2 rows at concurrency 512 report a TPOT below the time to read the weights and "
    "512 sequences' KV once, and a TTFT that is most of their latency: the server ran far fewer "
    "requests at a time than the row's concurrency, through a limit the row does not record.",
    "llama-3.1-8b": "nvidia/Llama-3.1-8B-Instruct-FP8 on vLLM 0.12: several rows need more "
    "prefill compute than the GPU has (flagged: cached prefixes); every row is priced from the "
    "oldest measured release's FP8 GEMM table (0.14), slower at decode shapes than the later "
    "releases' tables.",
    "qwen3-235b-a22b": "block-FP8 MoE at TP1-4: expert load imbalance and the fused-MoE "
    "kernel's configuration per shape are not modelled.",
    "qwen3-32b": "dense bf16, priced by tables measured for the same GPU: the closest match.",
}


def group_table(table: list[dict]) -> list[str]:
    """The vLLM silicon rows by model and GPU: how many, the signed and absolute median TPOT
    error, the absolute median TTFT error, and how many were flagged; then the causes."""
    groups: dict[tuple, dict] = {}
    for r in _select(table, VLLM_ROWS):
        g = groups.setdefault((r["model"], r["hardware"], r["engine"]), {"cases": set()})
        g["cases"].add(r["case"])
        if r["flags"]:
            g.setdefault("flagged", set()).add(r["case"])
        if r["error_pct"] is not None:
            g.setdefault(r["metric"], []).append(r["error_pct"])
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

        def med(v, absolute):
            return f"{np.median(np.abs(v) if absolute else v):+.1f}%" if len(v) else ""

        lines.append(
            f"| {model} | {hw} | {engine} | {len(g['cases'])} | {med(tpot, False)} | "
            f"{med(tpot, True).lstrip('+')} | {med(ttft, True).lstrip('+')} | "
            f"{len(g.get('flagged', ()))} |"
        )
    models = sorted({m for m, _, _ in groups})
    lines += ["", *[f"- **{m}**: {GROUP_CAUSES[m]}" for m in models if m in GROUP_CAUSES]]
    lines.append(
        "- **TTFT, every model**: a closed loop of fixed lengths keeps the grouping its first "
        "wave had; with all clients starting together the simulator's prompts prefill in "
        "groups (some TTFTs too long), with the clients spread they prefill one at a time "
        "(too short, see the client-start table above); the rows do not record how the "
        "benchmark's clients started, nor the server's API-side latency."
    )
    return lines


def preamble(
    rows: list[dict],
    notes: list[str],
    command: str,
    spread: dict | None = None,
    table: list[dict] | None = None,
) -> str:
    def pct(v):
        return "" if v is None else f"{v:.1f}%"

    lines = [
        f"Regenerate with `{command}` (needs ../shared/data; it prints how long it took). "
        "Sources: AIConfigurator `silicon_sample.csv` (vLLM and "
        "SGLang rows on H100/H200, aggregated deployments; mean TTFT and TPOT at fixed "
        "concurrency, replayed as closed loops, output throughput by Little's law) and "
        "LLMServingSim `bench_examples` (four vLLM 0.19.0 runs, per-request timestamps, "
        "replayed request by request). Nothing is fitted to these runs: kernel costs come from "
        "isolated-kernel tables, CPU overheads by release from calibration/engine_overheads.yaml.",
        "",
        "## Targets",
        "",
        "| rows | metric | limit | reached | values | met | without flagged rows |",
        "|---|---|---|---|---|---|---|",
    ]
    for t in rows:
        met = {True: "yes", False: "**no**", None: "(no target)"}[t["met"]]
        unflagged = ""
        if t.get("value_pct_unflagged") is not None:
            unflagged = f"{pct(t['value_pct_unflagged'])} ({t['num_unflagged']})"
        stat = "median abs error" if t["statistic"] == "median_abs_pct_error" else "abs error"
        limit = "" if t["limit_pct"] is None else f"{t['limit_pct']:.0f}%"
        lines.append(
            f"| {t['target']} | {t['metric']} ({stat}) | {limit} | {pct(t['value_pct'])} | "
            f"{t['num_values']} | {met} | {unflagged} |"
        )
    lines += [
        "",
        "Flagged rows: the importer marks a silicon row `prefill_above_peak` when its measured "
        "request rate needs the prompts' linear layers alone to run at "
        f"{100 * IMPLAUSIBLE_PREFILL_SHARE:.0f}% or more of the GPUs' dense tensor peak, "
        "which leaves no time for "
        "decode: such runs must have reused cached prompt prefixes, which the row does not "
        "record, so the simulator (which prefills every prompt) cannot match them. They stay in "
        "every headline number; the last column shows the median without them.",
    ]
    if spread:
        lines += [
            "",
            "Client start (the vLLM rows again, their clients' first wave spread evenly over one "
            "request lifetime, `workload.stagger=true`, instead of all at t=0; the rows do not "
            "record how the benchmark's clients started, and with fixed lengths a closed loop "
            "keeps whatever grouping its first wave had):",
            "",
            "| metric | median abs error, clients together | clients spread |",
            "|---|---|---|",
        ]
        together = {t["metric"]: t["value_pct"] for t in rows if t["target"] == VLLM_ROWS}
        for metric, s in spread.items():
            lines.append(
                f"| {metric} | {pct(together.get(metric))} | {pct(s['median_abs_pct_error'])} |"
            )
    if table:
        lines += group_table(table)
    if notes:
        lines += ["", *[f"- {n}" for n in notes]]
    return "\n".join(lines) + "\n"


def _progress():
    """A progress printer for one pass over the cases: done / total, elapsed, time left."""
    started = time.perf_counter()

    def report(done: int, total: int) -> None:
        if done % max(1, total // 20) == 0 or done == total:
            el = time.perf_counter() - started
            eta = el / done * (total - done)
            print(f"  {done}/{total} cases  {el:5.0f} s elapsed, ~{eta:4.0f} s left", flush=True)

    return report


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim.validation_suite", description=__doc__)
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="the shared data folder")
    ap.add_argument("--out", default=str(DEFAULT_OUT), help="where the report goes")
    ap.add_argument("--jobs", type=int, default=None, help="cases at once (default: all cores)")
    ap.add_argument(
        "--no-sensitivity",
        action="store_true",
        help="skip re-running the vLLM silicon rows with their clients spread evenly",
    )
    args = ap.parse_args(argv)
    from sim.config import SimConfig
    from sim.scenarios.validate.cases import load_cases
    from sim.scenarios.validate.report import write_validation
    from sim.scenarios.validate.runs import run_all

    out = Path(args.out)
    t0 = time.perf_counter()
    try:
        files, notes = build_cases(Path(args.data), out)
        cases = load_cases(files, SimConfig.from_mapping({}))
    except UserError as exc:
        print(f"sim.validation_suite: error: {exc}", file=sys.stderr)
        return 2
    print(f"validation suite: {len(cases)} cases from {', '.join(str(f) for f in files)}")
    results = run_all(cases, args.jobs, progress=_progress())
    from sim.scenarios.validate.runs import rows as table_rows

    table = table_rows(cases, results)
    reached = targets(table)
    spread = None
    if not args.no_sensitivity:
        print("client-start sensitivity: the vLLM silicon rows again, clients spread evenly")
        spread = client_sensitivity(cases, args.jobs, _progress())
    command = "python -m sim.validation_suite"
    text = preamble(reached, notes, command, spread, table)
    extra = {"targets": reached} | ({"client_sensitivity": spread} if spread else {})
    v = write_validation(
        cases, results, out, "the real runs in ../shared/data", preamble=text, extra=extra
    )["validation"]
    print(f"{v['num_cases']} cases ({v['num_failed']} could not be simulated)")
    for t in reached:
        if t["statistic"] == "median_abs_pct_error":
            lim = "" if t["limit_pct"] is None else f" (target <= {t['limit_pct']:.0f}%)"
            print(f"  {t['target']}: {t['metric']} median |error| {t['value_pct']:.1f}%{lim}")
    lss = [t for t in reached if t["statistic"] == "abs_pct_error"]
    if lss:
        ok = sum(1 for t in lss if t["met"])
        print(f"  LLMServingSim runs: {ok}/{len(lss)} of p50/p90 TTFT/TPOT within 15%")
    print(f"Outputs: {out}/ (report.md, summary.json, validation.csv, cases/)")
    print(f"{(time.perf_counter() - t0) / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
